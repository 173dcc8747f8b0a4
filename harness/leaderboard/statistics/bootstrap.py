"""Uncertainty and agreement for the leaderboard: bootstrap intervals, paired tests, Holm, ties, rank
correlation. Plain numpy, seeded, no state: the same inputs give the same bytes on every call.

Seeds are derived from what is being measured (a run id and a metric, or a pair of them), never from
the order pages are rendered in, so adding a board or a backbone elsewhere leaves every other interval
unchanged.

Definitions used on the site:

- **Confidence interval** of a metric: the 2.5th and 97.5th percentiles (numpy's linear quantile) of
  the means of `RESAMPLES` bootstrap resamples of the run's per-sample scores (rows drawn with
  replacement, as many as there are samples), for a metric that is the mean of its per-sample column. A
  metric that is not (macro-F1, BSDS's ODS/OIS/AP) is recomputed on each resample from the run's auxiliary
  columns (`harness.probes.resampled`), rows weighted by how often they were drawn; its interval and paired
  tests follow the same percentile and p-value rules.
- **Paired test** between two runs on the same samples: per-sample differences `d = a - b` (rows
  aligned by sample id), resampled as above with shared indices. The difference is `mean(d)`, its
  interval the percentile interval of the resampled means, and the two-sided p-value
  `min(1, 2 · min((1 + #{d* ≤ 0}) / (B + 1), (1 + #{d* ≥ 0}) / (B + 1)))`: how often the resampled
  difference lands on the other side of zero. The +1 keeps p above zero; the smallest attainable
  p-value is therefore `2 / (B + 1)` (about 0.001 at B = 2000).
- **Holm–Bonferroni**: p-values sorted ascending `p(1) ≤ … ≤ p(K)`, adjusted
  `p̃(i) = max over j ≤ i of min(1, (K − j + 1) · p(j))`; controls the family-wise error rate over
  the K tests without assuming independence.
- **Statistical ties**: see `tie_groups`.
- **Rank correlation**: Spearman's ρ (Pearson correlation of average ranks) and Kendall's τ-b, with a
  percentile bootstrap interval over the paired observations (backbones), reported only when there
  are at least `MIN_CORRELATION_N` of them.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from harness.core.bootstrap import (  # the one bootstrap a stage's metrics file and the site share
    _CHUNK_VALUES,
    CONFIDENCE,
    RESAMPLES,
    Interval,
    WeightedStatistic,
    _percentiles,
    _resampled_means,
    bootstrap_ci,
    statistic_draws,
)
from harness.core.bootstrap import derived_seed as derived_seed
from harness.core.bootstrap import interval_seed as interval_seed
from harness.core.bootstrap import paired_seed as paired_seed
from harness.core.bootstrap import statistic_ci as statistic_ci

ALPHA = 0.05  # significance level for ties, after Holm
MIN_CORRELATION_N = 4  # below this a bootstrap interval over backbones is meaningless


class PairingError(ValueError):
    """Two runs that cannot be compared sample by sample: their sample ids differ."""


@dataclass(frozen=True)
class PairedTest:
    difference: float  # mean of a − b over the shared samples
    low: float
    high: float
    p_value: float  # two-sided, unadjusted
    count: int


@dataclass(frozen=True)
class Correlation:
    n: int  # paired observations (backbones present in both columns)
    spearman: float | None  # None where undefined (n < 2 or a constant column)
    kendall: float | None
    spearman_ci: Interval | None  # None when n < MIN_CORRELATION_N or no resample is defined
    kendall_ci: Interval | None


def bootstrap_cis(jobs: Sequence[tuple[np.ndarray, int]], workers: int = 1) -> list[Interval]:
    """`bootstrap_ci(scores, seed)` of each job, in order, split over `workers` forked processes where there
    are several (Linux): each interval comes from its own seeded generator, so its bits do not depend on which
    process drew it (tests/test_statistics.py). The site's ~870 intervals: 2.5 s in one process on 2 cores."""
    if workers <= 1 or len(jobs) < 4 * workers or not hasattr(os, "fork"):
        return [bootstrap_ci(scores, seed) for scores, seed in jobs]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        parts = pool.map(_bootstrap_part, [list(jobs[start::workers]) for start in range(workers)])
    out: list[Interval] = [None] * len(jobs)  # type: ignore[list-item]
    for start, part in enumerate(parts):
        out[start::workers] = part
    return out


def _bootstrap_part(jobs: list[tuple[np.ndarray, int]]) -> list[Interval]:
    return [bootstrap_ci(scores, seed) for scores, seed in jobs]


