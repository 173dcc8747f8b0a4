"""The dense probes' pooled metrics as resampled statistics (`harness.probes.resampled`): semantic segmentation's
mIoU and mean accuracy come from one confusion matrix over every evaluation pixel, and the regression maps'
Pearson r pools every pixel of the split, so neither is a mean of per-image scores. A run writes each image's
share of the pooled quantity as auxiliary columns and the site recomputes the metric from them under bootstrap
row weights; `check_result` recomputes each over all rows when the run ends and refuses a run whose metric
differs. NumPy only: the site imports this module without any probe module.

Semantic segmentation (`semantic_miou`, `semantic_mean_acc`): per class k, over the image's valid pixels (VOC's
ignore label already left out), `class_inter_k` (the confusion matrix's diagonal: pixels of class k predicted
k), `class_truth_k` (its row sum: pixels of class k) and `class_pred_k` (its column sum: pixels predicted k),
k zero-padded to three digits. That is all the matrix's mIoU and mean accuracy read (union = truth + pred −
inter), in 3K columns instead of K². Integer counts, so pooled sums are exact in float64 in any order, and the
statistic over all rows is `metrics.miou_from_confusion` / `semantic_summary` of the pooled matrix bit for bit.

Pearson r (`pooled_pearson`): per image, `pearson_n` (pixels), `pearson_mean_x`, `pearson_mean_y` (the image's
prediction and target means) and the centred sums `pearson_sxx`, `pearson_syy`, `pearson_sxy` (Σ(x − x̄)², …).
Pooled under weights by the parallel-variance combination (Chan et al.): the pooled means, then each image's
centred sums plus n·(its mean − the pooled mean) products, so large offsets never cancel against each other.
Constant prediction or target: 0.0, as `metrics.PearsonAccumulator`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from harness.probes import resampled

INTER, TRUTH, PREDICTED = "class_inter_", "class_truth_", "class_pred_"
_CLASS_COLUMN = re.compile(r"^class_(inter|truth|pred)_(\d{3})$")
PEARSON_N, MEAN_X, MEAN_Y = "pearson_n", "pearson_mean_x", "pearson_mean_y"
SXX, SYY, SXY = "pearson_sxx", "pearson_syy", "pearson_sxy"
PEARSON_COLUMNS = (PEARSON_N, MEAN_X, MEAN_Y, SXX, SYY, SXY)


def class_count_columns(matrices: np.ndarray) -> dict[str, np.ndarray]:
    """(n, K, K) per-image confusion matrices (rows truth, columns prediction) → the 3K auxiliary columns."""
    matrices = np.asarray(matrices, dtype=np.int64)
    if matrices.ndim != 3 or matrices.shape[1] != matrices.shape[2] or matrices.shape[1] > 1000:
        raise ValueError("per-image confusion matrices must be (images, K, K) with K ≤ 1000")
    inter = np.diagonal(matrices, axis1=1, axis2=2)
    truth, predicted = matrices.sum(axis=2), matrices.sum(axis=1)
    columns = {}
    for k in range(matrices.shape[1]):
        columns[f"{INTER}{k:03d}"] = inter[:, k].astype(np.float64)
        columns[f"{TRUTH}{k:03d}"] = truth[:, k].astype(np.float64)
        columns[f"{PREDICTED}{k:03d}"] = predicted[:, k].astype(np.float64)
    return columns


def _pooled_classes(columns: Mapping[str, np.ndarray], weights: np.ndarray) -> tuple[np.ndarray, ...]:
    """(B, K) pooled inter, truth and predicted counts."""
    found: dict[tuple[str, int], np.ndarray] = {}
    for name, column in columns.items():
        match = _CLASS_COLUMN.match(name)
        if match:
            found[match[1], int(match[2])] = column
    classes = 1 + max((k for _, k in found), default=-1)
    if classes == 0 or len(found) != 3 * classes:
        raise ValueError("a semantic segmentation run's per-sample file needs class_inter/class_truth/class_pred "
                         "columns for every class; re-run the probe to write them")
    weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    # integer counts under integer weights: every sum is exact in float64, in any order
    return tuple(weights @ np.stack([found[field, k] for k in range(classes)], axis=1)
                 for field in ("inter", "truth", "pred"))


def semantic_miou(columns: Mapping[str, np.ndarray], weights: np.ndarray, _: str = "") -> np.ndarray:
    """(B,) mIoU of the pooled confusion matrix: IoU averaged over the classes present in the prediction or the
    truth, 1.0 when no pixel is valid (`metrics.miou_from_confusion`)."""
    inter, truth, predicted = _pooled_classes(columns, weights)
    union = predicted + truth - inter  # the reference's column sum + row sum − diagonal, in its order
    values = np.ones(len(inter))
    for b in range(len(inter)):
        present = union[b] > 0
        if present.any():
            values[b] = np.mean(inter[b][present] / union[b][present])
    return values


def semantic_mean_acc(columns: Mapping[str, np.ndarray], weights: np.ndarray, _: str = "") -> np.ndarray:
    """(B,) mean over the classes present in the truth of their recall, 1.0 without any (`semantic_summary`)."""
    inter, truth, _predicted = _pooled_classes(columns, weights)
    values = np.ones(len(inter))
    for b in range(len(inter)):
        present = truth[b] > 0
        if present.any():
            values[b] = (inter[b][present] / truth[b][present]).mean()
    return values


def pearson_columns(pred: np.ndarray, target: np.ndarray) -> dict[str, np.ndarray]:
    """(N, ...) predictions and targets → each image's Pearson sufficient statistics, centred on its own means."""
    x = np.asarray(pred, dtype=np.float64).reshape(len(pred), -1)
    y = np.asarray(target, dtype=np.float64).reshape(len(target), -1)
    count = np.full(len(x), float(x.shape[1]))
    mean_x, mean_y = x.mean(axis=1), y.mean(axis=1)
    dx, dy = x - mean_x[:, None], y - mean_y[:, None]
    return {PEARSON_N: count, MEAN_X: mean_x, MEAN_Y: mean_y, SXX: np.einsum("ij,ij->i", dx, dx),
            SYY: np.einsum("ij,ij->i", dy, dy), SXY: np.einsum("ij,ij->i", dx, dy)}


