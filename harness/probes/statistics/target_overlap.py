"""The kNN R² of `knn-target-overlap/v1` as a resampled statistic (`harness.probes.resampled`): R² is a ratio of
two sums over evaluation images, not a mean of per-image scores, so a run writes both summands per image as
auxiliary columns and the site recomputes R² from them under bootstrap row weights; `check_result` recomputes it
over all rows when the run ends and refuses a run whose metric differs. NumPy only: the site imports this module
without any probe module.

Auxiliary columns (float64, one row per evaluation image): `squared_error` (‖y − ŷ‖², ŷ the mean target of the
image's k neighbours) and `squared_deviation` (‖y − μ‖², μ the reference split's mean target).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from harness.probes import resampled

SQUARED_ERROR, SQUARED_DEVIATION = "squared_error", "squared_deviation"


def r_squared(columns: Mapping[str, np.ndarray], weights: np.ndarray, _: str = "") -> np.ndarray:
    """1 − Σ w·squared_error / Σ w·squared_deviation per resample ((B,); NaN where the deviations sum to 0)."""
    weights = np.asarray(weights, dtype=np.float64)
    error = weights @ np.asarray(columns[SQUARED_ERROR], dtype=np.float64)
    deviation = weights @ np.asarray(columns[SQUARED_DEVIATION], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(deviation > 0, 1.0 - error / np.where(deviation > 0, deviation, 1.0), np.nan)


resampled.STATISTICS.register("r_squared", module=__name__)(r_squared)
# metric name → statistic name, what the probe declares (`ProbeSpec.statistics`) and its results name
METRIC_STATISTICS = {"knn_r2": "r_squared"}
