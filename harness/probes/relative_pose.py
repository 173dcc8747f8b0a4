"""Relative camera pose from matched dense features (protocol `essential-matrix-pose/v1`).

Two renders of one procedural scene from nearby cameras (`procedural_scene_pairs`), the truth exact from the
renderer. Per pair, training-free:

1. *Matches.* Every cell of view 0's dense map (`fit: squash`, the layers asked for) is matched to view 1's cells
   by cosine nearest neighbour, with the correspondence probe's filters (`match_pair`, imported, so the two
   probes filter alike): `mutual` keeps a match only when the matched view-1 cell's own nearest view-0 cell is
   the query cell; `ratio: r` only when the cosine distance to the best cell is below r times the second best's
   (Lowe's ratio test on 1 − cos). A match is the pair of the two cells' centres in image pixels: the squash fit
   resizes the whole square image to the backbone's input, so cell (i, j) of an h×w map is centred at
   ((j + 0.5)·W / w, (i + 0.5)·H / h), in the renderer's convention (the image spans [0, W]) that K uses too.
2. *Pose.* The matches, normalised by each view's K, go to OpenCV's `findEssentialMat` (prob 0.99999, the inlier
   threshold `ransac_threshold` in pixels, or in cells with `units: patch`, divided by the mean focal length, as
   SuperGlue's `estimate_pose` does; `max_iterations` hypotheses at most), then `recoverPose` on its inliers (the
   cheirality test picks R and the sign of t among the four decompositions); where OpenCV returns several 3×3
   solutions, the one with most cheirality inliers is kept (SuperGlue's rule). `method` picks the estimator:
   `magsac` (the default: cv2.USAC_MAGSAC, MAGSAC++ scoring with local optimisation and a final least-squares
   fit) or `ransac` (cv2.RANSAC, SuperGlue's and LoFTR's protocol: the best minimal five-point model, no final
   fit). Matches between cell centres lie on two regular grids, and cv2.RANSAC's five-point solver raises on the
   degenerate samples such grids give (OpenCV's solvePoly assertion), which aborts the whole fit: even perfect
   matches on 7×7 grids abort many pairs' fits, where MAGSAC++ rarely fails (tests/test_relative_pose.py shows a
   pair). Both estimators draw from generators of their own with fixed seeds (in OpenCV 5.1
   `cv2.setRNGSeed` changes neither result; it is set to the run's seed anyway, for a build that draws from the
   global generator) and OpenCV runs on one thread meanwhile, so a pair's result depends neither on the
   machine's cores nor on the other pairs.
3. *Errors* against the true (R, t) from view 0's camera frame to view 1's: `rotation_error`, the angle of
   R_est · R_gtᵀ; `translation_error`, the angle between t_est and t_gt folded into [0°, 90°] as
   min(e, 180° − e): SuperGlue's (and LoFTR's) convention, since an essential matrix fixes t only up to sign
   and a near-degenerate set of matches can pass the cheirality test with the wrong sign; `pose_error`, the
   larger of the two. A pair with fewer than 5 matches (the five-point solver's minimum), or where the fit
   fails (no essential matrix, an OpenCV error, no match in front of both cameras), is a *failure*: all three
   errors are 180° and its `failed` is 1.
4. *Oracle.* The same estimator on perfect matches at the same grids (`oracle_matches`: each view-0 cell centre's
   surface point, from view 0's depth and the true pose, matched to the view-1 cell it appears in, where view 1
   sees it). Cell centres are coarse: on a 7×7 grid at 224 px even these matches leave errors of many degrees,
   so read a backbone's AUC against its `oracle_auc@T` (like correspondence's ceiling, but not a strict bound:
   the estimator's noise can favour a real matcher on a pair).

Metrics, each the mean of a per-pair column (unit "pair", id = the pair's folder):
`auc@5`, `auc@10` (the default headline; `headline` picks another), `auc@20`: per pair max(0, 1 − pose_error / T).
Their mean is exactly the area under the recall-vs-threshold step curve (the share of pairs with pose_error ≤ τ,
for τ from 0 to T) divided by T: the area under a step function is the sum of its steps, ∫₀ᵀ [e ≤ τ] dτ =
max(0, T − e) per pair. SuperGlue's `pose_auc` joins the curve's points with straight lines (the trapezoid rule
over the sorted errors), which differs slightly (by under half a step per pair: it credits each pair from the
previous pair's error on), so its numbers are not these to the last digit. Also `rotation_error`,
`translation_error`, `pose_error` (degrees, lower is better, failures at 180°), `failed`, `num_matches`
(accepted matches), `inlier_ratio` (the estimator's inliers over matches, 0 for a pair with no fit), and
`oracle_pose_error`, `oracle_auc@T` (step 4).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from harness.probes.base import Layers, ProbeInputs, ProbeParams, ProbeResult, ProbeSpec, column_means, register_probe
from harness.probes.camera import carry, normalised
from harness.probes.correspondence import match_pair
from harness.probes.dense.targets import load_target

DEPTH = "depth"  # each view's metric depth map (harness.datasets.scene_pairs), read by the oracle
AUC_THRESHOLDS_DEG = (5, 10, 20)  # SuperGlue's (Sarlin et al., CVPR 2020) and LoFTR's pose AUC thresholds
FAILURE_DEG = 180.0  # every error of a failed pair: the worst a rotation can be, past every AUC threshold
MIN_MATCHES = 5  # the five-point solver's minimum (Nistér 2004)
RANSAC_CONFIDENCE = 0.99999  # SuperGlue's estimate_pose
# The oracle's visibility test: a view-0 point is seen in view 1 when view 1's depth there is not nearer than its
# own depth by more than this share (a nearer surface hides it; the slack absorbs the nearest-pixel lookup).
OCCLUSION_SLACK = 0.03


class RelativePoseParams(ProbeParams):
    layers: Layers = None
    eval_split: str = Field(min_length=1)  # the split whose pairs are scored; nothing is trained
    mutual: bool = True  # keep only mutual nearest neighbours (see the module docstring)
    ratio: float | None = Field(default=None, gt=0.0, le=1.0)  # Lowe's ratio test on cosine distance
    ransac_threshold: PositiveFloat = 1.0  # the estimator's inlier threshold (either method), in `units`
    units: Literal["px", "patch"] = "px"  # image pixels, or the backbone's feature cells (its cell pitch)
    max_iterations: PositiveInt = 1000  # RANSAC hypotheses at most (OpenCV's default)
    # OpenCV's estimator: `magsac` (cv2.USAC_MAGSAC) or `ransac` (cv2.RANSAC, SuperGlue's); the docstring says why
    # MAGSAC++ is the default
    method: Literal["magsac", "ransac"] = "magsac"
    headline: Literal["auc@5", "auc@10", "auc@20"] = "auc@10"


class SquashGrid:
    """Cell ↔ pixel geometry of a square image squashed whole onto the backbone's input (`fit: squash`), in the
    two methods `match_pair` asks of a geometry (`Preprocess`'s are the crop fit's)."""

    @staticmethod
    def grid_centres_in_image(grid_hw: tuple[int, int], width: int, height: int) -> np.ndarray:
        """(gh, gw, 2) xy pixel coordinates of each cell's centre."""
        gh, gw = grid_hw
        xs = (np.arange(gw) + 0.5) * width / gw
        ys = (np.arange(gh) + 0.5) * height / gh
        return np.stack(np.meshgrid(xs, ys), axis=-1)

    @staticmethod
    def image_to_grid(points_xy: np.ndarray, grid_hw: tuple[int, int], width: int, height: int) -> np.ndarray:
        """Continuous (row, col) cell coordinates of image points (cell centres at .5)."""
        gh, gw = grid_hw
        return np.stack([points_xy[..., 1] * gh / height, points_xy[..., 0] * gw / width], axis=-1)


