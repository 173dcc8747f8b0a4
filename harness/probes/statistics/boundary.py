"""BSDS's ODS F, OIS F and AP as resampled statistics (`harness.probes.resampled`, whose table names them
`bsds_ods_f`, `bsds_ois_f` and `bsds_ap`): each pools boundary counts over the evaluation images before it takes
F or the P/R curve, so none is a mean of a per-image score. A boundary run writes each image's BSDS counts per
threshold as auxiliary columns (`count_columns`), and the site recomputes the metrics from them under bootstrap
row weights (and draws the P/R curves from them: `counts_of`); `check_result` recomputes each over all rows when
the run ends and refuses a run whose metric differs. NumPy only: the site imports this module without any probe
module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from harness.probes.boundary.metrics import COUNT_FIELDS, average_precision, best_f_batch, f_measure, recall_precision

_COUNT_COLUMN = re.compile(r"^(cnt_r|sum_r|cnt_p|sum_p)_(\d+)$")


def count_columns(counts: np.ndarray) -> dict[str, np.ndarray]:
    """(n, K, 4) BSDS counts as auxiliary columns `cnt_r_000` … `sum_p_098` (threshold index K-padded)."""
    counts = np.asarray(counts, dtype=np.float64)
    return {f"{field}_{k:03d}": counts[:, k, i] for k in range(counts.shape[1]) for i, field in enumerate(COUNT_FIELDS)}


def counts_of(columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """The (n, K, 4) counts back from `count_columns`' columns."""
    found: dict[tuple[int, int], np.ndarray] = {}
    for name, column in columns.items():
        match = _COUNT_COLUMN.match(name)
        if match:
            found[int(match[2]), COUNT_FIELDS.index(match[1])] = column
    thresholds = 1 + max((k for k, _ in found), default=-1)
    if len(found) != 4 * thresholds or thresholds == 0:
        raise ValueError("a boundary run's per-sample file needs cnt_r/sum_r/cnt_p/sum_p columns for every threshold")
    return np.stack([np.stack([found[k, i] for i in range(4)], axis=-1) for k in range(thresholds)], axis=1)


def _pooled(columns: Mapping[str, np.ndarray], weights: np.ndarray) -> np.ndarray:
    counts = counts_of(columns)
    n, k, _ = counts.shape
    # integer counts: the weighted sums are exact in float64, in any order
    return (np.asarray(weights, dtype=np.float64) @ counts.reshape(n, k * 4)).reshape(-1, k, 4)


def ods_f(columns: Mapping[str, np.ndarray], weights: np.ndarray, _: str = "") -> np.ndarray:
    """BSDS's ODS F: counts pooled over the (resampled) images, the best F along the P/R curve."""
    recall, precision = recall_precision(_pooled(columns, weights))
    return best_f_batch(recall, precision).f


def ois_f(columns: Mapping[str, np.ndarray], weights: np.ndarray, _: str = "") -> np.ndarray:
    """BSDS's OIS F: each image at its own best threshold (first maximum), those counts pooled, then F."""
    counts = counts_of(columns)
    image_f = f_measure(*recall_precision(counts))
    best = counts[np.arange(len(counts)), np.argmax(image_f, axis=1)]  # (n, 4)
    recall, precision = recall_precision(np.asarray(weights, dtype=np.float64) @ best)
    return f_measure(recall, precision)


def average_precision_bsds(columns: Mapping[str, np.ndarray], weights: np.ndarray, _: str = "") -> np.ndarray:
    """BSDS's AP of the pooled P/R curve (`metrics.average_precision`), per resample."""
    recall, precision = recall_precision(_pooled(columns, weights))
    return np.array([average_precision(r, p) for r, p in zip(recall, precision, strict=True)])
