"""Class overlap of neighbourhoods in frozen feature space, training-free (protocol `knn-class-overlap/v1`).

For every evaluation image, its k nearest images of the reference split (Euclidean, features standardised with
the reference split's statistics: `harness.probes.neighbours`) vote. An image's **overlap** is the share of its
k neighbours whose class differs from its own: Smith, Martinez & Giraud-Carrier's *k-disagreeing neighbours*
(kDN, "An instance level analysis of data complexity", Machine Learning 95, 2014), with the reference split as the
neighbourhood so that no evaluation image votes for another. 0: every neighbour shares its class; 1: none does.

- **global overlap** (`overlap`, the headline, lower is better): the mean over evaluation images;
- **per class**: the mean over one class's images; **pairwise**: the share of class a's neighbours that are of
  class b (read from the per-sample file's `label` and `neighbours_<j>` columns: `per_class` and `pairwise`
  here; each run page shows both);
- `knn_top1`: the k neighbours' majority class is the image's own (the head-family sweep's kNN head, same
  neighbours).

Nothing is trained, so the number says how the backbone's geometry groups the classes before any head sees it.
Read with a linear probe's accuracy on the same features: overlap low and linear accuracy low means the classes
are locally separable but not by a hyperplane (structure a linear head cannot use); overlap high and linear
accuracy high means a direction separates them that distances drown (the board lists such rows).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, PositiveInt

from harness.probes.arrays import LABELLED_ARRAYS
from harness.probes.base import PooledParams, ProbeInputs, ProbeResult, ProbeSpec, column_means, register_probe
from harness.probes.neighbours import nearest, neighbour_counts, standardised, vote
from harness.probes.statistics.classification import LABEL

NEIGHBOURS = "neighbours_"  # auxiliary column prefix: how many of an image's neighbours are of class <j>


class ClassOverlapParams(PooledParams):
    reference_split: str = Field(min_length=1)
    eval_split: str = Field(min_length=1)
    k: PositiveInt


def overlap_columns(reference: np.ndarray, reference_labels: np.ndarray, queries: np.ndarray,
                    query_labels: np.ndarray, num_classes: int, k: int) -> tuple[dict, dict]:
    """(per-image score columns, auxiliary columns) of the module docstring."""
    reference, queries = standardised(reference, queries)
    labels = reference_labels[nearest(reference, queries, k)]
    counts = neighbour_counts(labels, num_classes)
    own = counts[np.arange(len(query_labels)), query_labels]
    scores = {"overlap": (k - own) / k, "knn_top1": (vote(labels, num_classes) == query_labels).astype(np.float64)}
    auxiliary = {LABEL: query_labels.astype(np.float64),
                 **{f"{NEIGHBOURS}{c}": counts[:, c].astype(np.float64) for c in range(num_classes)}}
    return scores, auxiliary


def per_class(columns: dict[str, np.ndarray]) -> dict[int, float]:
    """Class index → the mean overlap of its evaluation images (classes with images only)."""
    labels = columns[LABEL].astype(np.int64)
    return {int(c): float(columns["overlap"][labels == c].mean()) for c in np.unique(labels)}


def pairwise(columns: dict[str, np.ndarray]) -> np.ndarray:
    """(K, K): row a, column b = the share of class a's images' neighbours that are of class b (rows sum to 1;
    a row of a class without evaluation images is NaN)."""
    labels = columns[LABEL].astype(np.int64)
    counts = np.stack([columns[f"{NEIGHBOURS}{c}"] for c in range(_classes(columns))], axis=1)
    table = np.full((counts.shape[1],) * 2, np.nan)
    for c in np.unique(labels):
        rows = counts[labels == c]
        table[c] = rows.sum(axis=0) / rows.sum()
    return table


def _classes(columns: dict[str, np.ndarray]) -> int:
    return sum(1 for name in columns if name.startswith(NEIGHBOURS))


def run_class_overlap(inputs: ProbeInputs) -> ProbeResult:
    p = inputs.params
    reference = inputs.manifest.split(p["reference_split"])
    test = inputs.manifest.split(p["eval_split"])
    scores, auxiliary = overlap_columns(
        inputs.stack(reference), np.array([i.label for i in reference], dtype=np.int64), inputs.stack(test),
        np.array([i.label for i in test], dtype=np.int64), len(inputs.manifest.classes), p["k"])
    return ProbeResult(column_means(scores), [item.path for item in test], scores, unit="image", auxiliary=auxiliary)


CLASS_OVERLAP = register_probe(ProbeSpec(
    name="class_overlap",
    level="high",
    protocol="knn-class-overlap/v1",
    feature_mode="pooled",
    headline="overlap",
    run=run_class_overlap,
    params=ClassOverlapParams,
    lower_is_better=frozenset({"overlap"}),
    arrays=LABELLED_ARRAYS,
    folder_layout="class_folders",
    train_split_param=None,  # the reference split is searched, nothing is trained on it
))