def pooled_pearson(columns: Mapping[str, np.ndarray], weights: np.ndarray, _: str = "") -> np.ndarray:
    """(B,) Pearson r of every pixel of the weighted images (module docstring); 0.0 where a side is constant."""
    missing = [name for name in PEARSON_COLUMNS if name not in columns]
    if missing:
        raise ValueError(f"a Pearson run's per-sample file lacks {', '.join(missing)}; re-run the probe to write them")
    weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    n, mean_x, mean_y, sxx, syy, sxy = (np.asarray(columns[name], dtype=np.float64) for name in PEARSON_COLUMNS)
    pixels = weights @ n  # (B,)
    if np.any(pixels <= 0):
        raise ValueError("Pearson r of no pixels: a resample drew no image with pixels")
    wn = weights * n  # (B, n): pixels each image contributes to each resample
    pooled_x, pooled_y = (wn @ mean_x) / pixels, (wn @ mean_y) / pixels
    dx, dy = mean_x[None, :] - pooled_x[:, None], mean_y[None, :] - pooled_y[:, None]
    var_x = weights @ sxx + np.einsum("bi,bi->b", wn, dx * dx)
    var_y = weights @ syy + np.einsum("bi,bi->b", wn, dy * dy)
    cov = weights @ sxy + np.einsum("bi,bi->b", wn, dx * dy)
    positive = (var_x > 0) & (var_y > 0)
    r = cov / np.sqrt(np.where(positive, var_x * var_y, 1.0))
    return np.where(positive, np.clip(r, -1.0, 1.0), 0.0)


STATISTICS = {"semantic_miou": semantic_miou, "semantic_mean_acc": semantic_mean_acc, "pooled_pearson": pooled_pearson}
for _name, _statistic in STATISTICS.items():
    resampled.STATISTICS.register(_name, module=__name__)(_statistic)
# metric name → statistic name, what the dense tasks declare (`ProbeSpec.statistics`) and their results name
SEMANTIC_STATISTICS = {"miou": "semantic_miou", "mean_acc": "semantic_mean_acc"}
PEARSON_STATISTICS = {"pearson": "pooled_pearson"}
# the edge maps also carry the seed's name for the same number, so a record stands beside the seed's tables
EDGE_STATISTICS = {**PEARSON_STATISTICS, "edge_correlation": "pooled_pearson"}
