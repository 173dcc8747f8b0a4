"""Dense correspondence under known homographies (protocol `homography-nn-correspondence/v1`).

For each pair, a fixed grid of source points (defined in source-image pixels, the same for every
backbone) is matched to the target by cosine nearest neighbour over the target's feature cells; the
prediction is the matched cell's centre mapped back to target pixels. PCK@t is the fraction of points
whose prediction lies within t pixels of the true location H·p. Points are kept only where both p and
H·p lie inside the central region (`margin`), which every backbone's centre crop sees.

`ceiling_pck@t` is the best any matcher could do on this feature grid: the fraction of points whose
*nearest cell centre* to the true location is within t pixels. A backbone with 32-pixel cells cannot
reach PCK@8 = 1 however good its features are; read PCK against its ceiling.

Per-sample scores (unit "point", id = "<pair target path>#<index of the point among the pair's kept
points>"): `pck@t` and `ceiling_pck@t` (0/1) and `mean_error_px` (that point's error in pixels).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, PositiveFloat, PositiveInt

from harness.datasets.homography import apply_homography
from harness.probes.base import Layers, ProbeInputs, ProbeParams, ProbeResult, ProbeSpec, register_probe


def evaluation_points(size: int, per_side: int, margin: float, homography: np.ndarray) -> np.ndarray:
    lo, hi = margin * size, (1 - margin) * size
    axis = np.linspace(lo, hi, per_side)
    points = np.stack(np.meshgrid(axis, axis), axis=-1).reshape(-1, 2)
    target = apply_homography(homography, points)
    inside = np.all((target >= lo) & (target <= hi), axis=1)
    return points[inside]


def sample_features(dense: np.ndarray, grid_rc: np.ndarray) -> np.ndarray:
    """Bilinear samples (N, C) of a (C, H, W) map at continuous (row, col) cell coordinates."""
    _, h, w = dense.shape
    # grid_sample's align_corners=False puts cell centres at (i + 0.5) / size * 2 - 1
    grid = np.stack([grid_rc[:, 1] / w * 2 - 1, grid_rc[:, 0] / h * 2 - 1], axis=-1)
    sampled = F.grid_sample(
        torch.from_numpy(dense[None]).float(), torch.from_numpy(grid[None, None]).float(),
        mode="bilinear", align_corners=False, padding_mode="border",
    )
    return sampled[0, :, 0].T.numpy()


def match_pair(source: np.ndarray, target: np.ndarray, points: np.ndarray, geometry, size: int):
    """Predicted target pixels for source points, and the grid-ceiling prediction, both (N, 2)."""
    grid_hw = source.shape[-2:]
    queries = sample_features(source, geometry.image_to_grid(points, grid_hw, size, size))
    cells = target.reshape(target.shape[0], -1).T  # (H*W, C)
    queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    cells = cells / np.maximum(np.linalg.norm(cells, axis=1, keepdims=True), 1e-12)
    best = np.argmax(queries @ cells.T, axis=1)
    centres = geometry.grid_centres_in_image(target.shape[-2:], size, size).reshape(-1, 2)
    return centres[best], centres


class CorrespondenceParams(ProbeParams):
    layers: Layers = None
    thresholds_px: list[PositiveFloat] = Field(min_length=1)
    points_per_side: PositiveInt
    margin: float = Field(ge=0.0, lt=0.5)  # evaluation points keep this fraction of the image from its border


def run_correspondence(inputs: ProbeInputs) -> ProbeResult:
    p = inputs.params
    manifest = inputs.manifest
    size = manifest.params["size"]
    by_path = {item.path: item for item in manifest.items}
    thresholds = list(p["thresholds_px"])
    errors, ceiling_errors, sample_ids = [], [], []
    for pair in manifest.extra["pairs"]:
        homography = np.asarray(pair["homography"])
        points = evaluation_points(size, p["points_per_side"], p["margin"], homography)
        truth = apply_homography(homography, points)
        source = inputs.features(by_path[pair["source"]])
        target = inputs.features(by_path[pair["target"]])
        predicted, centres = match_pair(source, target, points, inputs.geometry, size)
        errors.append(np.linalg.norm(predicted - truth, axis=1))
        distances = np.linalg.norm(truth[:, None, :] - centres[None, :, :], axis=2)
        ceiling_errors.append(distances.min(axis=1))
        sample_ids += [f"{pair['target']}#{index}" for index in range(len(points))]
    error = np.concatenate(errors).astype(np.float64)
    ceiling = np.concatenate(ceiling_errors).astype(np.float64)
    columns = {f"pck@{t:g}": (error <= t).astype(np.float64) for t in thresholds}
    columns |= {f"ceiling_pck@{t:g}": (ceiling <= t).astype(np.float64) for t in thresholds}
    columns["mean_error_px"] = error
    metrics = {name: float(column.mean()) for name, column in columns.items()}
    return ProbeResult(metrics, sample_ids, columns, unit="point")


CORRESPONDENCE = register_probe(ProbeSpec(
    name="correspondence",
    level="mid",
    protocol="homography-nn-correspondence/v1",
    feature_mode="dense",
    headline="pck@16",
    run=run_correspondence,
    params=CorrespondenceParams,
    lower_is_better=frozenset({"mean_error_px"}),
))
