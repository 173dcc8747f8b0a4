"""ODS, OIS, AP and R50 from per-image boundary counts, as BSDS's `collect_eval_bdry.m` computes them.

Input: (N, K, 4) counts [cntR, sumR, cntP, sumP] per image and threshold (see `matching`). With
R = cntR / (sumR + (sumR == 0)), P = cntP / (sumP + (sumP == 0)), F = 2PR / (P + R + (P + R == 0)):

- ODS: counts summed over images per threshold; the best F along the piecewise-linear P/R curve,
  sampled at 100 points per segment between consecutive thresholds (`maxF`, `linspace(0, 1)`).
- OIS: per image, the first threshold with the highest (non-interpolated) F (`ff(1)`); those counts
  summed over images, then F.
- AP (BSDS's `Area_PR`): `[Ru, i] = unique(R)`, P interpolated linearly at R = 0:0.01:1, values outside
  the curve's recall range 0, summed × 0.01. `unique` keeps the first occurrence (current MATLAB and
  numpy; MATLAB before R2013a kept the last, which only matters where two thresholds tie in recall).
- R50 (SE's `edgesEvalDir.m`): recall interpolated at precision max(min P, 0.5) along the unique
  precisions; 0 where precision never reaches 0.5 (no recall is reachable at that precision).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_STEPS = np.linspace(0.0, 1.0, 100)  # MATLAB's linspace(0, 1): 100 points
COUNT_FIELDS = ("cnt_r", "sum_r", "cnt_p", "sum_p")  # the last axis of every counts array


def recall_precision(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cnt_r, sum_r, cnt_p, sum_p = np.moveaxis(np.asarray(counts, dtype=np.float64), -1, 0)
    return cnt_r / (sum_r + (sum_r == 0)), cnt_p / (sum_p + (sum_p == 0))


def f_measure(recall: np.ndarray, precision: np.ndarray) -> np.ndarray:
    total = precision + recall
    return 2.0 * precision * recall / (total + (total == 0))


@dataclass(frozen=True)
class BestF:
    threshold: float
    recall: float
    precision: float
    f: float
    segment: int  # index j of the segment (thresholds j-1 → j) holding the optimum; 0 = the first threshold
    weight: float  # position d along that segment


def best_f(thresholds: np.ndarray, recall: np.ndarray, precision: np.ndarray) -> BestF:
    """`maxF`: start at the first threshold, keep the first strictly better point along the segments."""
    best = best_f_batch(np.asarray(recall)[None], np.asarray(precision)[None])
    segment, weight = int(best.segment[0]), float(best.weight[0])
    t = float(thresholds[0]) if segment == 0 else float(
        thresholds[segment] * _STEPS[best.step[0]] + thresholds[segment - 1] * (1 - _STEPS[best.step[0]]))
    return BestF(t, float(best.recall[0]), float(best.precision[0]), float(best.f[0]), segment, weight)


@dataclass(frozen=True)
class BestFBatch:
    f: np.ndarray  # (B,) each
    recall: np.ndarray
    precision: np.ndarray
    segment: np.ndarray  # as BestF.segment
    step: np.ndarray  # index into the 100 points of that segment
    weight: np.ndarray  # as BestF.weight


_BATCH = 256  # curves per chunk: at most (256·(K-1), 100) floats at a time
_BOUND_MARGIN = 1e-9  # far above the few ulps interpolation can add to a segment's ends


def best_f_batch(recall: np.ndarray, precision: np.ndarray) -> BestFBatch:
    """`best_f` of B curves at once ((B, K) recall and precision), with the same arithmetic per curve, so each
    result has the bits `best_f` gives it alone: what a bootstrap of ODS evaluates per resample."""
    recall, precision = np.asarray(recall, dtype=np.float64), np.asarray(precision, dtype=np.float64)
    parts = [_best_f_chunk(recall[i:i + _BATCH], precision[i:i + _BATCH]) for i in range(0, len(recall), _BATCH)]
    return BestFBatch(*(np.concatenate(values) for values in zip(*parts, strict=True)))


def _best_f_chunk(recall: np.ndarray, precision: np.ndarray) -> tuple[np.ndarray, ...]:
    b = len(recall)
    first_f = f_measure(recall[:, 0], precision[:, 0])
    zeros = np.zeros(b, dtype=np.int64)
    if recall.shape[1] < 2:
        return first_f, recall[:, 0], precision[:, 0], zeros, zeros, np.zeros(b)
    # F grows with both R and P, so on a segment F ≤ F(max R, max P) of its ends, and the segment holding a
    # thresholds' best F reaches at least that: only segments whose bound reaches the best threshold's F can hold
    # the maximum. The rest are skipped (most of a curve), the kept ones sampled exactly as `maxF` samples them,
    # so the result keeps every bit; the margin covers interpolation's rounding above the ends.
    ends = f_measure(recall, precision)
    bound = f_measure(np.maximum(recall[:, 1:], recall[:, :-1]), np.maximum(precision[:, 1:], precision[:, :-1]))
    curve, segment = np.nonzero(bound >= ends.max(axis=1, keepdims=True) - _BOUND_MARGIN)
    d = _STEPS[None, :]
    r = recall[curve, segment + 1, None] * d + recall[curve, segment, None] * (1 - d)
    p = precision[curve, segment + 1, None] * d + precision[curve, segment, None] * (1 - d)
    f = f_measure(r, p)  # (kept segments, 100), grouped by curve in segment order
    row_best = f.max(axis=1)
    starts = np.flatnonzero(np.r_[True, curve[1:] != curve[:-1]])  # every curve keeps its best threshold's segment
    curve_best = np.maximum.reduceat(row_best, starts)
    # the first kept segment (in the loop's order) reaching its curve's maximum, and its first point reaching it
    first = np.flatnonzero(row_best == np.repeat(curve_best, np.diff(np.r_[starts, len(curve)])))
    first = first[np.r_[True, curve[first[1:]] != curve[first[:-1]]]]
    step = np.argmax(f[first], axis=1)
    best_f_value, best_r, best_p = f[first, step], r[first, step], p[first, step]
    better = best_f_value > first_f
    return (np.where(better, best_f_value, first_f), np.where(better, best_r, recall[:, 0]),
            np.where(better, best_p, precision[:, 0]), np.where(better, segment[first] + 1, 0),
            np.where(better, step, 0), np.where(better, _STEPS[step], 0.0))


def at_best(values: np.ndarray, best: BestF) -> np.ndarray:
    """(N, K) per-image values read at the ODS point: the same segment and position as `best`."""
    if best.segment == 0:
        return values[:, 0]
    return values[:, best.segment] * best.weight + values[:, best.segment - 1] * (1 - best.weight)


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    unique_r, first = np.unique(recall, return_index=True)
    if len(unique_r) < 2:
        return 0.0
    sampled = np.interp(np.linspace(0.0, 1.0, 101), unique_r, precision[first], left=0.0, right=0.0)
    return float(sampled.sum() * 0.01)


def recall_at_half_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    unique_p, first = np.unique(precision, return_index=True)
    target = max(unique_p[0], 0.5)
    if target > unique_p[-1]:
        return 0.0
    return float(np.interp(target, unique_p, recall[first]))


def summarise(thresholds: np.ndarray, counts: np.ndarray) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Dataset metrics and per-image columns from (N, K, 4) counts."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 3 or counts.shape[1:] != (len(thresholds), 4):
        raise ValueError(f"counts must be (N, {len(thresholds)}, 4); got {counts.shape}")
    recall, precision = recall_precision(counts.sum(axis=0))
    ods = best_f(thresholds, recall, precision)
    image_r, image_p = recall_precision(counts)
    image_f = f_measure(image_r, image_p)
    best_index = np.argmax(image_f, axis=1)  # first maximum: collect_eval_bdry's ff(1)
    ois_r, ois_p = recall_precision(counts[np.arange(len(counts)), best_index].sum(axis=0))
    image_best = np.array([best_f(thresholds, r, p).f for r, p in zip(image_r, image_p, strict=True)])
    metrics = {
        "ods_f": ods.f, "ods_precision": ods.precision, "ods_recall": ods.recall, "ods_threshold": ods.threshold,
        "ois_f": float(f_measure(ois_r, ois_p)), "ois_precision": float(ois_p), "ois_recall": float(ois_r),
        "ap": average_precision(recall, precision), "r50": recall_at_half_precision(recall, precision),
    }
    columns = {
        "image_f_at_ods": f_measure(at_best(image_r, ods), at_best(image_p, ods)),
        "image_best_f": image_best,
    }
    return metrics, columns