def align(ids_a: Sequence[str], ids_b: Sequence[str]) -> np.ndarray:
    """Indices into b that put its rows in a's order; PairingError unless the id sets are equal."""
    if len(set(ids_a)) != len(ids_a) or len(set(ids_b)) != len(ids_b):
        raise PairingError("sample ids must be unique within a run")
    position = {sample_id: i for i, sample_id in enumerate(ids_b)}
    only_a = sorted(set(ids_a) - position.keys())
    only_b = sorted(position.keys() - set(ids_a))
    if only_a or only_b:
        example = (only_a or only_b)[0]
        raise PairingError(f"runs were scored on different samples: {len(only_a)} ids only in the first, "
                           f"{len(only_b)} only in the second (e.g. {example!r})")
    return np.array([position[sample_id] for sample_id in ids_a], dtype=np.int64)


def paired_bootstrap(
    ids_a: Sequence[str], scores_a: np.ndarray, ids_b: Sequence[str], scores_b: np.ndarray, seed: int,
    resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
) -> PairedTest:
    """Paired bootstrap of mean(a − b) over shared samples (see the module docstring).

    Rows are matched by sample id; PairingError when the two id sets differ, since a difference over
    different samples is not a paired difference.
    """
    order = align(ids_a, ids_b)
    differences = np.asarray(scores_a, dtype=np.float64) - np.asarray(scores_b, dtype=np.float64)[order]
    # Resample in sample-id order, not either file's row order: swapping a and b then negates every
    # resampled difference exactly, so the p-value and the tie it implies are symmetric.
    differences = differences[sorted(range(len(ids_a)), key=lambda i: ids_a[i])]
    if len(differences) == 0:
        raise PairingError("no samples to compare")
    draws = _resampled_means(differences, seed, resamples)
    return _paired_test(float(differences.mean()), draws, len(differences), confidence)


def _paired_test(difference: float, draws: np.ndarray, count: int, confidence: float) -> PairedTest:
    low, high = _percentiles(draws, confidence)
    at_or_below = (1 + int(np.count_nonzero(draws <= 0.0))) / (len(draws) + 1)
    at_or_above = (1 + int(np.count_nonzero(draws >= 0.0))) / (len(draws) + 1)
    p_value = min(1.0, 2.0 * min(at_or_below, at_or_above))
    return PairedTest(difference, low, high, p_value, count)


