"""The image-level anomaly metrics as resampled statistics (`harness.probes.resampled`): AUROC, AUPR, F1-max and
FPR@95%TPR are not means over images, so a run writes each test image's score and whether it is defective as
auxiliary columns, and the site recomputes the metric from them under bootstrap row weights for its intervals and
paired tests. `check_result` recomputes each over all rows when the run ends and refuses a run whose metric
differs. NumPy only: the site imports this module (through `resampled.STATISTICS`) without any probe module.

Auxiliary columns (float64, one row per test image): `anomaly_score` (the image's score, the maximum of its anomaly
map), `anomalous` (1.0 for a defective image, 0.0 for a good one) and `defect_type` (the manifest's class index, 0
= good; kept so per-type results can be recomputed from the file).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from harness.probes import resampled
from harness.probes.anomaly import metrics

SCORE, ANOMALOUS, DEFECT_TYPE = "anomaly_score", "anomalous", "defect_type"


def _statistic(metric: Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray]):
    def statistic(columns: Mapping[str, np.ndarray], weights: np.ndarray, _: str = "") -> np.ndarray:
        return metric(columns[SCORE], np.asarray(columns[ANOMALOUS]) > 0.5, weights)

    statistic.__doc__ = f"`metrics.{metric.__name__}` of the `{SCORE}` and `{ANOMALOUS}` columns under row weights."
    return statistic


image_auroc = _statistic(metrics.auroc)
image_aupr = _statistic(metrics.average_precision)
image_f1_max = _statistic(metrics.f1_max)
image_fpr95 = _statistic(metrics.fpr_at_tpr)

STATISTICS = {"anomaly_auroc": image_auroc, "anomaly_aupr": image_aupr, "anomaly_f1_max": image_f1_max,
              "anomaly_fpr95": image_fpr95}
for _name, _statistic in STATISTICS.items():
    resampled.STATISTICS.register(_name)(_statistic)
# metric name → statistic name, what the probes declare (`ProbeSpec.statistics`) and their results name
METRIC_STATISTICS = {"auroc": "anomaly_auroc", "aupr": "anomaly_aupr", "f1_max": "anomaly_f1_max",
                     "fpr95": "anomaly_fpr95"}
