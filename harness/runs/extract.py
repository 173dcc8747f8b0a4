"""Feature extraction for one backbone × dataset: one forward pass per image, into the feature cache.

Images whose every requested entry is already cached are never decoded. An image that cannot be
decoded is an error naming the file (`harness.datasets.decode`: truncated files, non-images, 16-bit and
CMYK pixels). The stage writes `extraction.json` (the backbone's identity and the resolved feature
requests) that probes read instead of importing any backbone library.
"""

from __future__ import annotations

import logging
import os
import shutil
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

from harness.core.preprocessing import Preprocess
from harness.datasets.decode import ImageDecodeError, decode_rgb
from harness.datasets.manifest import Manifest
from harness.runs.feature_cache import FeatureCache, entry_keys, write_cache_stats

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


def _forward(backbone, resolved: list[dict[str, Any]], pixels: dict[str, torch.Tensor]) -> dict[tuple, dict]:
    """One forward per distinct (fit, layers, pooling) (usually exactly one), its outputs on the CPU."""
    outputs: dict[tuple, dict] = {}
    if len(next(iter(pixels.values()))) == 1:
        # A lone image runs beside a copy of itself: oneDNN picks another convolution algorithm for a batch of
        # one (last bits differ, measured by benchmarks/batch_size.py), and an image's features must not depend
        # on whether it fell last in the dataset. From two images up, every batch size gives the same bits.
        pixels = {fit: torch.cat([tensor, tensor]) for fit, tensor in pixels.items()}
    for request in resolved:
        signature = _signature(request)
        if signature not in outputs:
            out = backbone.extract_features(pixels[signature[0]], signature[2], list(signature[1]))
            outputs[signature] = {"dense": out["dense"].cpu(), "pooled": out["pooled"].cpu()}
    return outputs


def _signature(request: dict[str, Any]) -> tuple:
    return request.get("fit", "crop"), tuple(request["layers_resolved"]), request["pooling_resolved"] or "default"


def _store(described: dict[str, Any], resolved: list[dict[str, Any]], batch: list, outputs: dict[tuple, dict],
           cache: FeatureCache) -> None:
    """Every requested entry of every image of the batch into the cache."""
    for index, item in enumerate(batch):
        keys = entry_keys(described, resolved, item)
        for request, key in zip(resolved, keys, strict=True):
            out = outputs[_signature(request)]
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


class _DecodeDataset(torch.utils.data.Dataset):
    """The items to compute, decoded and preprocessed one by one in a DataLoader worker process."""

    def __init__(self, items: list, pixels_of: Callable[[Any], dict[str, torch.Tensor]]) -> None:
        self.items, self.pixels_of = items, pixels_of

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.pixels_of(self.items[index])


def _loader_batches(batches: list[list], pixels_of: Callable, workers: int, pin: bool
                    ) -> Iterator[tuple[list, dict]]:
    """Each batch with its pixels, decoded by `workers` processes a few batches ahead (pinned for a copy to the
    GPU that does not block). The batches are the same lists in the same order as without workers."""
    items = [item for batch in batches for item in batch]
    sampler = [list(range(start, start + len(batch)))
               for start, batch in zip(np.cumsum([0] + [len(b) for b in batches[:-1]]).tolist(), batches,
                                       strict=True)]
    loader = torch.utils.data.DataLoader(_DecodeDataset(items, pixels_of), batch_sampler=sampler,
                                         num_workers=workers, pin_memory=pin, prefetch_factor=4,
                                         persistent_workers=False)
    yield from zip(batches, loader, strict=True)


def default_workers(device: torch.device) -> int:
    """Decode workers: on a GPU every core but the one driving it (JPEG decode and resize are the bottleneck
    there), at most 16; on the CPU none, as `_decoded` explains."""
    return 0 if device.type == "cpu" else max(1, min(16, usable_cores() - 1))


