"""The illuminant: which way the light falls in a scene, seen from the camera (protocol `light-direction/v1`).

The target is exact, from the renderer: the scene's one directional light (`annotations.json`, `light.direction`,
world frame) expressed in the camera's frame (x right, y down, z forward: its components along the camera's
`right`, `down` and `forward` axes), a unit vector. The features are the frozen dense map the dense probes read,
mean-pooled over its cells, standardised with the training split's statistics and fitted by ridge regression (three
outputs at once, `alpha`; `harness.probes.pooled_regression`); the prediction is normalised to unit length.

Metrics, each the mean of a per-image column (unit "image"): `angular_error` (degrees between the predicted and the
true direction; the headline, lower is better), `within_15` and `within_30` (the share within 15° and 30°).
"""

from __future__ import annotations

import json

import numpy as np

from harness.probes.base import ProbeInputs, ProbeResult, ProbeSpec, column_means, register_probe
from harness.probes.dense.targets import target_path
from harness.probes.pooled_regression import PooledRegressionParams, fit_and_predict

ANNOTATIONS = "annotations"  # the scenes' per-scene annotations.json (harness.datasets.scenes)


def light_in_camera(annotations: dict) -> np.ndarray:
    """The light's unit direction in the camera frame (x right, y down, z forward)."""
    camera = annotations["camera"]
    axes = np.array([camera["right"], camera["down"], camera["forward"]], dtype=np.float64)
    direction = axes @ np.asarray(annotations["light"]["direction"], dtype=np.float64)
    return direction / np.linalg.norm(direction)


def angular_errors(predicted: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Degrees between rows of (N, 3) directions; a zero prediction is 90° from everything."""
    norms = np.linalg.norm(predicted, axis=1)
    unit = predicted / np.maximum(norms, 1e-12)[:, None]
    cosine = np.clip((unit * truth).sum(axis=1), -1.0, 1.0)
    return np.where(norms > 0, np.degrees(np.arccos(cosine)), 90.0)


def run_illuminant(inputs: ProbeInputs) -> ProbeResult:
    def directions(items: list) -> np.ndarray:
        return np.stack([light_in_camera(json.loads(target_path(inputs.manifest, item, ANNOTATIONS).read_text()))
                         for item in items])

    test, predicted, truth = fit_and_predict(inputs, directions, "the illuminant probe")
    error = angular_errors(predicted, truth).astype(np.float64)
    columns = {"angular_error": error, "within_15": (error <= 15).astype(np.float64),
               "within_30": (error <= 30).astype(np.float64)}
    metrics = column_means(columns)
    return ProbeResult(metrics, [item.path for item in test], columns, unit="image")


ILLUMINANT = register_probe(ProbeSpec(
    name="illuminant",
    level="mid",
    protocol="light-direction/v1",
    feature_mode="dense",
    headline="angular_error",
    run=run_illuminant,
    params=PooledRegressionParams,
    lower_is_better=frozenset({"angular_error"}),
    fit="squash",  # the dense probes' read of the scenes: one extraction serves every task
))
