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

Thresholds in feature cells (`units: patch`, off unless params.yaml sets it): each threshold t is t × the
backbone's cell pitch on the image (its stride, in the 256-px image's pixels), so every backbone is held to its
own resolution; names then read `pck@{t}patch` (and `ceiling_`, `matched_`, `precision@`, `auc@` alike), and the
grid names its headline (`headline: pck@1patch`). Pixel thresholds ask what a user of the matches gets; patch
thresholds ask how well a backbone uses the resolution it has.

Warp-strength sweep: on a dataset made with several `max_shift` levels (`homography_photos` with a list), each
pair records its level and the run adds `pck@{t}_shift{level}` per level and threshold (no column: a partition of
the points, as similarity's per-distortion accuracies are), so one board shows how matching degrades as the
homography grows.

Per-sample scores (unit "point", id = "<pair target path>#<index of the point among the pair's kept
points>"): `pck@t` and `ceiling_pck@t` (0/1), `auc@T`, `mean_error_px` (that point's error in pixels), and with
filtering `match_rate` and `matched_pck@t` (0/1).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, PositiveFloat, PositiveInt, model_validator

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
    units: Literal["px", "patch"] = "px"  # thresholds in image pixels or in the backbone's feature cells
    headline: str = "pck@16"  # one of the PCK names the thresholds and units give

    @model_validator(mode="after")
    def _headline_is_scored(self):
        names = [pck_name(t, self.units) for t in self.thresholds_px]
        if self.headline not in names:
            raise ValueError(f"headline {self.headline!r} is not among the PCKs these thresholds give "
                             f"({', '.join(names)}): set headline to one of them")
        return self


def threshold_label(threshold: float, units: str) -> str:
    return f"{threshold:g}" + ("patch" if units == "patch" else "")


def pck_name(threshold: float, units: str) -> str:
    return f"pck@{threshold_label(threshold, units)}"


def cell_pitch(geometry, grid_hw: tuple[int, int], size: int) -> float:
    """A feature cell's width in image pixels: one over the grid columns a pixel step moves (the preprocessing
    is linear in x, so any two points give it)."""
    step = geometry.image_to_grid(np.array([[0.0, 0.0], [float(size), 0.0]]), grid_hw, size, size)
    return float(size / (step[1, 1] - step[0, 1]))


def run_correspondence(inputs: ProbeInputs) -> ProbeResult:
    p = inputs.params
    manifest = inputs.manifest
    size = manifest.params["size"]
    by_path = {item.path: item for item in manifest.items}
    thresholds = list(p["thresholds_px"])
    mutual, ratio = p.get("mutual", False), p.get("ratio")
    filtered = mutual or ratio is not None
    errors, ceiling_errors, accepted, sample_ids = [], [], [], []
    units = p.get("units", "px")
    errors, ceiling_errors, accepted, sample_ids, scales, shifts = [], [], [], [], [], []
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
        # a threshold's pixels: as given, or that many of the target's feature cells
        scales.append(np.full(len(points), cell_pitch(inputs.geometry, target.shape[-2:], size)
                              if units == "patch" else 1.0))
        shifts.append(np.full(len(points), pair.get("max_shift", np.nan)))
    error = np.concatenate(errors).astype(np.float64)
    ceiling = np.concatenate(ceiling_errors).astype(np.float64)
    scale = np.concatenate(scales)
    label = {t: threshold_label(t, units) for t in thresholds}
    columns = {f"pck@{label[t]}": (error <= t * scale).astype(np.float64) for t in thresholds}
    columns |= {f"ceiling_pck@{label[t]}": (ceiling <= t * scale).astype(np.float64) for t in thresholds}
    top = max(thresholds)
    columns[f"auc@{label[top]}"] = np.clip(1.0 - error / (top * scale), 0.0, 1.0)
    columns["mean_error_px"] = error
    if filtered:
        kept = np.concatenate(accepted)
        columns["match_rate"] = kept.astype(np.float64)
        columns |= {f"matched_pck@{label[t]}": (kept & (error <= t * scale)).astype(np.float64) for t in thresholds}
    metrics = column_means(columns)
    if filtered:
        count = int(kept.sum())
        metrics |= {f"precision@{label[t]}": float((kept & (error <= t * scale)).sum() / count) if count else 0.0
                    for t in thresholds}
        metrics["num_matches"] = count / len(accepted)
    shift = np.concatenate(shifts)
    for level in sorted(set(shift[~np.isnan(shift)].tolist())):
        points = shift == level
        metrics |= {f"pck@{label[t]}_shift{level:g}": float(columns[f"pck@{label[t]}"][points].mean())
                    for t in thresholds}
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
    headline_param="headline",
))
