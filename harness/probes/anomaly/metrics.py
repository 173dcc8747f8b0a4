"""Anomaly detection metrics, NumPy only: the image metrics under bootstrap row weights, and the pixel metrics.

Image metrics rank the test images by anomaly score, defective images the positives:

- `auroc`: the area under the ROC curve, by the trapezoid rule over every distinct score;
- `average_precision` (AUPR): Σ_k (R_k − R_{k−1}) · P_k over the distinct scores, highest first (scikit-learn's
  `average_precision_score`: no interpolation);
- `f1_max`: the best F1 = 2·TP / (TP + FP + positives) over the distinct scores as thresholds;
- `fpr_at_tpr`: the false-positive rate at the highest threshold whose true-positive rate reaches `TPR_TARGET`.

A threshold is a distinct score: an image scores positive when its score is at least the threshold, so tied
scores move together, exactly as scikit-learn's `roc_curve` and `precision_recall_curve` treat them
(tests/test_anomaly_metrics.py compares every metric with them). Every image metric takes row weights (B, n),
how many times each image counts in each of B resamples (`harness.probes.resampled`), and returns (B,) values; a
resample with no positive or no negative image has no curve and gets NaN.

Pixel metrics pool every pixel of every test image: `auroc` over the pixels, and `aupro`, the MVTec AD
benchmark's per-region overlap (Bergmann et al., "The MVTec Anomaly Detection Dataset", IJCV 2021): at each
threshold, PRO is the mean over the ground truth's connected regions (8-connected, labelled by the caller) of
the share of the region's pixels at or above it, and the FPR is the share of the defect-free pixels (every pixel
outside a region, good images' included) at or above it; the PRO curve over FPR, from (0, 0) through every
distinct score, is integrated by the trapezoid rule up to `AUPRO_FPR_LIMIT` (the curve interpolated linearly
there) and divided by it, so a perfect map scores 1, as the benchmark's evaluation script
(`generic_util.compute_pro`, `trapezoid`) computes it, written here from that definition, in float64.
"""

from __future__ import annotations

import numpy as np

TPR_TARGET = 0.95  # FPR@95%TPR: the operating point that catches 95% of defective images
AUPRO_FPR_LIMIT = 0.3  # MVTec AD integrates PRO up to a false-positive rate of 30%


