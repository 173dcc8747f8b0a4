"""Overlap of neighbourhoods in frozen feature space for a continuous target, training-free (protocol
`knn-target-overlap/v1`): the continuous counterpart of `knn-class-overlap/v1`.

Features: the frozen dense map mean-pooled over its cells, as counting and the illuminant read it
(`pooled_regression.pooled_features`), standardised with the reference split's statistics; each evaluation image's
k nearest reference images are found there (Euclidean, `harness.probes.neighbours`, the neighbours class overlap
reads). Target y: a scene-level vector read exactly as its own probe reads it (`target`: `count`, the visible
object count of `harness.probes.counting`, a 1-vector; `illuminant`, the light's unit direction in the camera frame
of `harness.probes.illuminant`, a 3-vector). Nothing in y is standardised; σ² is the sum over its dimensions of
the reference split's (population) variance.

Per evaluation image i with neighbours N(i) (unit "image"):

- `overlap` = mean over r in N(i) of ‖y_i − y_r‖² / (2σ²). Its mean (the headline, lower is better) is Geary's
  contiguity ratio (Geary, "The contiguity ratio and statistical mapping", The Incorporated Statistician 5, 1954)
  with the kNN graph from evaluation to reference images as its weights: 0 when every neighbour has the image's
  own target, about 1 when neighbours are no closer in target than random pairs.
- `overlap_chance` = (‖y_i − μ‖² + σ²) / (2σ²), μ the reference mean: the exact expectation of the image's
  overlap when its neighbours are drawn uniformly from the reference split, whatever k (each neighbour is then a
  uniform draw, and E‖y_i − y_r‖² = ‖y_i − μ‖² + σ²). Its mean is the headline's chance value; with k = all
  reference images the two are equal.
- `knn_r2`: R² of predicting y_i by the mean target ŷ_i of its k neighbours, 1 − Σ‖y_i − ŷ_i‖² / Σ‖y_i − μ‖²:
  not a mean of per-image scores, so the two sums' terms are auxiliary columns and the metric a resampled
  statistic (`harness.probes.statistics.target_overlap`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Literal

import numpy as np
from pydantic import Field, PositiveInt

from harness.datasets.manifest import Manifest
from harness.probes import resampled
from harness.probes.base import Layers, ProbeInputs, ProbeParams, ProbeResult, ProbeSpec, column_means, register_probe
from harness.probes.counting import INSTANCE, visible_count
from harness.probes.dense.targets import load_target, target_path
from harness.probes.illuminant import ANNOTATIONS, light_in_camera
from harness.probes.neighbours import nearest, standardised
from harness.probes.pooled_regression import pooled_features
from harness.probes.statistics.target_overlap import METRIC_STATISTICS, SQUARED_DEVIATION, SQUARED_ERROR


def object_counts(manifest: Manifest, items: list) -> np.ndarray:
    """(N, 1): each scene's visible object count, as the counting probe reads it."""
    return np.array([[visible_count(load_target(manifest, item, INSTANCE))] for item in items], dtype=np.float64)


def light_directions(manifest: Manifest, items: list) -> np.ndarray:
    """(N, 3): each scene's light direction in the camera frame, as the illuminant probe reads it."""
    return np.stack([light_in_camera(json.loads(target_path(manifest, item, ANNOTATIONS).read_text()))
                     for item in items]).astype(np.float64)


# `target` → how the items' target vectors are read
TARGETS: dict[str, Callable[[Manifest, list], np.ndarray]] = {"count": object_counts, "illuminant": light_directions}


class TargetOverlapParams(ProbeParams):
    layers: Layers = None
    reference_split: str = Field(min_length=1)
    eval_split: str = Field(min_length=1)
    k: PositiveInt
    target: Literal["count", "illuminant"]  # the keys of TARGETS


def overlap_columns(reference: np.ndarray, reference_targets: np.ndarray, queries: np.ndarray,
                    query_targets: np.ndarray, k: int) -> tuple[dict, dict]:
    """(per-image score columns, auxiliary columns) of the module docstring; features (N, C), targets (N,) or
    (N, D)."""
    reference, queries = standardised(reference, queries)
    y_reference = np.asarray(reference_targets, dtype=np.float64).reshape(len(reference), -1)
    y = np.asarray(query_targets, dtype=np.float64).reshape(len(queries), -1)
    mean = y_reference.mean(axis=0)
    variance = float(np.sum((y_reference - mean) ** 2, axis=1).mean())
    if not variance > 0:
        raise ValueError("the reference split's targets are all equal: target overlap divides by their variance, 0")
    neighbour_targets = y_reference[nearest(reference, queries, k)]  # (Q, k, D)
    pair = np.sum((y[:, None, :] - neighbour_targets) ** 2, axis=2)  # (Q, k)
    deviation = np.sum((y - mean) ** 2, axis=1)
    scores = {"overlap": pair.mean(axis=1) / (2.0 * variance),
              "overlap_chance": (deviation + variance) / (2.0 * variance)}
    auxiliary = {SQUARED_ERROR: np.sum((y - neighbour_targets.mean(axis=1)) ** 2, axis=1),
                 SQUARED_DEVIATION: deviation}
    return scores, auxiliary


def run_target_overlap(inputs: ProbeInputs) -> ProbeResult:
    p = inputs.params
    read = TARGETS.get(p["target"])
    if read is None:
        raise ValueError(f"target_overlap: target {p['target']!r} is not one of {', '.join(sorted(TARGETS))}")
    if p["reference_split"] == p["eval_split"]:
        raise ValueError(f"target_overlap: eval_split and reference_split are both {p['eval_split']!r}; an image "
                         "would be its own nearest neighbour: give two different splits")
    reference = inputs.manifest.split(p["reference_split"])
    test = inputs.manifest.split(p["eval_split"])
    if len(reference) < 2 or not test:
        raise ValueError(f"target_overlap needs at least 2 {p['reference_split']} images and 1 {p['eval_split']} "
                         f"image; got {len(reference)} and {len(test)}")
    scores, auxiliary = overlap_columns(pooled_features(inputs, reference), read(inputs.manifest, reference),
                                        pooled_features(inputs, test), read(inputs.manifest, test), p["k"])
    metrics = column_means(scores)
    metrics["knn_r2"] = float(resampled.evaluate(METRIC_STATISTICS["knn_r2"], {**scores, **auxiliary})[0])
    return ProbeResult(metrics, [item.path for item in test], scores, unit="image", auxiliary=auxiliary,
                       statistics=dict(METRIC_STATISTICS))


TARGET_OVERLAP = register_probe(ProbeSpec(
    name="target_overlap",
    level="mid",  # the level of the tasks whose targets it reads (counting, illuminant), as class_overlap's is
    protocol="knn-target-overlap/v1",
    feature_mode="dense",
    headline="overlap",
    run=run_target_overlap,
    params=TargetOverlapParams,
    lower_is_better=frozenset({"overlap", "overlap_chance"}),
    statistics=METRIC_STATISTICS,
    fit="squash",  # the dense probes' read of the scenes: one extraction serves every task
    train_split_param=None,  # the reference split is searched, nothing is trained on it
))
