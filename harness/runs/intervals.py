"""A run's headline with its 95% bootstrap interval, as the site computes it (the same functions and the same
seed, `interval_seed`: from the per-sample file's hash and the metric, never the run id): what a probe stage writes
to its DVC metrics file, so `dvc metrics show` prints the interval beside the number."""

from __future__ import annotations

import numpy as np

from harness.core.bootstrap import Interval, bootstrap_ci, interval_seed, statistic_ci
from harness.probes import resampled
from harness.runs.records import Record


def metric_interval(record: Record, name: str, columns: dict[str, np.ndarray]) -> Interval | None:
    """The interval of metric `name`: a bootstrap of its per-sample column's mean, or of its resampled statistic
    over the auxiliary columns; None when the run has neither for it."""
    samples = record.samples
    if samples is None or samples.count == 0:
        return None
    seed = interval_seed(samples.sha256, name)
    if name in samples.columns:
        return bootstrap_ci(columns[name], seed)
    if name in samples.statistics:
        statistic = samples.statistics[name]
        return statistic_ci(lambda weights: resampled.evaluate(statistic, columns, weights), samples.count, seed)
    return None