def threshold_counts(scores: np.ndarray, positive: np.ndarray, weights: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative true and false positives at each distinct score, highest first: (B, T) each, B = 1 without
    weights. Ties form one threshold (counted at the tie group's end), as scikit-learn's `_binary_clf_curve`."""
    scores = np.asarray(scores, dtype=np.float64).ravel()
    positive = np.asarray(positive, dtype=bool).ravel()
    if scores.shape != positive.shape:
        raise ValueError(f"{scores.size} scores for {positive.size} labels")
    if not np.all(np.isfinite(scores)):
        raise ValueError("anomaly scores must be finite")
    order = np.argsort(-scores, kind="stable")
    ranked = scores[order]
    last = np.r_[np.flatnonzero(np.diff(ranked)), ranked.size - 1]  # the end of each tie group
    hit = positive[order]
    if weights is None:
        true = np.cumsum(hit, dtype=np.float64)[last][None]
        false = (last + 1.0)[None] - true  # integers: exact
        return true, false
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 2 or weights.shape[1] != scores.size:
        raise ValueError(f"weights must be (B, {scores.size}); got {weights.shape}")
    ordered = weights[:, order]
    true = np.cumsum(ordered * hit, axis=1)[:, last]
    false = np.cumsum(ordered * ~hit, axis=1)[:, last]
    return true, false


def _rates(true: np.ndarray, false: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TPR and FPR (B, T) and whether each resample has both classes (B,); rates are 0 where it has not."""
    positives, negatives = true[:, -1:], false[:, -1:]
    defined = (positives[:, 0] > 0) & (negatives[:, 0] > 0)
    tpr = np.divide(true, positives, out=np.zeros_like(true), where=positives > 0)
    fpr = np.divide(false, negatives, out=np.zeros_like(false), where=negatives > 0)
    return tpr, fpr, defined


def auroc(scores: np.ndarray, positive: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Area under the ROC curve, (0, 0) prepended; (B,)."""
    tpr, fpr, defined = _rates(*threshold_counts(scores, positive, weights))
    tpr, fpr = _from_origin(tpr), _from_origin(fpr)
    area = np.sum(np.diff(fpr, axis=1) * (tpr[:, 1:] + tpr[:, :-1]) / 2, axis=1)
    return np.where(defined, area, np.nan)


def average_precision(scores: np.ndarray, positive: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Σ_k (R_k − R_{k−1}) · P_k, highest threshold first with R_0 = 0; precision 0 where nothing is predicted
    positive (there recall has not moved, so it adds nothing); (B,)."""
    true, false = threshold_counts(scores, positive, weights)
    tpr, _, defined = _rates(true, false)
    predicted = true + false
    precision = np.divide(true, predicted, out=np.zeros_like(true), where=predicted > 0)
    value = np.sum(np.diff(_from_origin(tpr), axis=1) * precision, axis=1)
    return np.where(defined, value, np.nan)


def f1_max(scores: np.ndarray, positive: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """The best F1 = 2·TP / (TP + FP + positives) over the distinct scores as thresholds; (B,)."""
    true, false = threshold_counts(scores, positive, weights)
    _, _, defined = _rates(true, false)
    f1 = 2 * true / np.maximum(true + false + true[:, -1:], np.finfo(np.float64).tiny)
    return np.where(defined, f1.max(axis=1), np.nan)


def fpr_at_tpr(scores: np.ndarray, positive: np.ndarray, weights: np.ndarray | None = None,
               target: float = TPR_TARGET) -> np.ndarray:
    """The FPR at the highest threshold whose TPR reaches `target` (the lowest FPR that catches that share of the
    positives); (B,)."""
    tpr, fpr, defined = _rates(*threshold_counts(scores, positive, weights))
    first = np.argmax(tpr >= target, axis=1)  # the last threshold has TPR 1, so one is always found
    return np.where(defined, fpr[np.arange(len(fpr)), first], np.nan)


def _from_origin(rates: np.ndarray) -> np.ndarray:
    return np.concatenate([np.zeros((len(rates), 1)), rates], axis=1)


def pixel_auroc(maps: np.ndarray, masks: np.ndarray) -> float:
    """AUROC over every pixel of every map, defect pixels the positives."""
    return float(auroc(np.asarray(maps).ravel(), np.asarray(masks).ravel())[0])


def pro_curve(maps: np.ndarray, regions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, PRO) at every distinct score, highest first, from (0, 0). `maps` (N, H, W) scores; `regions` (N, H, W)
    integer labels of each image's ground-truth regions (1, 2, … per image, as `scipy.ndimage.label` numbers
    them; 0 = defect-free)."""
    maps = np.asarray(maps, dtype=np.float64)
    regions = np.asarray(regions)
    if maps.shape != regions.shape or maps.ndim != 3:
        raise ValueError(f"maps {maps.shape} and regions {regions.shape} must be one (N, H, W) shape")
    # number every image's regions apart: region k of image i becomes k + (regions of the images before it)
    counts = regions.reshape(len(regions), -1).max(axis=1).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    labels = np.where(regions > 0, regions + offsets[:, None, None], 0).ravel()
    sizes = np.bincount(labels, minlength=int(counts.sum()) + 1)
    total = int(np.count_nonzero(sizes[1:]))  # regions that have pixels (a label skipped in numbering is none)
    ok = labels == 0
    if total == 0 or not ok.any():
        raise ValueError("AUPRO needs at least one defect region and one defect-free pixel")
    scores = maps.ravel()
    if not np.all(np.isfinite(scores)):
        raise ValueError("anomaly maps must be finite")
    order = np.argsort(-scores, kind="stable")
    ranked = scores[order]
    last = np.r_[np.flatnonzero(np.diff(ranked)), ranked.size - 1]
    false = np.cumsum(ok[order], dtype=np.float64)[last] / sizes[0]  # integer counts: exact before the division
    share = np.where(ok, 0.0, 1.0 / np.maximum(sizes[labels], 1))  # each region's pixels sum to 1
    pro = np.cumsum(share[order])[last] / total
    return np.r_[0.0, false], np.r_[0.0, pro]


def area_to(x: np.ndarray, y: np.ndarray, limit: float) -> float:
    """∫ y dx over [0, limit] by the trapezoid rule, x non-decreasing from 0 and reaching past `limit`; the curve
    is interpolated linearly at `limit` when no point lies there (MVTec AD's `trapezoid` with `x_max`)."""
    inside = int(np.searchsorted(x, limit, side="right"))  # points with x ≤ limit
    area = float(np.sum(np.diff(x[:inside]) * (y[1:inside] + y[:inside - 1]) / 2))
    if inside < len(x) and x[inside - 1] < limit:
        x0, x1, y0, y1 = x[inside - 1], x[inside], y[inside - 1], y[inside]
        at_limit = y0 + (y1 - y0) * (limit - x0) / (x1 - x0)
        area += (limit - x0) * (y0 + at_limit) / 2
    return area


def aupro(maps: np.ndarray, regions: np.ndarray, limit: float = AUPRO_FPR_LIMIT) -> float:
    """The area under the PRO curve up to FPR `limit`, divided by `limit` (see the module docstring)."""
    fpr, pro = pro_curve(maps, regions)
    return area_to(fpr, pro, limit) / limit
