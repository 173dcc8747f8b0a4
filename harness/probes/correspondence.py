"""Dense correspondence under known homographies (protocol `homography-nn-correspondence/v1`).

For each pair, a fixed grid of source points (defined in source-image pixels, the same for every
backbone) is matched to the target by cosine nearest neighbour over the target's feature cells; the
prediction is the matched cell's centre mapped back to target pixels. PCK@t is the fraction of points
whose prediction lies within t pixels of the true location H·p. Points are kept only where both p and
H·p lie inside the central region (`margin`), which every backbone's centre crop sees.

`ceiling_pck@t` is the best any matcher could do on this feature grid: the fraction of points whose
*nearest cell centre* to the true location is within t pixels. A backbone with 32-pixel cells cannot
reach PCK@8 = 1 however good its features are; read PCK against its ceiling.

`auc@T` (T the largest threshold) is the area under the PCK curve from 0 to T pixels, divided by T: per point,
max(0, 1 − error / T), so it rewards a match that is close without being within a threshold, and is 1 only when
every point is exact.

Match filtering (both off unless params.yaml sets them, so a board without them keeps its key): `mutual: true`
accepts a point's match only when the matched target cell's own nearest source cell is the cell the point lies
in; `ratio: r` only when the cosine distance to the best target cell is below r times the distance to the
second best (Lowe's ratio test, on cosine distance 1 − cos). The unfiltered scores stay as they are (every point
is matched); the filtered ones add `match_rate` (accepted points / points), `matched_pck@t` (accepted and within
t px, over all points: the recall of correct matches) and, as metrics without a per-point column,
`precision@t` (correct among accepted) and `num_matches` (accepted points per pair).

Per-sample scores (unit "point", id = "<pair target path>#<index of the point among the pair's kept
points>"): `pck@t` and `ceiling_pck@t` (0/1), `auc@T`, `mean_error_px` (that point's error in pixels), and with
filtering `match_rate` and `matched_pck@t` (0/1).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, PositiveFloat, PositiveInt

from harness.datasets.homography import apply_homography
from harness.probes.base import Layers, ProbeInputs, ProbeParams, ProbeResult, ProbeSpec, column_means, register_probe


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


def _unit_rows(features: np.ndarray) -> np.ndarray:
    return features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-12)


def match_pair(source: np.ndarray, target: np.ndarray, points: np.ndarray, geometry, size: int,
               mutual: bool = False, ratio: float | None = None):
    """Predicted target pixels for source points, the target's cell centres (H*W, 2), and which matches the
    filters accept (N,) bool (all, without filters)."""
    grid_hw = source.shape[-2:]
    query_rc = geometry.image_to_grid(points, grid_hw, size, size)
    queries = _unit_rows(sample_features(source, query_rc))
    cells = _unit_rows(target.reshape(target.shape[0], -1).T)  # (H*W, C)
    similarity = queries @ cells.T
    best = np.argmax(similarity, axis=1)
    centres = geometry.grid_centres_in_image(target.shape[-2:], size, size).reshape(-1, 2)
    accepted = np.ones(len(points), dtype=bool)
    if mutual:
        source_cells = _unit_rows(source.reshape(source.shape[0], -1).T)
        back = np.argmax(cells[best] @ source_cells.T, axis=1)  # each matched cell's nearest source cell
        rows = np.clip(np.floor(query_rc[:, 0]).astype(int), 0, grid_hw[0] - 1)
        cols = np.clip(np.floor(query_rc[:, 1]).astype(int), 0, grid_hw[1] - 1)
        accepted &= back == rows * grid_hw[1] + cols
    if ratio is not None:
        if similarity.shape[1] < 2:
            raise ValueError("the ratio test needs at least two target cells")
        top2 = -np.sort(-similarity, axis=1)[:, :2]
        accepted &= (1.0 - top2[:, 0]) < ratio * (1.0 - top2[:, 1])  # strict: a tie (d1 = d2 = 0) is ambiguous
    return centres[best], centres, accepted


class CorrespondenceParams(ProbeParams):
    layers: Layers = None
    thresholds_px: list[PositiveFloat] = Field(min_length=1)
    points_per_side: PositiveInt
    margin: float = Field(ge=0.0, lt=0.5)  # evaluation points keep this fraction of the image from its border
    mutual: bool = False  # accept a match only when it is mutual (see the module docstring)
    ratio: float | None = Field(default=None, gt=0.0, le=1.0)  # Lowe's ratio test on cosine distance


def run_correspondence(inputs: ProbeInputs) -> ProbeResult:
    p = inputs.params
    manifest = inputs.manifest
    size = manifest.params["size"]
    by_path = {item.path: item for item in manifest.items}
    thresholds = list(p["thresholds_px"])
    mutual, ratio = p.get("mutual", False), p.get("ratio")
    filtered = mutual or ratio is not None
    errors, ceiling_errors, accepted, sample_ids = [], [], [], []
    for pair in manifest.extra["pairs"]:
        homography = np.asarray(pair["homography"])
        points = evaluation_points(size, p["points_per_side"], p["margin"], homography)
        truth = apply_homography(homography, points)
        source = inputs.features(by_path[pair["source"]])
        target = inputs.features(by_path[pair["target"]])
        predicted, centres, kept = match_pair(source, target, points, inputs.geometry, size, mutual, ratio)
        errors.append(np.linalg.norm(predicted - truth, axis=1))
        accepted.append(kept)
        distances = np.linalg.norm(truth[:, None, :] - centres[None, :, :], axis=2)
        ceiling_errors.append(distances.min(axis=1))
        sample_ids += [f"{pair['target']}#{index}" for index in range(len(points))]
    error = np.concatenate(errors).astype(np.float64)
    ceiling = np.concatenate(ceiling_errors).astype(np.float64)
    columns = {f"pck@{t:g}": (error <= t).astype(np.float64) for t in thresholds}
    columns |= {f"ceiling_pck@{t:g}": (ceiling <= t).astype(np.float64) for t in thresholds}
    top = max(thresholds)
    columns[f"auc@{top:g}"] = np.clip(1.0 - error / top, 0.0, 1.0)
    columns["mean_error_px"] = error
    if filtered:
        kept = np.concatenate(accepted)
        columns["match_rate"] = kept.astype(np.float64)
        columns |= {f"matched_pck@{t:g}": (kept & (error <= t)).astype(np.float64) for t in thresholds}
    metrics = column_means(columns)
    if filtered:
        count = int(kept.sum())
        metrics |= {f"precision@{t:g}": float((kept & (error <= t)).sum() / count) if count else 0.0
                    for t in thresholds}
        metrics["num_matches"] = count / len(accepted)
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
