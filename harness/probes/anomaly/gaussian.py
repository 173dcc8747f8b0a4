"""Anomaly detection by a Gaussian of the training patches (protocol `gaussian-patch-anomaly/v1`): PaDiM's
Mahalanobis distance (Defard et al., "PaDiM: a Patch Distribution Modeling Framework for Anomaly Detection and
Localization", ICPR 2021) with one Gaussian for every cell position together.

Every feature cell of every defect-free training image, standardised per channel with the training cells'
statistics, is a sample of one multivariate Gaussian: its mean, and its covariance shrunk by Ledoit–Wolf (the
shrinkage towards a multiple of the identity that minimises the expected squared error, in closed form:
scikit-learn's `ledoit_wolf`). A test cell's anomaly score is its Mahalanobis distance to it;
the image's map is those distances upsampled bilinearly to `target_size`² and smoothed (`smooth_sigma`), and its
score is the map's maximum (`detector`). Headline: image AUROC (`auroc`); also `aupr`, `f1_max`, `fpr95` (lower
is better), `auroc_<type>`, and `pixel_auroc` and `aupro` where the dataset has masks
(docs/protocols.md#gaussian-patch-anomaly-v1).

Why one Gaussian, not PaDiM's one per cell position: PaDiM's objects are aligned, so a position has its own
normal appearance; a texture is the same everywhere, and with 60 training images a per-position covariance of
hundreds of channels would rest on 60 samples (on 1 in a 1-shot run), where the pooled one rests on every cell.
Ledoit–Wolf instead of PaDiM's fixed 0.01·I: the shrinkage follows the data, so every backbone's channel count
and every k get a covariance that can be inverted, with no constant to tune; and no random channel subset.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from sklearn.covariance import ledoit_wolf

from harness.probes.anomaly.arrays import ANOMALY_ARRAYS
from harness.probes.anomaly.detector import AnomalyParams, CellScorer, run_detector
from harness.probes.base import ProbeInputs, ProbeResult, ProbeSpec, register_probe
from harness.probes.statistics.anomaly import METRIC_STATISTICS


def mahalanobis_distance(samples: np.ndarray) -> CellScorer:
    """A scorer giving each cell its Mahalanobis distance to the Ledoit–Wolf Gaussian of `samples` (n, C)."""
    samples = np.asarray(samples, dtype=np.float64)
    location = samples.mean(axis=0)
    covariance, _ = ledoit_wolf(samples)  # centres the samples itself (assume_centered=False)
    try:
        lower = linalg.cholesky(covariance, lower=True)
    except linalg.LinAlgError:
        raise ValueError("the training cells' covariance is singular (constant features?): no Gaussian to score "
                         "against") from None

    def score(cells: np.ndarray) -> np.ndarray:
        whitened = linalg.solve_triangular(lower, (np.asarray(cells, dtype=np.float64) - location).T, lower=True)
        return np.sqrt(np.einsum("ij,ij->j", whitened, whitened))

    return score


def run_gaussian(inputs: ProbeInputs) -> ProbeResult:
    return run_detector(inputs, mahalanobis_distance)


ANOMALY_GAUSSIAN = register_probe(ProbeSpec(
    name="anomaly_gaussian",
    level="mid",
    protocol="gaussian-patch-anomaly/v1",
    feature_mode="dense",
    headline="auroc",
    run=run_gaussian,
    params=AnomalyParams,
    lower_is_better=frozenset({"fpr95"}),
    fit="squash",  # the same extraction as anomaly_knn
    fewshot_unit="images",
    statistics=METRIC_STATISTICS,
    folder_layout="anomaly_folder",
    arrays=ANOMALY_ARRAYS,
))