def match_cells(view0: np.ndarray, view1: np.ndarray, size: int, mutual: bool,
                ratio: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(N, 2) and (N, 2) xy pixel positions of the accepted matches from view 0's cells into view 1's."""
    grid = SquashGrid()
    queries = grid.grid_centres_in_image(view0.shape[-2:], size, size).reshape(-1, 2)
    matched, _, accepted = match_pair(view0, view1, queries, grid, size, mutual, ratio)
    return queries[accepted], matched[accepted]


def rotation_error(estimate: np.ndarray, truth: np.ndarray) -> float:
    """Degrees: the angle of the rotation estimate · truthᵀ. atan2 of its axis vector's length and its trace,
    rather than arccos of the trace alone, which loses precision near 0° (where good estimates are)."""
    delta = np.asarray(estimate, dtype=np.float64) @ np.asarray(truth, dtype=np.float64).T
    axis = np.array([delta[2, 1] - delta[1, 2], delta[0, 2] - delta[2, 0], delta[1, 0] - delta[0, 1]])
    return float(np.degrees(np.arctan2(np.linalg.norm(axis) / 2.0, (np.trace(delta) - 1.0) / 2.0)))


def translation_error(estimate: np.ndarray, truth: np.ndarray) -> float:
    """Degrees: the angle between the two directions, folded to min(e, 180° − e) (the essential matrix's sign
    ambiguity; SuperGlue's compute_pose_error). atan2 of the cross and dot products, precise near 0°."""
    a, b = np.asarray(estimate, dtype=np.float64).ravel(), np.asarray(truth, dtype=np.float64).ravel()
    angle = float(np.degrees(np.arctan2(np.linalg.norm(np.cross(a, b)), float(a @ b))))
    return min(angle, 180.0 - angle)


def auc_columns(pose_errors: np.ndarray, thresholds: tuple[float, ...] = AUC_THRESHOLDS_DEG) -> dict[str, np.ndarray]:
    """Per pair, max(0, 1 − error / T) for each threshold T: the column whose mean is the exact area under the
    recall-vs-threshold step curve over [0, T], divided by T (see the module docstring)."""
    errors = np.asarray(pose_errors, dtype=np.float64)
    return {f"auc@{t:g}": np.clip(1.0 - errors / t, 0.0, 1.0) for t in thresholds}


def _estimator_flags() -> dict[str, int]:
    import cv2

    return {"ransac": cv2.RANSAC, "magsac": cv2.USAC_MAGSAC}


@contextlib.contextmanager
def _opencv_deterministic(seed: int) -> Iterator[None]:
    import cv2

    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # a fit must not depend on how OpenCV splits work over the machine's cores
    cv2.setRNGSeed(seed)
    try:
        yield
    finally:
        cv2.setNumThreads(threads)  # leave the process as it was (tests, and other probes, share it)


def estimate_pose(points0: np.ndarray, points1: np.ndarray, k0: np.ndarray, k1: np.ndarray, threshold_px: float,
                  seed: int, max_iterations: int = 1000,
                  method: str = "magsac") -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(R, unit t, the estimator's inlier mask) with x1 = R·x0 + t·s for some s > 0, from pixel matches of two
    views with intrinsics K0, K1; None when it fails (fewer than MIN_MATCHES matches, no essential matrix, an
    OpenCV error, or no match in front of both cameras). SuperGlue's `estimate_pose`, with `method`'s estimator,
    OpenCV seeded and on one thread."""
    import cv2

    if len(points0) < MIN_MATCHES:
        return None
    n0, n1 = normalised(points0, k0), normalised(points1, k1)  # each view's normalised camera coordinates
    focal = float(np.mean([k0[0][0], k0[1][1], k1[0][0], k1[1][1]]))
    identity = np.eye(3)
    with _opencv_deterministic(seed):
        try:
            essential, mask = cv2.findEssentialMat(n0, n1, identity, method=_estimator_flags()[method],
                                                   prob=RANSAC_CONFIDENCE, threshold=threshold_px / focal,
                                                   maxIters=int(max_iterations))
        except cv2.error:  # cv2.RANSAC's five-point solver raises on a degenerate sample: the fit failed
            return None
        if essential is None or essential.shape[0] < 3 or mask is None:
            return None
        inliers = mask.ravel().astype(bool)
        best: tuple[int, np.ndarray, np.ndarray] | None = None
        for start in range(0, essential.shape[0] - 2, 3):  # several solutions come stacked as (3k, 3)
            count, rotation, translation, _ = cv2.recoverPose(essential[start:start + 3], n0, n1, identity,
                                                               mask=mask.copy())
            if count > (best[0] if best else 0):
                best = (count, rotation, translation.ravel())
    if best is None:
        return None
    return best[1], best[2], inliers


def oracle_matches(depth0: np.ndarray, depth1: np.ndarray, pair: dict, grid0: tuple[int, int],
                   grid1: tuple[int, int], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Perfect matching on these grids: each view-0 cell centre paired with the centre of the view-1 cell where its
    surface point appears, for the centres whose point view 1 sees (in the frame, not behind a nearer surface).
    The point is the cell centre's ray at the depth of the pixel containing the centre (so it is exact to within
    half a pixel), carried by the true pose; (N, 2) and (N, 2) xy pixels."""
    k0, k1 = np.asarray(pair["K0"], dtype=np.float64), np.asarray(pair["K1"], dtype=np.float64)
    rotation, translation = np.asarray(pair["R"], dtype=np.float64), np.asarray(pair["t"], dtype=np.float64)
    centres = SquashGrid.grid_centres_in_image(grid0, size, size).reshape(-1, 2)
    h0, w0 = depth0.shape
    z0 = depth0[np.minimum((centres[:, 1] * h0 / size).astype(int), h0 - 1),
                np.minimum((centres[:, 0] * w0 / size).astype(int), w0 - 1)].astype(np.float64)
    x1, y1, z1 = carry(centres, z0, k0, rotation, translation, k1)
    inside = (z0 > 0) & (z1 > 0) & (x1 >= 0) & (x1 < size) & (y1 >= 0) & (y1 < size)
    h1, w1 = depth1.shape
    seen = np.zeros_like(z1)
    seen[inside] = depth1[(y1[inside] * h1 / size).astype(int), (x1[inside] * w1 / size).astype(int)]
    visible = inside & (seen > 0) & (seen >= (1.0 - OCCLUSION_SLACK) * z1)
    cells = np.floor(SquashGrid.image_to_grid(np.stack([x1, y1], axis=-1)[visible], grid1, size, size)).astype(int)
    matched = SquashGrid.grid_centres_in_image(grid1, size, size)[cells[:, 0], cells[:, 1]]
    return centres[visible], matched


def _pose_errors(fit: tuple[np.ndarray, np.ndarray, np.ndarray] | None, pair: dict) -> tuple[float, float]:
    if fit is None:
        return FAILURE_DEG, FAILURE_DEG
    return rotation_error(fit[0], np.asarray(pair["R"])), translation_error(fit[1], np.asarray(pair["t"]))


def run_relative_pose(inputs: ProbeInputs) -> ProbeResult:
    p = RelativePoseParams(**inputs.params)  # with the defaults params.yaml leaves out
    manifest = inputs.manifest
    size = int(manifest.params["size"])
    by_path = {item.path: item for item in manifest.items}
    pairs = [pair for pair in manifest.extra.get("pairs", []) if pair["split"] == p.eval_split]
    if not pairs:
        raise ValueError(f"dataset {manifest.name} has no pairs in split {p.eval_split!r} (relative_pose reads a "
                         "procedural_scene_pairs dataset's extra['pairs'])")
    rows: dict[str, list[float]] = {name: [] for name in (
        "rotation_error", "translation_error", "pose_error", "failed", "num_matches", "inlier_ratio",
        "oracle_pose_error")}
    for pair in pairs:
        view0 = np.asarray(inputs.features(by_path[pair["view0"]]))
        view1 = np.asarray(inputs.features(by_path[pair["view1"]]))
        if view0.ndim != 3 or view1.ndim != 3:
            raise ValueError(f"{pair['id']}: relative_pose reads dense (C, H, W) features; got {view0.shape}")
        # a threshold in cells is in the coarser map's: the quantisation a correct match carries
        pitch = max(size / view0.shape[-1], size / view1.shape[-1]) if p.units == "patch" else 1.0
        settings = (np.asarray(pair["K0"]), np.asarray(pair["K1"]), p.ransac_threshold * pitch, inputs.seed,
                    p.max_iterations, p.method)
        points0, points1 = match_cells(view0, view1, size, p.mutual, p.ratio)
        found = estimate_pose(points0, points1, *settings)
        errors = _pose_errors(found, pair)
        rows["rotation_error"].append(errors[0])
        rows["translation_error"].append(errors[1])
        rows["pose_error"].append(max(errors))
        rows["failed"].append(float(found is None))
        rows["num_matches"].append(float(len(points0)))
        rows["inlier_ratio"].append(0.0 if found is None else float(found[2].mean()))
        depths = [np.asarray(load_target(manifest, by_path[pair[view]], DEPTH)) for view in ("view0", "view1")]
        oracle = oracle_matches(depths[0], depths[1], pair, view0.shape[-2:], view1.shape[-2:], size)
        rows["oracle_pose_error"].append(max(_pose_errors(estimate_pose(*oracle, *settings), pair)))
    columns = {name: np.asarray(values, dtype=np.float64) for name, values in rows.items()}
    columns = auc_columns(columns["pose_error"]) | columns
    columns |= {f"oracle_{name}": column for name, column in auc_columns(columns["oracle_pose_error"]).items()}
    return ProbeResult(column_means(columns), [pair["id"] for pair in pairs], columns, unit="pair")


RELATIVE_POSE = register_probe(ProbeSpec(
    name="relative_pose",
    level="mid",
    protocol="essential-matrix-pose/v1",
    feature_mode="dense",
    headline="auc@10",
    run=run_relative_pose,
    params=RelativePoseParams,
    lower_is_better=frozenset({"rotation_error", "translation_error", "pose_error", "failed", "oracle_pose_error"}),
    headline_param="headline",
    fit="squash",  # the dense probes' read of the scenes: each view resized whole, so cells map back by a scale
    train_split_param=None,  # training-free: nothing is fitted on any split
))
