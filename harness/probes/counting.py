"""Counting: how many objects a scene shows (protocol `visible-object-count/v1`).

The target is exact: the number of distinct objects with at least one visible pixel in the scene's
`instance.png` (the renderer numbers objects 1..n, 0 is the ground or the sky), so an object hidden behind
another or outside the frame is not counted. The features are the frozen dense map (the same read as the dense
probes: `fit: squash`, the layers asked for), mean-pooled over its cells to one vector per image, standardised
with the training split's statistics and fitted by ridge regression (closed form, `alpha`, intercept not
penalised; `harness.probes.pooled_regression`) on the training split; the prediction is evaluated on
`eval_split`.

Metrics, each the mean of a per-image column (unit "image"): `mae` (|prediction − count|, the headline; lower is
better), `exact` (the prediction rounded to the nearest whole number equals the count), `off_by_one` (rounded, it
is exactly one away) and `within_one` (exact or off by one). The regression, not a classifier over counts, so a
count never seen in training can still be predicted.
"""

from __future__ import annotations

import numpy as np

from harness.probes.base import ProbeInputs, ProbeResult, ProbeSpec, column_means, register_probe
from harness.probes.dense.targets import load_target
from harness.probes.pooled_regression import PooledRegressionParams, fit_and_predict

INSTANCE = "instance"  # the scenes' per-pixel object index map (harness.datasets.scenes)


def visible_count(instance: np.ndarray) -> int:
    """Objects with at least one visible pixel: the distinct non-zero values of an instance map."""
    values = np.unique(instance)
    return int((values != 0).sum())


def count_scores(predicted: np.ndarray, counts: np.ndarray) -> dict[str, np.ndarray]:
    """The per-image columns (see the module docstring)."""
    rounded = np.rint(predicted)
    miss = np.abs(rounded - counts)
    return {"mae": np.abs(predicted - counts).astype(np.float64), "exact": (miss == 0).astype(np.float64),
            "off_by_one": (miss == 1).astype(np.float64), "within_one": (miss <= 1).astype(np.float64)}


def run_counting(inputs: ProbeInputs) -> ProbeResult:
    def counts(items: list) -> np.ndarray:
        return np.array([visible_count(load_target(inputs.manifest, item, INSTANCE)) for item in items],
                        dtype=np.float64)

    test, predicted, truth = fit_and_predict(inputs, counts, "counting")
    columns = count_scores(predicted, truth)
    metrics = column_means(columns)
    return ProbeResult(metrics, [item.path for item in test], columns, unit="image")


COUNTING = register_probe(ProbeSpec(
    name="counting",
    level="mid",
    protocol="visible-object-count/v1",
    feature_mode="dense",
    headline="mae",
    run=run_counting,
    params=PooledRegressionParams,
    lower_is_better=frozenset({"mae"}),
    fit="squash",  # the dense probes' read of the scenes: one extraction serves every task
))
