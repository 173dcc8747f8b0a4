"""The percentile bootstrap every interval here comes from: of a mean of per-sample scores, or of any statistic
of per-sample rows under resampling weights. NumPy only, seeded, no state: a probe stage's DVC metrics file and
the site (`harness.leaderboard.statistics.bootstrap`, which documents the definitions) call the same functions
with the same derived seeds, so they print the same interval for a run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 0.95
_CHUNK_VALUES = 1 << 22  # resample this many values at a time, so memory stays flat for large runs


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float


def derived_seed(*parts: str) -> int:
    """A 64-bit seed from the SHA-256 of the parts: stable across processes, platforms and versions."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def interval_seed(samples_sha256: str, metric: str) -> int:
    """The seed of a metric's interval: from the per-sample file's content, never the run's name, so the same
    scores give the same interval whatever run (or user experiment) holds them."""
    return derived_seed("ci", samples_sha256, metric)


def paired_seed(board: str, samples_a: str, samples_b: str, metric: str) -> int:
    """The seed of a paired test on `board`: from the board and both per-sample files' contents (in either
    order), never the runs' names."""
    return derived_seed("paired", board, *sorted((samples_a, samples_b)), metric)


def _resampled_means(values: np.ndarray, seed: int, resamples: int) -> np.ndarray:
    """Means of `resamples` bootstrap resamples of `values`, drawn in fixed-size chunks."""
    n = len(values)
    rng = np.random.default_rng(seed)
    rows = max(1, _CHUNK_VALUES // n)
    means = np.empty(resamples)
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        means[start:stop] = values[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    return means


def _percentiles(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(draws, [tail, 1.0 - tail])
    return float(low), float(high)


def bootstrap_ci(
    scores: Sequence[float] | np.ndarray, seed: int, resamples: int = RESAMPLES, confidence: float = CONFIDENCE
) -> Interval:
    """Percentile bootstrap interval of the mean of per-sample `scores`."""
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1 or len(values) == 0:
        raise ValueError("bootstrap_ci needs a non-empty 1-D array of per-sample scores")
    low, high = _percentiles(_resampled_means(values, seed, resamples), confidence)
    return Interval(float(values.mean()), low, high)


# A statistic of n rows under weights (B, n) (how often each row is drawn per resample) → (B,) values.
WeightedStatistic = Callable[[np.ndarray], np.ndarray]
_CHUNK_RESAMPLES = 250  # resamples evaluated at a time: a statistic may hold (chunk, n, …) arrays


def resample_weights(n: int, seed: int, resamples: int = RESAMPLES) -> Iterator[np.ndarray]:
    """Weights (chunk, n) of `resamples` bootstrap resamples of n rows, in chunks: row i's count in each draw of
    n rows with replacement."""
    rng = np.random.default_rng(seed)
    for start in range(0, resamples, _CHUNK_RESAMPLES):
        chunk = min(_CHUNK_RESAMPLES, resamples - start)
        index = rng.integers(0, n, size=(chunk, n))
        weights = np.zeros((chunk, n))
        np.add.at(weights, (np.arange(chunk)[:, None], index), 1.0)
        yield weights


def statistic_draws(statistic: WeightedStatistic, n: int, seed: int, resamples: int = RESAMPLES) -> np.ndarray:
    """The statistic on each of `resamples` bootstrap resamples of its n rows."""
    if n == 0:
        raise ValueError("a bootstrap needs at least one row")
    return np.concatenate([statistic(weights) for weights in resample_weights(n, seed, resamples)])


def statistic_ci(statistic: WeightedStatistic, n: int, seed: int, resamples: int = RESAMPLES,
                 confidence: float = CONFIDENCE) -> Interval:
    """Percentile bootstrap interval of a statistic of n rows (a macro-F1, an ODS): recomputed on every resample."""
    estimate = float(statistic(np.ones((1, n)))[0])
    low, high = _percentiles(statistic_draws(statistic, n, seed, resamples), confidence)
    return Interval(estimate, low, high)
