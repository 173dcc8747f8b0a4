"""Feature extraction for one backbone × dataset: one forward pass per image, into the feature cache.

Images whose every requested entry is already cached are never decoded. An image that cannot be
decoded is an error naming the file (`harness.datasets.decode`: truncated files, non-images, 16-bit and
CMYK pixels). The stage writes `extraction.json` (the backbone's identity and the resolved feature
requests) that probes read instead of importing any backbone library.
"""

from __future__ import annotations

import logging
import time
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

log = logging.getLogger(__name__)
__all__ = ["FeatureRequest", "ImageDecodeError", "extract_dataset", "load_image"]


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


def extract_dataset(
    backbone, manifest: Manifest, requests: list[FeatureRequest], out_dir: Path, batch_size: int
) -> dict[str, Any]:
    """Fill the cache under `out_dir/entries` and return the extraction description."""
    described = backbone.describe()
    resolved = [
        {**r.describe(), "pooling_resolved": backbone.resolve_pooling(r.pooling) if r.mode == "pooled" else None,
         "layers_resolved": backbone.resolve_layers(r.layers)}
        for r in requests
    ]
    cache = FeatureCache(out_dir / "entries")
    todo = [i for i in manifest.items if not all(k in cache for k in entry_keys(described, resolved, i))]
    log.info("extract %s × %s: %d images, %d cached, %d to compute",
             backbone.name, manifest.name, len(manifest.items), len(manifest.items) - len(todo), len(todo))
    write_cache_stats(out_dir, len(manifest.items), len(manifest.items) - len(todo))
    fits = sorted({request.get("fit", "crop") for request in resolved})

    def decode(batch: list) -> dict[str, torch.Tensor]:
        # JPEG/PNG decoding and resizing (Pillow releases the GIL) for the next batch run in a worker thread
        # while this one's forward pass runs; the pixels are the same whichever thread made them.
        images = [load_image(manifest.resolve(i)) for i in batch]
        return {fit: torch.stack([backbone.preprocess(image, fit) for image in images]) for fit in fits}

    batches = [todo[start: start + batch_size] for start in range(0, len(todo), batch_size)]
    started, last_report, done = time.monotonic(), 0.0, 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode") as pool:
        upcoming = pool.submit(decode, batches[0]) if batches else None
        for index, batch in enumerate(batches):
            pixels = upcoming.result()
            upcoming = pool.submit(decode, batches[index + 1]) if index + 1 < len(batches) else None
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
