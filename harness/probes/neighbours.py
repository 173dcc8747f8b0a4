"""Nearest neighbours of pooled features, shared by the training-free overlap probe and the head-family sweep's
kNN head, so the two read the same neighbourhoods.

Features are standardised with the reference (training) split's per-channel mean and floored std (the space a
linear head is trained in, `base.floored_std`); distance is Euclidean there. Ties in distance go to the earlier
reference item (a stable sort), so the neighbours are the same on every machine. A vote between classes with the
same number of neighbours goes to the class whose nearest member is nearest.
"""

from __future__ import annotations

import numpy as np

from harness.probes.base import floored_std


def standardised(reference: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """`reference` and `others`, each minus the reference's mean and divided by its floored std (float64)."""
    reference = np.asarray(reference, dtype=np.float64)
    mean, std = reference.mean(axis=0), floored_std(reference.std(axis=0)).astype(np.float64)
    return [(x - mean) / std for x in (reference, *(np.asarray(o, dtype=np.float64) for o in others))]


def nearest(reference: np.ndarray, queries: np.ndarray, k: int, exclude_self: bool = False) -> np.ndarray:
    """(Q, k) indices into `reference` of each query's k nearest items, nearest first. `exclude_self`: the queries
    are the reference itself and an item is not its own neighbour (leave-one-out)."""
    if k < 1 or k > len(reference) - exclude_self:
        raise ValueError(f"k={k} neighbours asked of a reference split of {len(reference)} items: give k between 1 "
                         f"and {len(reference) - exclude_self}")
    # |q - r|² = |q|² - 2 q·r + |r|², in float64: BLAS kernels differ between CPUs in the last bits, so only
    # neighbours tied to ~1e-15 relative could swap places between machines
    distance = (np.sum(queries * queries, axis=1)[:, None] - 2.0 * queries @ reference.T
                + np.sum(reference * reference, axis=1)[None, :])
    if exclude_self:
        np.fill_diagonal(distance, np.inf)
    return np.argsort(distance, axis=1, kind="stable")[:, :k]


def neighbour_counts(neighbour_labels: np.ndarray, num_classes: int) -> np.ndarray:
    """(Q, K) how many of each query's neighbours are of each class."""
    return np.stack([(neighbour_labels == c).sum(axis=1) for c in range(num_classes)], axis=1)


def vote(neighbour_labels: np.ndarray, num_classes: int) -> np.ndarray:
    """(Q,) the majority class among each query's neighbours (nearest first); a tie goes to the tied class whose
    nearest member comes first."""
    counts = neighbour_counts(neighbour_labels, num_classes)
    top = counts == counts.max(axis=1, keepdims=True)
    k = neighbour_labels.shape[1]
    first_rank = np.full(counts.shape, k)
    for rank in range(k - 1, -1, -1):  # the smallest rank at which each class appears
        first_rank[np.arange(len(neighbour_labels)), neighbour_labels[:, rank]] = rank
    return np.argmin(np.where(top, first_rank, k + 1), axis=1)
