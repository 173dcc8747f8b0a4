"""Ridge regression on mean-pooled frozen dense features: what the scene-level probes (counting, the illuminant)
share. A dense map (C, H, W) becomes one vector per image, the mean over its cells; vectors are standardised with
the training split's statistics (per-channel std floored, `floored_std`) and fitted in closed form."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pydantic import Field, NonNegativeFloat

from harness.probes.base import Layers, ProbeInputs, ProbeParams, floored_std


class PooledRegressionParams(ProbeParams):
    layers: Layers = None
    train_split: str = Field(min_length=1)
    eval_split: str = Field(min_length=1)
    alpha: NonNegativeFloat = 1.0  # ridge penalty on the standardised features


def pooled_features(inputs: ProbeInputs, items: list) -> np.ndarray:
    """(N, C) float64: each item's dense map averaged over its cells."""
    maps = (np.asarray(inputs.features(item)) for item in items)
    return np.stack([dense.reshape(dense.shape[0], -1).mean(axis=1) for dense in maps]).astype(np.float64)


def standardised(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = train.mean(axis=0), floored_std(train.std(axis=0)).astype(np.float64)
    return (train - mean) / std, (test - mean) / std


def ridge_fit(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray | float]:
    """(weights, intercept) minimising |y − x·w − b|² + alpha·|w|², b unpenalised (x and y centred); y is (N,)
    or (N, K) for K outputs fitted at once."""
    x_mean, y_mean = x.mean(axis=0), y.mean(axis=0)
    xc, yc = x - x_mean, y - y_mean
    # the dual form (n×n) when there are fewer images than channels, as here: the same solution
    if xc.shape[0] < xc.shape[1]:
        weights = xc.T @ np.linalg.solve(xc @ xc.T + alpha * np.eye(xc.shape[0]), yc)
    else:
        weights = np.linalg.solve(xc.T @ xc + alpha * np.eye(xc.shape[1]), xc.T @ yc)
    intercept = y_mean - x_mean @ weights
    return weights, float(intercept) if np.ndim(intercept) == 0 else intercept


def fit_and_predict(inputs: ProbeInputs, targets: Callable[[list], np.ndarray], what: str
                    ) -> tuple[list, np.ndarray, np.ndarray]:
    """Fit on `train_split`, predict `eval_split`: (the evaluation items, predictions, their true targets).
    `targets(items)` reads the items' targets; `what` names the probe in the refusal of a split too small."""
    p = inputs.params
    train, test = inputs.manifest.split(p["train_split"]), inputs.manifest.split(p["eval_split"])
    if len(train) < 2 or not test:
        raise ValueError(f"{what} needs at least 2 {p['train_split']} images and 1 {p['eval_split']} image; "
                         f"got {len(train)} and {len(test)}")
    x_train, x_test = standardised(pooled_features(inputs, train), pooled_features(inputs, test))
    weights, intercept = ridge_fit(x_train, targets(train), float(p.get("alpha", 1.0)))
    return test, x_test @ weights + intercept, targets(test)
