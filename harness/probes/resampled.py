"""Metrics that are not means of per-sample scores, recomputed from per-sample auxiliary columns under row
weights: what a run's bootstrap resamples when its metric has no column whose mean it is.

A probe that reports such a metric writes the rows it is computed from (a classification run's label and
prediction per image; a boundary run's BSDS counts per image and threshold) as auxiliary columns of its
per-sample file and names the statistic here in its `ProbeSpec.statistics`. `probe_run.check_result`
recomputes each statistic over all rows and refuses a run whose metric differs; the site resamples the same
rows (`harness.leaderboard.statistics.analysis`), so an interval of macro-F1 or ODS comes from the very function
that produced the number.

This module is the registry of statistic names (`STATISTICS`, `evaluate`) and the resampling helpers statistics
share (`integer_weights`, `repeated_order`); the statistics themselves live in `harness.probes.statistics`, one
module per probe family.

A statistic takes the run's columns (name → (n,) float64, scores and auxiliary alike) and row weights
`(B, n)`: how many times each row is drawn in each of B resamples (all ones: the run itself), and returns
(B,) values. Counting by weights instead of gathering rows keeps a resample to one matrix product.
NumPy only: the site imports this module, and no stage should pull in torch for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from harness.core.registry import Registry
from harness.probes.statistics.boundary import average_precision_bsds, ods_f, ois_f
from harness.probes.statistics.classification import macro_f1

# (columns, weights, argument) -> (B,) values; the argument is what follows ":" in the statistic's recorded name
Statistic = Callable[[Mapping[str, np.ndarray], np.ndarray, str], np.ndarray]


def integer_weights(weights: np.ndarray, statistic: str) -> np.ndarray:
    """(B, n) row weights as int64 counts, refused unless each is a whole number ≥ 0: a statistic that orders
    scores reads a weight as how many copies of the row to put in that order, so it has no fractional form."""
    weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    counts = np.rint(weights)
    if not (np.all(counts == weights) and np.all(counts >= 0)):
        raise ValueError(f"{statistic} reads integer row weights (how many times each row is drawn); give bootstrap "
                         "counts, not fractions")
    return counts.astype(np.int64)


def repeated_order(owner: np.ndarray, score: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Indices into pooled items, in the order the rows repeated `counts` times would put them.

    `owner` and `score` describe pooled items (detections) already in the reference's order: stably sorted by
    decreasing score from row order, then each row's own order, so within a run of equal scores a row's items
    sit together and rows follow one another. The rows repeated, each copy beside its original, are pooled and
    sorted the same way: each run of one row's items of one score then appears once per copy, whole, before the
    next row's, so a tie inside a row repeats as the block it is ([a, b, a, b], not [a, a, b, b]). Row r's
    blocks appear counts[r] times (0: left out). Integer counts only (`integer_weights`)."""
    owner, score = np.asarray(owner, dtype=np.int64), np.asarray(score, dtype=np.float64)
    items = len(owner)
    if items == 0:
        return np.zeros(0, dtype=np.int64)
    new_block = np.ones(items, dtype=bool)
    new_block[1:] = (owner[1:] != owner[:-1]) | (score[1:] != score[:-1])
    starts = np.flatnonzero(new_block)
    lengths = np.diff(np.append(starts, items))
    copies = np.repeat(np.arange(len(starts)), np.asarray(counts, dtype=np.int64)[owner[starts]])
    sizes = lengths[copies]
    offsets = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return np.repeat(starts[copies], sizes) + offsets


# name → statistic. A record's `samples.statistics` names these, with an argument where the statistic needs one
# ("macro_f1:10": over 10 classes), so the site recomputes a run's metric with no probe module. Macro-F1 (which
# classification and 2AFC share) and BSDS's are registered here, so whatever imports this module has them without
# discovery, as before they moved to `harness.probes.statistics`; the other families' statistics register from
# their own module there, found on the first name missing here.
STATISTICS: Registry[np.ndarray] = Registry("resampled statistic", packages=("harness.probes.statistics",))
for _name, _statistic in (("macro_f1", macro_f1), ("bsds_ods_f", ods_f), ("bsds_ois_f", ois_f),
                          ("bsds_ap", average_precision_bsds)):
    STATISTICS.register(_name)(_statistic)


def base_name(name: str) -> str:
    return name.partition(":")[0]


def evaluate(name: str, columns: Mapping[str, np.ndarray], weights: np.ndarray | None = None) -> np.ndarray:
    """Statistic `name` ("base" or "base:argument") over `columns` under `weights` (default: every row once, a
    (1,) array)."""
    base, _, argument = name.partition(":")
    statistic = STATISTICS.get(base)  # an unknown name: one line listing the known ones
    if weights is None:
        n = len(next(iter(columns.values())))
        weights = np.ones((1, n))
    return statistic(columns, weights, argument)
