"""Decoding instance masks from a foreground probability map and a pixel embedding: deterministic greedy
clustering, in the spirit of De Brabandere et al.'s threshold clustering, with no random seeds and no
mean-shift iterations to converge.

Of an image's (S, S) foreground probabilities p and (D, S, S) embedding e:

1. Foreground pixels are those with p > `foreground_threshold`.
2. Seed: the unassigned foreground pixel of highest p (the first in row-major order on ties).
3. Its cluster: the unassigned foreground pixels whose embedding lies within `radius` of the seed's; the centre
   moves once to their mean, and the cluster becomes the unassigned foreground pixels within `radius` of that
   centre, plus the seed (so every step assigns at least one pixel and the loop ends). Its pixels are assigned.
4. Repeat from 2 until every foreground pixel is assigned.

A cluster of fewer than `min_area` pixels is dropped (its pixels stay assigned). A mask's score is the mean
foreground probability over its pixels: AP ranks masks the head is surer are objects first. Masks are returned
in decreasing score order (stable: clustering order on ties), at most `max_detections`.

The radius is the loss's δ_d. A loss driven to zero leaves every pixel within δ_v of its instance's mean and the
means at least 2δ_d apart; with δ_d > 2δ_v (the probe's params require it) a radius of δ_d around any pixel of an
instance holds all of that instance (at most 2δ_v away) and nothing of another (at least 2δ_d − 2δ_v > δ_d away),
and around the instance's mean likewise. Distances and means are computed in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Masks:
    """One image's decoded instances, best first."""

    masks: np.ndarray  # (N, S, S) bool
    scores: np.ndarray  # (N,) float64, non-increasing


def greedy_clusters(probability: np.ndarray, embedding: np.ndarray, *, foreground_threshold: float, radius: float,
                    min_area: int, max_detections: int) -> Masks:
    """The masks of one image (module docstring): (S, S) probabilities, (D, S, S) embedding."""
    probability = np.asarray(probability, dtype=np.float64)
    shape = probability.shape
    p = probability.reshape(-1)
    x = np.asarray(embedding, dtype=np.float64).reshape(embedding.shape[0], -1).T  # (P, D)
    foreground = p > foreground_threshold
    unassigned = foreground.copy()
    masks, scores = [], []
    for seed in np.flatnonzero(foreground)[np.argsort(-p[foreground], kind="stable")]:
        if not unassigned[seed]:
            continue
        near = unassigned & (np.linalg.norm(x - x[seed], axis=1) <= radius)
        centre = x[near].mean(axis=0)  # `near` holds the seed itself
        members = unassigned & (np.linalg.norm(x - centre, axis=1) <= radius)
        members[seed] = True
        unassigned &= ~members
        if members.sum() >= min_area:
            masks.append(members.reshape(shape))
            scores.append(float(p[members].mean()))
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:max_detections]
    if len(order) == 0:
        return Masks(np.zeros((0, *shape), dtype=bool), np.zeros(0))
    return Masks(np.stack(masks)[order], np.asarray(scores, dtype=np.float64)[order])
