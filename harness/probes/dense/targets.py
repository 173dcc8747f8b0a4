"""Dense targets: reading a scene's target files and encoding them for a probe at `target_size`.

Files are listed per item in `manifest.extra["targets"][item.path][name] = {"path", "sha256"}` (paths
relative to the manifest root). PNG label maps are read as raw indices: `np.asarray` on a Pillow image
in mode "L" or "P" returns the stored values, never a palette's colours.

Every encoder maps one raw target to `(target, valid)` at `size`×`size`, both numpy arrays, with the
resampling operator that suits the target (metrics are computed at this resolution, not the native one):

| encoder | target | resampling | valid |
|---|---|---|---|
| depth | (S,S) float32 metres | area mean over valid pixels only | a cell with ≥1 valid pixel |
| normals | (3,S,S) unit vectors | area mean over valid pixels, renormalised | ≥1 valid pixel, mean ≠ 0 |
| labels | (S,S) int64 | nearest (pixel centre) | all |
| edge magnitude | (S,S) float32 | max-pool (thin edges survive) | all |
| occlusion edges | (S,S) float32 log1p(max-pool) | max-pool, then log1p | all |
| keypoints | (S,S) float32 | max over kinds, then max-pool | all |
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from harness.datasets.manifest import Item, Manifest

Encoder = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def target_path(manifest: Manifest, item: Item, name: str) -> Path:
    """Resolved by the loaders' own convention: converted targets sit beside the manifest
    (`paths.dataset_dir`), untouched ones (e.g. VOC's PNGs) under the dataset's source root."""
    from harness.core.paths import dataset_dir
    from harness.datasets.dense_targets import target_file

    try:
        return target_file(manifest, item, name, dataset_dir(manifest.name))
    except KeyError:
        raise KeyError(f"dataset {manifest.name} has no target {name!r} for {item.path}") from None


def load_target(manifest: Manifest, item: Item, name: str) -> np.ndarray:
    """The raw target array: `.npy` as saved, `.png` as stored indices (no palette conversion)."""
    path = target_path(manifest, item, name)
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    if path.suffix == ".png":
        with Image.open(path) as image:
            if image.mode not in ("L", "P"):
                raise ValueError(f"{path}: label maps must be mode L or P, got {image.mode}")
            return np.asarray(image)  # "P": the palette indices themselves
    raise ValueError(f"{path}: unsupported target file type {path.suffix!r}")


def _masked_area_mean(values: np.ndarray, valid: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(C,S,S) area means of (C,H,W) `values` over valid pixels only, and the (S,S) cell count of valid pixels.

    Averaging only valid pixels keeps invalid zeros (no surface) from dragging a border cell's depth down.
    """
    v = torch.from_numpy(valid.astype(np.float64))[None, None]
    x = torch.from_numpy(values.astype(np.float64))[None] * v
    total = F.adaptive_avg_pool2d(x, size)[0]
    weight = F.adaptive_avg_pool2d(v, size)[0, 0]
    mean = torch.where(weight > 0, total / weight.clamp_min(1e-12), torch.zeros_like(total))
    return mean.numpy(), weight.numpy()


def _max_pool(values: np.ndarray, size: int) -> np.ndarray:
    x = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))[None, None]
    return F.adaptive_max_pool2d(x, size)[0, 0].numpy()


def nearest(labels: np.ndarray, size: int) -> np.ndarray:
    """Nearest-neighbour resampling by pixel centres: output cell i reads input pixel floor((i + ½)·H / S)."""
    rows = ((np.arange(size) + 0.5) * labels.shape[0] / size).astype(np.int64)
    cols = ((np.arange(size) + 0.5) * labels.shape[1] / size).astype(np.int64)
    return labels[np.ix_(rows, cols)]


def encode_depth(depth: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    valid = depth > 0
    mean, weight = _masked_area_mean(depth[None], valid, size)
    return mean[0].astype(np.float32), weight > 0


def encode_normals(normals: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    field = np.moveaxis(normals, -1, 0)  # (3, H, W)
    valid = np.any(field != 0, axis=0)
    mean, weight = _masked_area_mean(field, valid, size)
    norm = np.linalg.norm(mean, axis=0)
    ok = (weight > 0) & (norm > 1e-6)
    unit = np.where(ok[None], mean / np.maximum(norm, 1e-12)[None], 0.0)
    return unit.astype(np.float32), ok


def encode_labels(labels: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    out = nearest(labels, size).astype(np.int64)
    return out, np.ones(out.shape, dtype=bool)


def encode_edge_magnitude(edges: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    out = _max_pool(edges, size)
    return out, np.ones(out.shape, dtype=bool)


def encode_occlusion_log1p(edges: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """log1p of the max-pooled edge map (the encoding is part of the protocol name: `…-log1p/v1`)."""
    out = np.log1p(_max_pool(edges, size)).astype(np.float32)
    return out, np.ones(out.shape, dtype=bool)


def encode_keypoints(response: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    out = _max_pool(response.max(axis=-1), size)
    return out, np.ones(out.shape, dtype=bool)
