"""Ridge regression on mean-pooled frozen dense features: what the scene-level probes (counting, the illuminant)
share. A dense map (C, H, W) becomes one vector per image, the mean over its cells; vectors are standardised with
the training split's statistics (per-channel std floored, `floored_std`) and fitted in closed form."""

from __future__ import annotations

import numpy as np

from harness.probes.base import ProbeInputs, floored_std


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
