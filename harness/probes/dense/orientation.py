"""Texture orientation: the dominant local orientation of the paint (protocol `structure-tensor-orientation/v1`).

Target: the scenes' `structure_tensor.npy`, the albedo luminance's structure tensor J (see
`harness.datasets.scene_targets`: gradients of the paint alone, no shading or outlines, integrated over the
pixel's own surface). At `target_size`² each cell's tensor is the mean of its pixels' tensors (summing tensors
before taking the angle is what the structure tensor is for: opposite gradients reinforce instead of cancelling),
then encoded in doubled angles, the structure tensor's own encoding, where θ and θ + 180° are one orientation:
(cos 2θ, sin 2θ) = (Jxx − Jyy, 2·Jxy) / |(Jxx − Jyy, 2·Jxy)|, θ the gradient's angle from the image's x axis
(y down), with weight c = |(Jxx − Jyy, 2·Jxy)| / (Jxx + Jyy), the coherence (λ₁ − λ₂) / (λ₁ + λ₂) ∈ [0, 1]:
1 for stripes, near 0 at a checker corner or in isotropic noise, where no orientation exists. A cell is valid
where its tensor has a trace (untextured paint, flat textures and the sky have none).

Head: the dense probes' recipe (`harness.probes.dense.probes.run_dense`: standardised frozen features, a 1×1-conv
or DPT head, AdamW) with 2 outputs normalised to a unit doubled-angle vector; loss the coherence-weighted
1 − cos(2Δθ) (a cell without orientation teaches nothing); the output bias starts at the training split's
coherence-weighted mean doubled-angle vector.

Metrics per image, over its valid cells, weighted by coherence (so the score is about the cells that have an
orientation): `angular_error` (headline, degrees, lower is better), the weighted mean of Δθ = ½·arccos(⟨p̂, t̂⟩) ∈
[0°, 90°] (orientation error, modulo 180°); `within_15` and `within_30`, the weighted share of cells within 15° and
30°; `mean_error_unweighted`, the plain mean. An orientation guessed uniformly at random has expected error 45°,
the chance level; a model that predicts one orientation everywhere scores the dataset's spread about it.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from harness.probes.dense.probes import DenseTask, Prior, register_dense_probe

THRESHOLDS_DEG = (15.0, 30.0)
_MIN_TRACE = 1e-12  # a cell's tensor below this has no gradient energy: no orientation


def encode_orientation(tensor: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(H, W, 3) [Jxx, Jxy, Jyy] → (3, S, S) float32 [cos 2θ, sin 2θ, coherence] and (S, S) valid."""
    field = torch.from_numpy(np.moveaxis(tensor.astype(np.float64), -1, 0).copy())
    # every pixel counts (a zero tensor adds no energy), so cells average the way J integrates
    jxx, jxy, jyy = F.adaptive_avg_pool2d(field[None], size)[0].numpy()
    trace = jxx + jyy
    vector = np.stack([jxx - jyy, 2.0 * jxy])
    norm = np.sqrt(vector[0] * vector[0] + vector[1] * vector[1])
    valid = (trace > _MIN_TRACE) & (norm > 0)
    unit = np.where(valid[None], vector / np.maximum(norm, 1e-300)[None], 0.0)
    coherence = np.where(valid, np.minimum(norm / np.maximum(trace, 1e-300), 1.0), 0.0)
    return np.concatenate([unit, coherence[None]]).astype(np.float32), valid


def orientation_error_deg(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Δθ in degrees ∈ [0, 90] between (..., 2) doubled-angle unit vectors: half the angle between them."""
    cos = np.clip(np.sum(pred * target, axis=-1), -1.0, 1.0)
    return np.degrees(np.arccos(cos)) / 2.0


def orientation_per_image(pred: np.ndarray, target: np.ndarray, valid: np.ndarray) -> dict[str, np.ndarray]:
    """pred (N, 2, S, S) unit vectors; target (N, 3, S, S) [cos, sin, coherence]; valid (N, S, S). An image
    without a valid cell of positive coherence scores NaN (the probe leaves it out)."""
    names = ["angular_error", *(f"within_{t:g}" for t in THRESHOLDS_DEG), "mean_error_unweighted"]
    columns: dict[str, list[float]] = {k: [] for k in names}
    for p, t, v in zip(pred.astype(np.float64), target.astype(np.float64), valid, strict=True):
        error = orientation_error_deg(np.moveaxis(p, 0, -1)[v], np.moveaxis(t[:2], 0, -1)[v])
        weight = t[2][v]
        if not error.size or weight.sum() <= 0:
            for values in columns.values():
                values.append(np.nan)
            continue
        columns["angular_error"].append(float(np.sum(weight * error) / weight.sum()))
        for threshold in THRESHOLDS_DEG:
            columns[f"within_{threshold:g}"].append(float(np.sum(weight * (error < threshold)) / weight.sum()))
        columns["mean_error_unweighted"].append(float(error.mean()))
    return {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}


def _loss(logits: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    cos = F.cosine_similarity(logits, target[:, :2], dim=1, eps=1e-6)
    weight = target[:, 2] * valid
    return ((1.0 - cos) * weight).sum() / weight.sum().clamp_min(1e-6)


def _weighted_vector_sums(target: torch.Tensor, valid: torch.Tensor, k: int) -> np.ndarray:
    weight = (target[:, 2] * valid).double()
    return np.append((target[:, :2].double() * weight[:, None]).sum(dim=(0, 2, 3)).numpy(), float(weight.sum()))


MEAN_DOUBLED_ANGLE = Prior(_weighted_vector_sums, lambda s: s[:-1] / max(s[-1], 1e-12))

ORIENTATION = DenseTask(
    "structure_tensor", encode_orientation, lambda m: 2, _loss,
    lambda z: F.normalize(z, dim=1, eps=1e-6).detach().cpu().numpy(),
    lambda p, t, v, k: orientation_per_image(p, t, v), prior=MEAN_DOUBLED_ANGLE)

ORIENTATION_PROBE = register_dense_probe(
    "orientation", "low", "structure-tensor-orientation/v1", "angular_error", ORIENTATION,
    ("angular_error", "mean_error_unweighted"))
