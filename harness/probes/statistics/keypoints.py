"""Keypoint recall and AUC at pixel thresholds, pooled over every ground-truth keypoint of the split: the seed's
keypoint metric names (`recall@{1,2,5,10}px`, `auc@{1,2,5}px`) on the keypoint heatmap protocol.

A run writes, per image, `keypoints_truth` (the ground-truth keypoints found in the target map),
`keypoints_hit@Npx` (those matched to a detection within N pixels) and `keypoints_auc@Npx` (the sum over matched
keypoints of max(0, 1 − distance / N)) as auxiliary columns (`harness.probes.dense.keypoints` defines them);
`keypoint_ratio:hit@Npx` and `keypoint_ratio:auc@Npx` are the weighted column sum over the weighted sum of
`keypoints_truth`, so every keypoint weighs the same whatever image it is in. No keypoint in the rows drawn: 0.0
(nothing to find, nothing found). NumPy only: the site imports this module without any probe module.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from harness.probes import resampled

TRUTH = "keypoints_truth"
RECALL_PX = (1, 2, 5, 10)
AUC_PX = (1, 2, 5)


def hit_column(threshold: int) -> str:
    return f"keypoints_hit@{threshold}px"


def auc_column(threshold: int) -> str:
    return f"keypoints_auc@{threshold}px"


def keypoint_ratio(columns: Mapping[str, np.ndarray], weights: np.ndarray, argument: str) -> np.ndarray:
    """(B,) Σ w·keypoints_<argument> / Σ w·keypoints_truth (0.0 where the rows drawn hold no keypoint)."""
    numerator = f"keypoints_{argument}"
    missing = [name for name in (numerator, TRUTH) if name not in columns]
    if missing:
        raise ValueError(f"a keypoint run's per-sample file lacks {', '.join(missing)}; re-run the probe to write "
                         "them")
    weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    found = weights @ np.asarray(columns[numerator], dtype=np.float64)
    truth = weights @ np.asarray(columns[TRUTH], dtype=np.float64)
    return np.where(truth > 0, found / np.where(truth > 0, truth, 1.0), 0.0)


resampled.STATISTICS.register("keypoint_ratio", module=__name__)(keypoint_ratio)
# metric name → statistic name, what the keypoint heatmap task declares
KEYPOINT_STATISTICS = {
    **{f"recall@{n}px": f"keypoint_ratio:hit@{n}px" for n in RECALL_PX},
    **{f"auc@{n}px": f"keypoint_ratio:auc@{n}px" for n in AUC_PX},
}
