"""Proxy validity: how well one board's ranking of the pretrained backbones predicts another's.

BioBench's question ("does ImageNet top-1 tell you how a backbone will do on my task?") asked of every
pair of boards: board P is the proxy, board Q the target, and the observations are the pretrained rows
(backbone and layer set) with a headline value on both. For each ordered pair (P, Q):

- **R²**: the squared Pearson correlation of the headline values, i.e. the share of Q's variance a
  least-squares line through P explains;
- **Spearman ρ** and **Kendall τ-b** of the two orders;
- **mis-rank rate**: of the pairs of backbones that Q orders (different values), the share that P orders the
  other way, a pair P ties counting one half (`statistics.misrank_rate`);
- each with a 95% percentile bootstrap interval over the rows (`statistics.paired_statistic_intervals`);
- the **threshold sweep**: the same ρ and mis-rank rate over only the rows whose proxy value is at or
  beyond T, for every T among P's own values that leaves at least `MIN_CORRELATION_N` rows: BioBench's
  finding is that a proxy that orders the whole range well can fail among the strong models that matter.

Values are oriented so that higher is better on both boards; controls are left out (bad everywhere, they
would make any proxy look valid). Below `MIN_CORRELATION_N` shared rows nothing is estimated: the pair is
listed with its count, and the page says so. Seeds derive from the boards' keys (and T), so a number moves
only when its own rows do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.leaderboard.statistics.analysis import BoardStats, oriented_columns
from harness.leaderboard.statistics.bootstrap import (
    MIN_CORRELATION_N,
    Interval,
    derived_seed,
    kendall_tau_b,
    misrank_rate,
    paired_statistic_intervals,
    pearson_r,
    spearman_rho,
)

Cells = dict[tuple[str, str, str], dict[str, Any]]  # (backbone name, layers, key) -> cross-task cell


@dataclass(frozen=True)
class Estimates:
    n: int  # pretrained rows in the estimate
    r2: Interval | None  # None: undefined (a constant side) or, for the sweep, not computed
    spearman: Interval | None
    kendall: Interval | None
    misrank: Interval | None


@dataclass(frozen=True)
class SweepPoint:
    threshold: float  # the proxy's headline value, in its own units; rows at or beyond it count
    estimates: Estimates


@dataclass(frozen=True)
class ProxyFit:
    proxy: str  # comparability keys
    target: str
    n: int  # shared pretrained rows
    weakest: float  # the weakest shared row's proxy value: the threshold at which every row counts
    whole: Estimates | None  # None below MIN_CORRELATION_N shared rows
    sweep: list[SweepPoint]  # thresholds past the weakest row that leave MIN_CORRELATION_N rows


def _r2(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return pearson_r(x, y) ** 2


_STATISTICS = (("r2", _r2), ("spearman", spearman_rho), ("kendall", kendall_tau_b), ("misrank", misrank_rate))


def estimates(proxy: np.ndarray, target: np.ndarray, seed: int) -> Estimates:
    """Every statistic of the oriented values with its bootstrap interval (at least MIN_CORRELATION_N rows)."""
    if len(proxy) < MIN_CORRELATION_N:
        raise ValueError(f"an estimate needs at least {MIN_CORRELATION_N} rows, got {len(proxy)}")
    values = [float(statistic(proxy, target)) for _, statistic in _STATISTICS]
    points = [None if np.isnan(v) else v for v in values]
    intervals = paired_statistic_intervals(proxy, target, list(zip(points, [s for _, s in _STATISTICS],
                                                                      strict=True)), seed)
    return Estimates(len(proxy), *intervals)


def proxy_fits(columns: list[dict[str, Any]], cells: Cells) -> list[ProxyFit]:
    """One fit per ordered pair of distinct boards sharing at least two pretrained rows, in column order."""
    oriented = oriented_columns(columns, cells)
    signs = {b["comparability_key"]: 1.0 if b["higher_is_better"] else -1.0 for b in columns}
    fits = []
    for proxy in (b["comparability_key"] for b in columns):
        for target in (b["comparability_key"] for b in columns):
            common = sorted(oriented[proxy].keys() & oriented[target].keys())
            if proxy == target or len(common) < 2:
                continue
            x = np.array([oriented[proxy][row] for row in common])
            y = np.array([oriented[target][row] for row in common])
            weakest = signs[proxy] * float(x.min())
            if len(common) < MIN_CORRELATION_N:
                fits.append(ProxyFit(proxy, target, len(common), weakest, None, []))
                continue
            whole = estimates(x, y, derived_seed("proxy", proxy, target))
            sweep = []
            # Every proxy value past the weakest is a threshold, as long as MIN_CORRELATION_N rows reach it.
            for threshold in sorted(set(x.tolist()))[1:]:
                keep = x >= threshold
                if keep.sum() < MIN_CORRELATION_N:
                    break
                seed = derived_seed("proxy", proxy, target, repr(threshold))
                sweep.append(SweepPoint(signs[proxy] * threshold, estimates(x[keep], y[keep], seed)))
            fits.append(ProxyFit(proxy, target, len(common), weakest, whole, sweep))
    return fits


CSV_COLUMNS = ("proxy", "proxy_board", "target", "target_board", "threshold", "n",
               *(f"{name}{part}" for name, _ in _STATISTICS for part in ("", "_low", "_high")))


def csv_rows(fits: list[ProxyFit], stats: dict[str, BoardStats]) -> list[list[str]]:
    """The data table: one row per fit over its whole range (empty threshold) and one per sweep point; boards
    by code and label, every statistic with its interval, empty where not estimated."""
    rows = []
    for fit in fits:
        points = [(None, fit.whole)] if fit.whole is not None else []
        points += [(p.threshold, p.estimates) for p in fit.sweep]
        for threshold, found in points:
            row = [stats[fit.proxy].code, stats[fit.proxy].label, stats[fit.target].code, stats[fit.target].label,
                   "" if threshold is None else repr(threshold), str(found.n)]
            for name, _ in _STATISTICS:
                interval = getattr(found, name)
                row += ["", "", ""] if interval is None else [repr(interval.estimate), repr(interval.low),
                                                              repr(interval.high)]
            rows.append(row)
    return rows
