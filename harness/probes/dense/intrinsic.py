"""Intrinsic decomposition: the paint and the light apart (protocols `intrinsic-albedo/v1`, `intrinsic-shading/v1`).

An image is reflectance times shading; only a renderer knows both exactly. The scenes write `albedo.npy` (linear
RGB paint) and `shading.npy` (the light's factor: ambient + direct · unshadowed) with linear colour = albedo ·
shading to the last bit before gamma and quantisation (`harness.datasets.scene_render`). Two dense probes read
them, each with the dense probes' recipe (`harness.probes.dense.probes.run_dense`: standardised frozen features,
a 1×1-conv or DPT head, AdamW, scored at `target_size`²): `albedo` regresses the 3 channels, `shading` the one;
targets are area means over a cell's surface pixels (the sky has neither, so it is invalid), the loss is the
mean squared error over valid cells, and the output bias starts at the training split's mean.

Metrics, as the intrinsic-images literature scores them, per image over valid cells, each channel on its own:
- `si_mse`: scale-invariant MSE, min over α of mean (α·p − t)² (Grosse, Johnson, Adelson & Freeman, "Ground truth
  dataset and baseline evaluations for intrinsic image algorithms", ICCV 2009): an intrinsic decomposition is only
  defined up to a scale, so a prediction is not charged for its brightness.
- `lmse` (headline, lower is better): local scale-invariant error, the same fit in every w × w window (w = 2·⌈S/20⌉
  cells, ≈ 10% of the side; stride w/2, windows wholly inside the map), squared errors summed over windows and
  divided by the same sum for an all-zero prediction (Σ t²), so 0 is perfect and predicting nothing scores 1 —
  Grosse et al.'s normalisation. A channel whose window has no signal in the prediction fits α = 0.
- `mse`: the plain mean squared error (the probe does predict absolute albedo here, which real data cannot ask).

Caveat: on these scenes the shading is smooth except at shadow borders and surface outlines, and the albedo is
the bundled textures' two colours per object; a head can score well on shading from geometry alone (normals and
the light), which is the point of asking both: the pair says whether the features hold paint or light.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from harness.probes.dense.probes import MEAN_CHANNELS, MEAN_VALUE, DenseTask, register_dense_probe
from harness.probes.dense.targets import encode_depth


def encode_shading(shading: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(H, W) shading, 0 off every surface (shading ≥ the ambient > 0 on one) → (S, S) means over each cell's
    surface pixels: depth's operator, whose 0 means "no surface" the same way."""
    return encode_depth(shading, size)


def encode_albedo(albedo: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(H, W, 3) albedo, 0 off every surface (every paint channel is > 0 on one) → (3, S, S) cell means over
    surface pixels, channel by channel (each channel's zeros are the same pixels, so one validity serves)."""
    channels = [encode_depth(albedo[..., c], size) for c in range(3)]
    return np.stack([mean for mean, _ in channels]), channels[0][1]


def lmse_window(size: int) -> int:
    return 2 * math.ceil(size / 20)


def _scale_fit_errors(pred: np.ndarray, target: np.ndarray, valid: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Σ (α·p − t)² over `axes` with α = Σ p·t / Σ p² (0 where Σ p² = 0), on valid cells only."""
    p, t = pred * valid, target * valid
    pp, pt = np.sum(p * p, axis=axes), np.sum(p * t, axis=axes)
    alpha = np.where(pp > 0, pt / np.where(pp > 0, pp, 1.0), 0.0)
    alpha = np.expand_dims(alpha, axes)
    return np.sum((alpha * p - t) ** 2, axis=axes)


def intrinsic_per_image(pred: np.ndarray, target: np.ndarray, valid: np.ndarray) -> dict[str, np.ndarray]:
    """pred and target (N, C, S, S) or (N, S, S); valid (N, S, S). An image without a valid cell scores NaN."""
    if pred.ndim == 3:
        pred, target = pred[:, None], target[:, None]
    pred, target = pred.astype(np.float64), target.astype(np.float64)
    size = target.shape[-1]
    w = lmse_window(size)
    starts = range(0, size - w + 1, w // 2)
    columns: dict[str, list[float]] = {"lmse": [], "si_mse": [], "mse": []}
    for p, t, v in zip(pred, target, valid, strict=True):
        cells = int(v.sum()) * len(t)
        if not cells:
            for values in columns.values():
                values.append(np.nan)
            continue
        mask = np.broadcast_to(v, t.shape)
        columns["si_mse"].append(float(_scale_fit_errors(p, t, mask, (1, 2)).sum() / cells))
        columns["mse"].append(float(np.sum(((p - t) * mask) ** 2) / cells))
        local = reference = 0.0
        for i in starts:
            for j in starts:
                window = (slice(None), slice(i, i + w), slice(j, j + w))
                local += float(_scale_fit_errors(p[window], t[window], mask[window], (1, 2)).sum())
                reference += float(np.sum((t[window] * mask[window]) ** 2))
        columns["lmse"].append(local / reference if reference > 0 else np.nan)
    return {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}


def _mse_loss(logits: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    if target.ndim == 3:
        target = target[:, None]
    return ((logits - target) ** 2).mean(dim=1)[valid].mean()


def _raw(z: torch.Tensor) -> np.ndarray:
    return z.detach().cpu().numpy()


ALBEDO = DenseTask("albedo", encode_albedo, lambda m: 3, _mse_loss, _raw,
                   lambda p, t, v, k: intrinsic_per_image(p, t, v), prior=MEAN_CHANNELS)
SHADING = DenseTask("shading", encode_shading, lambda m: 1, _mse_loss, lambda z: _raw(z[:, 0]),
                    lambda p, t, v, k: intrinsic_per_image(p, t, v), prior=MEAN_VALUE)

ALBEDO_PROBE = register_dense_probe("albedo", "mid", "intrinsic-albedo/v1", "lmse", ALBEDO, ("lmse", "si_mse", "mse"))
SHADING_PROBE = register_dense_probe("shading", "mid", "intrinsic-shading/v1", "lmse", SHADING,
                                     ("lmse", "si_mse", "mse"))
