"""Anomaly maps and masks at the scoring resolution (`target_size`² pixels), and the masks' regions.

A detector scores each feature cell; the (h, w) cell map is upsampled bilinearly to target_size² with pixel centres
aligned (align_corners=False, edges clamped: what `torch.nn.functional.interpolate` does, tests compare), then
optionally smoothed by a Gaussian of `smooth_sigma` target pixels (truncated at 4σ, reflected at the borders),
as PatchCore and PaDiM smooth theirs. Masks come to the same grid by nearest neighbour at pixel centres (the dense
probes' label resampling), and their regions are 8-connected, as in MVTec AD's evaluation.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from harness.probes.dense.targets import nearest


def bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) weights of 1-D linear interpolation from n_in cells to n_out pixels, centres aligned."""
    source = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0.0, n_in - 1.0)
    low = np.floor(source).astype(np.int64)
    high = np.minimum(low + 1, n_in - 1)
    weight = source - low
    matrix = np.zeros((n_out, n_in))
    np.add.at(matrix, (np.arange(n_out), low), 1.0 - weight)
    np.add.at(matrix, (np.arange(n_out), high), weight)
    return matrix


def upsample(cells: np.ndarray, size: int) -> np.ndarray:
    """(h, w) → (size, size), bilinear (see the module docstring)."""
    h, w = cells.shape
    return bilinear_matrix(h, size) @ np.asarray(cells, dtype=np.float64) @ bilinear_matrix(w, size).T


def anomaly_map(cells: np.ndarray, size: int, smooth_sigma: float) -> np.ndarray:
    """A cell map at the scoring resolution: upsampled, then smoothed when `smooth_sigma` > 0."""
    upsampled = upsample(cells, size)
    if smooth_sigma > 0:
        return ndimage.gaussian_filter(upsampled, sigma=smooth_sigma, mode="reflect", truncate=4.0)
    return upsampled


def mask_at(mask: np.ndarray, size: int) -> np.ndarray:
    """A native-resolution mask (> 0 = defect) at size², nearest neighbour at pixel centres."""
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"a defect mask must be (H, W); got shape {mask.shape}")
    return nearest(mask > 0, size)


def regions(masks: np.ndarray) -> np.ndarray:
    """(N, S, S) labels of each mask's 8-connected regions, 1, 2, … per image; 0 = defect-free."""
    structure = np.ones((3, 3), dtype=int)
    return np.stack([ndimage.label(mask, structure=structure)[0] for mask in masks])
