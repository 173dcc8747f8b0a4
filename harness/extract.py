"""Feature extraction for one backbone × dataset: one forward pass per image, into the feature cache.

Images whose every requested entry is already cached are never decoded. An image that cannot be
decoded is an error naming the file (`harness.datasets.decode`: truncated files, non-images, 16-bit and
CMYK pixels). The stage writes `extraction.json` (the backbone's identity and the resolved feature
requests) that probes read instead of importing any backbone library.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from harness.datasets.decode import ImageDecodeError, decode_rgb
from harness.datasets.manifest import Manifest
from harness.feature_cache import FeatureCache, entry_keys, write_cache_stats
from harness.preprocessing import Preprocess

log = logging.getLogger(__name__)
__all__ = ["EarlyDecode", "FeatureRequest", "ImageDecodeError", "extract_dataset", "load_image"]


@dataclass(frozen=True)
class FeatureRequest:
    mode: str  # "pooled" or "dense"
    pooling: str = "default"
    layers: tuple[int, ...] | str | None = None  # explicit indices, or a named set ("stride16")
    fit: str = "crop"  # how the image becomes the square input: the backbone's crop, or squash (dense probes)

    def describe(self) -> dict[str, Any]:
        # "crop" is left out so that descriptions (and DVC hashes) written before `fit` existed still match
        described = asdict(self)
        if self.fit == "crop":
            del described["fit"]
        return described


def load_image(path: Path) -> Image.Image:
    return decode_rgb(path)


def _store_batch(backbone, described: dict[str, Any], resolved: list[dict[str, Any]], batch: list,
                 pixels: dict[str, torch.Tensor], cache: FeatureCache) -> None:
    """One forward per distinct (fit, layers, pooling) (usually exactly one); every requested entry cached."""
    outputs: dict[tuple, dict] = {}
    if len(batch) == 1:
        # A lone image runs beside a copy of itself: oneDNN picks another convolution algorithm for a batch of
        # one (last bits differ, measured by benchmarks/batch_size.py), and an image's features must not depend
        # on whether it fell last in the dataset. From two images up, every batch size gives the same bits.
        pixels = {fit: torch.cat([tensor, tensor]) for fit, tensor in pixels.items()}
    for request in resolved:
        fit = request.get("fit", "crop")
        pooling = request["pooling_resolved"] or "default"
        signature = (fit, tuple(request["layers_resolved"]), pooling)
        if signature not in outputs:
            outputs[signature] = backbone.extract_features(pixels[fit], pooling, list(signature[1]))
    for index, item in enumerate(batch):
        keys = entry_keys(described, resolved, item)
        for request, key in zip(resolved, keys, strict=True):
            out = outputs[request.get("fit", "crop"), tuple(request["layers_resolved"]),
                          request["pooling_resolved"] or "default"]
            array = out["pooled"][index] if request["mode"] == "pooled" else out["dense"][index]
            cache.put(key, array.numpy())


class EarlyDecode:
    """Decodes the dataset's first images while the backbone is still being built (its library imported, its
    weights read and hashed: one busy core, seconds), so the forward passes start on pixels that are ready.
    Works only from the preprocessing the backbone registered as data, and hands its pixels over only if the
    built backbone's preprocessing is that one. Holds at most `budget_bytes` of pixels; an image it cannot
    decode just stops it (the extraction then meets the file and names it)."""

    def __init__(self, manifest: Manifest, preprocess: Preprocess, fits: list[str],
                 budget_bytes: int = 256 * 2**20) -> None:
        self.preprocess, self.pixels = preprocess, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(manifest, fits, budget_bytes), daemon=True,
                                        name="early-decode")
        self._thread.start()

    def _run(self, manifest: Manifest, fits: list[str], budget_bytes: int) -> None:
        used = 0
        for item in manifest.items:
            if self._stop.is_set() or used >= budget_bytes:
                return
            try:
                image = load_image(manifest.resolve(item))
                pixels = {fit: self.preprocess(image, fit) for fit in fits}
            except Exception:  # the extraction decodes it again and reports it with its path
                return
            self.pixels[item.path] = pixels
            used += sum(tensor.numel() * tensor.element_size() for tensor in pixels.values())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def take(self, preprocess: Preprocess) -> dict[str, dict[str, torch.Tensor]]:
        """Stop, and the pixels decoded so far (by item path) if `preprocess` is the one they were made with."""
        self.stop()
        return self.pixels if preprocess == self.preprocess else {}


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _decoded(batches: list[list], decode: Callable[[list], dict[str, torch.Tensor]]) -> Iterator[tuple[list, dict]]:
    """Each batch with its pixels. Decoding and resizing (Pillow releases the GIL) run in a worker thread one
    batch ahead of the forward pass only when a core is free for it beyond torch's compute threads. Without one
    the worker thrashes against OpenMP's spinning threads: on 2 cores with 2 compute threads, 600 CIFAR images
    through EfficientNet-Lite0 took 12.3 s overlapped against 0.9 s decoding + 8.0 s forward in turn. The
    pixels are the same bits whichever thread made them."""
    if usable_cores() <= torch.get_num_threads():
        for batch in batches:
            yield batch, decode(batch)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode") as pool:
        upcoming = pool.submit(decode, batches[0]) if batches else None
        for index, batch in enumerate(batches):
            pixels = upcoming.result()
            upcoming = pool.submit(decode, batches[index + 1]) if index + 1 < len(batches) else None
            yield batch, pixels


def extract_dataset(
    backbone, manifest: Manifest, requests: list[FeatureRequest], out_dir: Path, batch_size: int,
    early: EarlyDecode | None = None,
) -> dict[str, Any]:
    """Fill the cache under `out_dir/entries` and return the extraction description. `batch_size` is the most
    images per forward pass: each backbone runs its own measured fastest size up to it (`Backbone.batch_size`),
    and the features are the same bits at any size from two up (a lone image is paired, see `_store_batch`)."""
    batch_size = min(batch_size, backbone.batch_size)
    described = backbone.describe()
    resolved = [
        {**r.describe(), "pooling_resolved": backbone.resolve_pooling(r.pooling) if r.mode == "pooled" else None,
         "layers_resolved": backbone.resolve_layers(r.layers)}
        for r in requests
    ]
    cache = FeatureCache(out_dir / "entries")
    todo = [i for i in manifest.items if not all(k in cache for k in entry_keys(described, resolved, i))]
    write_cache_stats(out_dir, len(manifest.items), len(manifest.items) - len(todo))
    fits = sorted({request.get("fit", "crop") for request in resolved})
    ready = early.take(backbone.preprocess) if early is not None else {}
    log.info("extract %s × %s: %d images, %d cached, %d to compute, batches of %d, %d decoded while the backbone "
             "loaded", backbone.name, manifest.name, len(manifest.items), len(manifest.items) - len(todo), len(todo),
             batch_size, len(ready))

    def pixels_of(item) -> dict[str, torch.Tensor]:
        if item.path in ready and all(fit in ready[item.path] for fit in fits):
            return ready.pop(item.path)
        image = load_image(manifest.resolve(item))
        return {fit: backbone.preprocess(image, fit) for fit in fits}

    def decode(batch: list) -> dict[str, torch.Tensor]:
        pixels = [pixels_of(item) for item in batch]
        return {fit: torch.stack([p[fit] for p in pixels]) for fit in fits}

    batches = [todo[start: start + batch_size] for start in range(0, len(todo), batch_size)]
    started, last_report, done = time.monotonic(), 0.0, 0
    for batch, pixels in _decoded(batches, decode):
        _store_batch(backbone, described, resolved, batch, pixels, cache)
        done += len(batch)
        elapsed = time.monotonic() - started
        if elapsed - last_report > 10 or done == len(todo):
            rate = done / max(elapsed, 1e-9)
            log.info("  %s × %s: %d/%d images, %.1f img/s, elapsed %.0fs, ETA %.0fs", backbone.name,
                     manifest.name, done, len(todo), rate, elapsed, (len(todo) - done) / max(rate, 1e-9))
            last_report = elapsed
    grid_hw = None
    if manifest.items and any(r["mode"] == "dense" for r in resolved):
        dense = next(r for r in resolved if r["mode"] == "dense")
        key = entry_keys(described, [dense], manifest.items[0])[0]
        grid_hw = list(np.shape(cache.get(key))[-2:])
    return {"status": "ok", "backbone": described, "dataset_identity": manifest.identity,
            "requests": resolved, "dense_grid_hw": grid_hw}
