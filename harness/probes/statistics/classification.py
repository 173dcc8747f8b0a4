"""Macro-F1 as a resampled statistic (`harness.probes.resampled`, whose table names it `macro_f1`): F1 is counted
per class over all evaluation images and then averaged, so macro-F1 is no mean of a per-image score. A
classification run (and a 2AFC run, over its two sides) writes each image's label and predicted class as auxiliary
columns, and the site recomputes macro-F1 from them under bootstrap row weights; `check_result` recomputes it over
all rows when the run ends and refuses a run whose metric differs. NumPy only: the site imports this module without
any probe module.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

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
    """The statistic spelling a classification run records for its macro-F1 (`resampled.evaluate` reads it
    back)."""
    return f"macro_f1:{num_classes}"