def _timed_batch(backbone, resolved: list[dict[str, Any]], manifest: Manifest, decode: Callable,
                 device: torch.device, used: int) -> dict[str, Any] | None:
    """The extraction forward timed on the dataset's first images (`runs.throughput`): as many as the extraction's
    batch on a GPU, `CPU_BATCH` on a CPU; None for a dataset of one image, which `_forward` pairs with itself."""
    from harness.core.devices import describe_device
    from harness.runs.throughput import CPU_BATCH, time_forward

    images = min(len(manifest.items), used if device.type != "cpu" else min(used, CPU_BATCH))
    if images < 2:
        return None
    pixels = decode(manifest.items[:images])
    if device.type == "cuda":
        layout = torch.channels_last if backbone.channels_last else torch.contiguous_format
        pixels = {fit: tensor.to(device, memory_format=layout) for fit, tensor in pixels.items()}
    seconds = time_forward(lambda: _forward(backbone, resolved, pixels))
    return {"images": images, "seconds": seconds, "device": describe_device(device)}


def _remove_strays(out_dir: Path) -> None:
    """Remove what the features folder holds beside its entries, description and contents file."""
    from harness.core.contents import CONTENTS_NAME
    from harness.runs.feature_cache import EXTRACTION_FILE

    if not Path(out_dir).is_dir():
        return
    for path in sorted(Path(out_dir).iterdir()):
        if path.name in ("entries", EXTRACTION_FILE, CONTENTS_NAME):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def extract_dataset(
    backbone, manifest: Manifest, requests: list[FeatureRequest], out_dir: Path, batch_size: int,
    early: EarlyDecode | None = None, device: torch.device | str = "cpu", workers: int | None = None,
    prune: bool = False, measure: bool = False,
) -> dict[str, Any]:
    """Fill the cache under `out_dir/entries` and return the extraction description. `batch_size` is the most
    images per forward pass: on the CPU each backbone runs its own measured fastest size up to it
    (`Backbone.batch_size`), and the features are the same bits at any size from two up (a lone image is
    paired, see `_forward`); on a GPU it starts at the family's `cuda_batch_size` (capped by `batch_size`) and
    halves on an out-of-memory error. The description says the device, the batch size used and the
    determinism settings; `timing` (not part of what the stage writes) where the time went. `prune`: leave the
    folder holding exactly this extraction's entries (the pipeline's persisted out); off, other reads' entries
    stay for the next call (the Python API's workspace, where several tasks share one features folder). `measure`:
    also time one fixed batch of the dataset's first images (`runs.throughput`), as `timing["throughput"]`."""
    from harness.core.devices import describe_device, is_out_of_memory, set_deterministic

    device = torch.device(device)
    determinism = set_deterministic(device)
    backbone.to_device(device)
    batch_size = min(batch_size, backbone.batch_size if device.type == "cpu" else backbone.cuda_batch_size)
    workers = default_workers(device) if workers is None else workers
    described = backbone.describe()
    resolved = [
        {**r.describe(), "pooling_resolved": backbone.resolve_pooling(r.pooling) if r.mode == "pooled" else None,
         "layers_resolved": backbone.resolve_layers(r.layers)}
        for r in requests
    ]
    cache = FeatureCache(out_dir / "entries")
    # an entry is reused only when it passes its recorded hash (a corrupt one is removed and computed again): the
    # features folder persists across runs (an interrupted extraction keeps what it finished), so nothing in
    # it is trusted unread
    todo = [i for i in manifest.items if not all(cache.verified(k) for k in entry_keys(described, resolved, i))]
    write_cache_stats(out_dir, len(manifest.items), len(manifest.items) - len(todo))
    fits = sorted({request.get("fit", "crop") for request in resolved})
    ready = early.take(backbone.preprocess) if early is not None else {}
    log.info("extract %s × %s on %s: %d images, %d cached, %d to compute, batches of %d, %d decode workers, %d "
             "decoded while the backbone loaded", backbone.name, manifest.name, device, len(manifest.items),
             len(manifest.items) - len(todo), len(todo), batch_size, workers, len(ready))

    def pixels_of(item) -> dict[str, torch.Tensor]:
        if item.path in ready and all(fit in ready[item.path] for fit in fits):
            return ready.pop(item.path)
        image = load_image(manifest.resolve(item))
        return {fit: backbone.preprocess(image, fit) for fit in fits}

    def decode(batch: list) -> dict[str, torch.Tensor]:
        pixels = [pixels_of(item) for item in batch]
        return {fit: torch.stack([p[fit] for p in pixels]) for fit in fits}

    batches = [todo[start: start + batch_size] for start in range(0, len(todo), batch_size)]
    if workers > 0 and batches:
        stream = _loader_batches(batches, pixels_of, workers, pin=device.type == "cuda")
    else:
        stream = _decoded(batches, decode)
    timing = {"images": len(todo), "decode_wait_s": 0.0, "forward_s": 0.0, "store_s": 0.0}
    started, last_report, done, used = time.monotonic(), 0.0, 0, batch_size
    waited = time.monotonic()
    for batch, pixels in stream:
        timing["decode_wait_s"] += time.monotonic() - waited
        if device.type == "cuda":
            layout = torch.channels_last if backbone.channels_last else torch.contiguous_format
            pixels = {fit: tensor.to(device, non_blocking=True, memory_format=layout) for fit, tensor in pixels.items()}
        start = 0
        while start < len(batch):
            chunk = {fit: tensor[start: start + used] for fit, tensor in pixels.items()}
            try:
                forward_started = time.monotonic()
                outputs = _forward(backbone, resolved, chunk)  # back on the CPU: the copy waits for the GPU
                timing["forward_s"] += time.monotonic() - forward_started
            except Exception as error:
                if not is_out_of_memory(error) or used <= 2:
                    raise
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                used //= 2
                log.warning("  %s: out of memory at %d images per batch; retrying at %d", backbone.name,
                            used * 2, used)
                continue
            store_started = time.monotonic()
            _store(described, resolved, batch[start: start + used], outputs, cache)
            timing["store_s"] += time.monotonic() - store_started
            start += used
        done += len(batch)
        elapsed = time.monotonic() - started
        if elapsed - last_report > 10 or done == len(todo):
            rate = done / max(elapsed, 1e-9)
            log.info("  %s × %s: %d/%d images, %.1f img/s, elapsed %.0fs, ETA %.0fs", backbone.name,
                     manifest.name, done, len(todo), rate, elapsed, (len(todo) - done) / max(rate, 1e-9))
            last_report = elapsed
        waited = time.monotonic()
    timing["total_s"] = time.monotonic() - started
    # exactly this extraction's entries stay: those of reads no longer asked for, of images no longer in the
    # dataset, and an interrupted run's temporaries go (DVC no longer clears the persisted folder)
    if prune:
        cache.prune({k for item in manifest.items for k in entry_keys(described, resolved, item)})
        _remove_strays(out_dir)
    timing["batch_size_used"] = used
    if measure:
        timing["throughput"] = _timed_batch(backbone, resolved, manifest, decode, device, used)
    grid_hw = None
    if manifest.items and any(r["mode"] == "dense" for r in resolved):
        dense = next(r for r in resolved if r["mode"] == "dense")
        key = entry_keys(described, [dense], manifest.items[0])[0]
        grid_hw = list(np.shape(cache.get(key))[-2:])
    description = {"status": "ok", "backbone": described, "dataset_identity": manifest.identity,
                   "requests": resolved, "dense_grid_hw": grid_hw, "timing": timing}
    if device.type != "cpu":
        # Only off the CPU: a CPU extraction's description stays what it was, the same file on every CPU, so
        # DVC re-runs no probe because a first run happened on another machine. A GPU's features are its own.
        description |= {"device": describe_device(device), "batch_size_used": used if todo else None,
                        "determinism": determinism}
    return description
