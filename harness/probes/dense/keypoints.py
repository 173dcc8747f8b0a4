"""Keypoints found in a predicted heatmap and matched to the target's, per image: the columns behind the seed's
keypoint metric names on `dense-keypoint-heatmap/v2` (`harness.probes.statistics.keypoints` pools them).

- **Peaks.** A pixel is a peak when it is the maximum of its 3×3 neighbourhood, at least half-way from the map's
  minimum to its maximum on that image, and above the minimum (a flat map has none). Each map is read on its own
  scale: the target's peaks are its keypoints, the prediction's its detections, so a head is judged on where it
  puts its responses, not on how high (an MSE-trained head is under-confident on sparse blobs and rarely reaches the
  target's height).
- **Matching.** One-to-one and greedy, nearest pair first: among the pairs at most `MATCH_PX` (10) pixels apart,
  in order of distance (ties by keypoint, then detection, row-major), a pair is a match when neither side is
  matched yet. A pair farther apart is no match.
- **Columns.** Scores per image: `detections_per_image` (detections), `num_matches` (matched pairs). Auxiliary,
  pooled over every keypoint of the split by the statistic: `keypoints_truth`, `keypoints_hit@Npx` (matched
  within N px, N in 1, 2, 5, 10) and `keypoints_auc@Npx` (Σ max(0, 1 − distance / N), N in 1, 2, 5).

Distances are in pixels of the map the probe scores (`target_size`², not the source image): on the scenes at
112² one pixel is two of the 224-px image's.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import maximum_filter
from scipy.spatial import cKDTree

from harness.probes.statistics.keypoints import AUC_PX, RECALL_PX, TRUTH, auc_column, hit_column

MATCH_PX = max(RECALL_PX)
PEAK_FRACTION = 0.5


def peaks(heatmap: np.ndarray) -> np.ndarray:
    """(K, 2) row, column of the 3×3 local maxima of `heatmap` at least half-way from its minimum to its maximum,
    and above the minimum."""
    heatmap = np.asarray(heatmap, dtype=np.float64)
    top, bottom = float(heatmap.max()), float(heatmap.min())
    local = maximum_filter(heatmap, size=3, mode="constant", cval=-np.inf)
    found = (heatmap == local) & (heatmap >= bottom + PEAK_FRACTION * (top - bottom)) & (heatmap > bottom)
    return np.argwhere(found).astype(np.float64)


def match_distances(truth: np.ndarray, detections: np.ndarray) -> np.ndarray:
    """Distances of the greedy one-to-one matches at most MATCH_PX apart (module docstring)."""
    if not len(truth) or not len(detections):
        return np.zeros(0)
    near = cKDTree(truth).sparse_distance_matrix(cKDTree(detections), MATCH_PX, output_type="ndarray")
    order = np.lexsort((near["j"], near["i"], near["v"]))
    used_truth, used_detection, matched = set(), set(), []
    for i, j, distance in zip(near["i"][order], near["j"][order], near["v"][order], strict=True):
        if i not in used_truth and j not in used_detection:
            used_truth.add(i)
            used_detection.add(j)
            matched.append(distance)
    return np.asarray(matched, dtype=np.float64)


def keypoint_columns(pred: np.ndarray, target: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(N, H, W) predicted and target heatmaps → (score columns, auxiliary columns), each (N,) float64."""
    scores: dict[str, list[float]] = {"detections_per_image": [], "num_matches": []}
    auxiliary: dict[str, list[float]] = {TRUTH: [], **{hit_column(n): [] for n in RECALL_PX},
                                         **{auc_column(n): [] for n in AUC_PX}}
    for p, t in zip(pred, target, strict=True):
        truth, detections = peaks(t), peaks(p)
        matched = match_distances(truth, detections)
        scores["detections_per_image"].append(float(len(detections)))
        scores["num_matches"].append(float(len(matched)))
        auxiliary[TRUTH].append(float(len(truth)))
        for n in RECALL_PX:
            auxiliary[hit_column(n)].append(float(np.sum(matched <= n)))
        for n in AUC_PX:
            auxiliary[auc_column(n)].append(float(np.sum(np.clip(1.0 - matched / n, 0.0, 1.0))))
    return ({k: np.asarray(v, dtype=np.float64) for k, v in scores.items()},
            {k: np.asarray(v, dtype=np.float64) for k, v in auxiliary.items()})