def paired_statistic_bootstrap(
    ids_a: Sequence[str], statistic_a: Callable[[np.ndarray], WeightedStatistic], ids_b: Sequence[str],
    statistic_b: Callable[[np.ndarray], WeightedStatistic], seed: int, resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> PairedTest:
    """Paired bootstrap of statistic(a) − statistic(b) for a metric that is not a mean (macro-F1, ODS): both runs'
    statistics recomputed on the same resamples of their shared samples, with the p-value and interval of
    `paired_bootstrap`. `statistic_x(order)` is run x's statistic over its rows taken in `order` (indices into its
    file's rows), evaluated under weights; rows are put in sample-id order, as `paired_bootstrap` does."""
    order_b = align(ids_a, ids_b)
    by_id = np.array(sorted(range(len(ids_a)), key=lambda i: ids_a[i]), dtype=np.int64)
    if len(by_id) == 0:
        raise PairingError("no samples to compare")
    first, second = statistic_a(by_id), statistic_b(order_b[by_id])

    def difference(weights: np.ndarray) -> np.ndarray:
        return first(weights) - second(weights)

    estimate = float(difference(np.ones((1, len(by_id))))[0])
    return _paired_test(estimate, statistic_draws(difference, len(by_id), seed, resamples), len(by_id), confidence)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the order given (ties in p broken by position)."""
    p = np.asarray(p_values, dtype=np.float64)
    count = len(p)
    adjusted = np.empty(count)
    running = 0.0
    for step, index in enumerate(np.argsort(p, kind="stable")):
        # max() keeps the adjusted values monotone in the sorted order, as the step-down procedure stops
        # at the first non-rejection.
        running = max(running, min(1.0, (count - step) * float(p[index])))
        adjusted[index] = running
    return adjusted.tolist()


def tie_groups(adjacent_adjusted_p: Sequence[float], alpha: float = ALPHA) -> list[int]:
    """Tie group of each of m ranked rows, from the m − 1 adjusted p-values of adjacent pairs.

    Rows are in rank order; `adjacent_adjusted_p[i]` is the Holm-adjusted p-value (over all pairs on the
    board) of the paired test between row i and row i + 1. Row i + 1 is *tied with the row above* when
    that p-value is ≥ `alpha`, and then joins row i's group; otherwise it starts a new group. Groups are
    numbered 0, 1, … from the top. Chaining is deliberate and not transitive: rows 1 and 3 can share a
    group through row 2 although their own difference is significant.
    """
    groups = [0]
    for p in adjacent_adjusted_p:
        groups.append(groups[-1] if p >= alpha else groups[-1] + 1)
    return groups


def group_label(group: int) -> str:
    """0 → "A", 25 → "Z", 26 → "AA": spreadsheet-style letters."""
    label = ""
    group += 1
    while group:
        group, remainder = divmod(group - 1, 26)
        label = chr(ord("A") + remainder) + label
    return label


# -- rank correlation --------------------------------------------------------------------------------


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n along the last axis, ties sharing the average of the ranks they span."""
    x = np.asarray(values, dtype=np.float64)
    less = (x[..., None, :] < x[..., :, None]).sum(axis=-1)
    equal = (x[..., None, :] == x[..., :, None]).sum(axis=-1)  # counts the value itself
    return less + (equal + 1) / 2.0


def pearson_r(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r along the last axis (NaN where a side is constant)."""
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    denominator = np.sqrt((xc * xc).sum(axis=-1) * (yc * yc).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (xc * yc).sum(axis=-1) / np.where(denominator > 0, denominator, 1), np.nan)


def spearman_rho(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's ρ along the last axis (NaN where a side is constant)."""
    return pearson_r(average_ranks(x), average_ranks(y))


def _pair_signs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (n, n) mask of pairs i < j, and sign(v_i − v_j) of every pair for x and for y (last axis)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = x.shape[-1]
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    return upper, np.sign(x[..., :, None] - x[..., None, :]), np.sign(y[..., :, None] - y[..., None, :])


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's τ-b along the last axis: (concordant − discordant) / sqrt of the untied pair counts."""
    upper, sign_x, sign_y = _pair_signs(x, y)
    n = upper.shape[-1]
    pairs = n * (n - 1) / 2.0
    score = (sign_x * sign_y * upper).sum(axis=(-2, -1))
    untied_x = pairs - ((sign_x == 0) & upper).sum(axis=(-2, -1))
    untied_y = pairs - ((sign_y == 0) & upper).sum(axis=(-2, -1))
    denominator = np.sqrt(untied_x * untied_y)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, score / np.where(denominator > 0, denominator, 1), np.nan)


def misrank_rate(proxy: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Along the last axis: the share of pairs that `target` orders (its values differ) which `proxy` orders
    the other way, a pair `proxy` ties counting one half (a coin would pick either order); NaN where
    `target` orders no pair. Both oriented so that higher is better."""
    upper, sign_p, sign_t = _pair_signs(proxy, target)
    ordered = (sign_t != 0) & upper
    wrong = np.where(sign_p == 0, 0.5, (sign_p * sign_t < 0).astype(np.float64))
    counted = ordered.sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counted > 0, (wrong * ordered).sum(axis=(-2, -1)) / np.where(counted > 0, counted, 1),
                        np.nan)


def _defined(value: np.ndarray) -> float | None:
    value = float(value)
    return None if np.isnan(value) else value


def rank_correlation(
    x: Sequence[float], y: Sequence[float], seed: int, resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE, min_n: int = MIN_CORRELATION_N,
) -> Correlation:
    """Spearman and Kendall between paired observations, with a bootstrap interval over the pairs.

    Pairs are resampled with replacement; a resample in which either side is constant has no
    correlation and is left out of the percentiles. No interval below `min_n` pairs.
    """
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if xs.shape != ys.shape or xs.ndim != 1:
        raise ValueError("rank_correlation needs two 1-D sequences of equal length")
    n = len(xs)
    if n < 2:
        return Correlation(n, None, None, None, None)
    rho, tau = _defined(spearman_rho(xs, ys)), _defined(kendall_tau_b(xs, ys))
    if n < min_n:
        return Correlation(n, rho, tau, None, None)
    spearman_ci, kendall_ci = paired_statistic_intervals(
        xs, ys, [(rho, spearman_rho), (tau, kendall_tau_b)], seed, resamples, confidence)
    return Correlation(n, rho, tau, spearman_ci, kendall_ci)


Statistic = Callable[[np.ndarray, np.ndarray], np.ndarray]  # vectorised over leading axes, NaN if undefined


def paired_statistic_intervals(
    x: np.ndarray, y: np.ndarray, statistics: Sequence[tuple[float | None, Statistic]], seed: int,
    resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
) -> list[Interval | None]:
    """A percentile bootstrap interval for each (estimate, statistic) of paired observations `x`, `y` (1-D):
    the pairs are resampled with replacement, all statistics on the same resamples; resamples where a
    statistic is undefined (NaN, e.g. a constant side) are left out of its percentiles. None where the
    estimate is None or no resample is defined."""
    n = len(x)
    index = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    # The statistics build (resamples, n, n) comparison arrays: evaluate in chunks to bound memory.
    rows = max(1, _CHUNK_VALUES // (n * n))
    chunks = [(x[index[i:i + rows]], y[index[i:i + rows]]) for i in range(0, resamples, rows)]
    intervals = []
    for estimate, statistic in statistics:
        draws = np.concatenate([statistic(a, b) for a, b in chunks])
        draws = draws[~np.isnan(draws)]
        intervals.append(None if estimate is None or len(draws) == 0
                         else Interval(estimate, *_percentiles(draws, confidence)))
    return intervals
