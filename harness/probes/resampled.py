"""Metrics that are not means of per-sample scores, recomputed from per-sample auxiliary columns under row
weights: what a run's bootstrap resamples when its metric has no column whose mean it is.

A probe that reports such a metric writes the rows it is computed from (a classification run's label and
prediction per image; a boundary run's BSDS counts per image and threshold) as auxiliary columns of its
per-sample file and names the statistic here in its `ProbeSpec.statistics`. `probe_run.check_result`
recomputes each statistic over all rows and refuses a run whose metric differs; the site resamples the same
rows (`harness.leaderboard.analysis`), so an interval of macro-F1 or ODS comes from the very function that
produced the number.

A statistic takes the run's columns (name → (n,) float64, scores and auxiliary alike) and row weights
`(B, n)`: how many times each row is drawn in each of B resamples (all ones: the run itself), and returns
(B,) values. Counting by weights instead of gathering rows keeps a resample to one matrix product.
NumPy only: the site imports this module, and no stage should pull in torch for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import numpy as np

from harness.core.registry import Registry
from harness.probes.boundary.metrics import COUNT_FIELDS, average_precision, best_f_batch, f_measure, recall_precision

# (columns, weights, argument) -> (B,) values; the argument is what follows ":" in the statistic's recorded name
Statistic = Callable[[Mapping[str, np.ndarray], np.ndarray, str], np.ndarray]

# Auxiliary columns of a classification run: class indices per eval image (exact in float64).
LABEL, PREDICTED = "label", "predicted"


def class_f1(labels: np.ndarray, predictions: np.ndarray, weights: np.ndarray, num_classes: int) -> np.ndarray:
    """Per resample and class: F1 = 2·TP / (support + predicted), 0 where both are 0; (B, K). Rows count `weights`
    times."""
    weights = np.asarray(weights, dtype=np.float64)
    classes = np.arange(num_classes)
    is_label = (labels[:, None] == classes[None, :]).astype(np.float64)  # (n, K)
    is_predicted = (predictions[:, None] == classes[None, :]).astype(np.float64)
    support, predicted = weights @ is_label, weights @ is_predicted
    true_positive = weights @ (is_label * is_predicted)
    denominator = support + predicted
    f1 = np.divide(2 * true_positive, denominator, out=np.zeros_like(denominator), where=denominator > 0)
    return f1


def macro_f1(columns: Mapping[str, np.ndarray], weights: np.ndarray, classes: str) -> np.ndarray:
    """Macro-F1 of a classification run (or a 2AFC run's two sides) from its `label` and `predicted` columns: the
    unweighted mean of each class's F1 over all `classes`, 0 for a class neither present nor predicted (a
    prediction outside them, a 2AFC tie, counts against its row's class): sklearn's f1_score(average="macro",
    labels=range(K), zero_division=0) (tests/test_linear_head.py compares). A resample averages over the same K
    classes."""
    labels, predictions = columns[LABEL].astype(np.int64), columns[PREDICTED].astype(np.int64)
    return class_f1(labels, predictions, weights, int(classes)).mean(axis=1)


def macro_f1_name(num_classes: int) -> str:
    """The statistic spelling a classification run records for its macro-F1 (`evaluate` reads it back)."""
    return f"macro_f1:{num_classes}"


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


_COUNT_COLUMN = re.compile(r"^(cnt_r|sum_r|cnt_p|sum_p)_(\d+)$")


def count_columns(counts: np.ndarray) -> dict[str, np.ndarray]:
    """(n, K, 4) BSDS counts as auxiliary columns `cnt_r_000` … `sum_p_098` (threshold index K-padded)."""
    counts = np.asarray(counts, dtype=np.float64)
    return {f"{field}_{k:03d}": counts[:, k, i] for k in range(counts.shape[1]) for i, field in enumerate(COUNT_FIELDS)}


def counts_of(columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """The (n, K, 4) counts back from `count_columns`' columns."""
    found: dict[tuple[int, int], np.ndarray] = {}
    for name, column in columns.items():
        match = _COUNT_COLUMN.match(name)
        if match:
            found[int(match[2]), COUNT_FIELDS.index(match[1])] = column
    thresholds = 1 + max((k for k, _ in found), default=-1)
    if len(found) != 4 * thresholds or thresholds == 0:
        raise ValueError("a boundary run's per-sample file needs cnt_r/sum_r/cnt_p/sum_p columns for every threshold")
    return np.stack([np.stack([found[k, i] for i in range(4)], axis=-1) for k in range(thresholds)], axis=1)


def _pooled(columns: Mapping[str, np.ndarray], weights: np.ndarray) -> np.ndarray:
    counts = counts_of(columns)
    n, k, _ = counts.shape
    # integer counts: the weighted sums are exact in float64, in any order
    return (np.asarray(weights, dtype=np.float64) @ counts.reshape(n, k * 4)).reshape(-1, k, 4)


def ods_f(columns: Mapping[str, np.ndarray], weights: np.ndarray, _: str = "") -> np.ndarray:
    """BSDS's ODS F: counts pooled over the (resampled) images, the best F along the P/R curve."""
    recall, precision = recall_precision(_pooled(columns, weights))
    return best_f_batch(recall, precision).f


def ois_f(columns: Mapping[str, np.ndarray], weights: np.ndarray, _: str = "") -> np.ndarray:
    """BSDS's OIS F: each image at its own best threshold (first maximum), those counts pooled, then F."""
    counts = counts_of(columns)
    image_f = f_measure(*recall_precision(counts))
    best = counts[np.arange(len(counts)), np.argmax(image_f, axis=1)]  # (n, 4)
    recall, precision = recall_precision(np.asarray(weights, dtype=np.float64) @ best)
    return f_measure(recall, precision)


def average_precision_bsds(columns: Mapping[str, np.ndarray], weights: np.ndarray, _: str = "") -> np.ndarray:
    """BSDS's AP of the pooled P/R curve (`metrics.average_precision`), per resample."""
    recall, precision = recall_precision(_pooled(columns, weights))
    return np.array([average_precision(r, p) for r, p in zip(recall, precision, strict=True)])


# name → statistic. A record's `samples.statistics` names these, with an argument where the statistic needs one
# ("macro_f1:10": over 10 classes), so the site recomputes a run's metric with no probe module. A probe family's
# own statistics register from a module of `harness.probes.statistics`, found on the first name missing here.
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
