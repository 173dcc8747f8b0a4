"""Anomaly detection by nearest training patch (protocol `knn-patch-anomaly/v1`): PatchCore's memory bank without
its coreset subsampling (Roth et al., "Towards Total Recall in Industrial Anomaly Detection", CVPR 2022).

Every feature cell of every defect-free training image, standardised per channel with the training cells'
statistics, goes into a memory bank; a test cell's anomaly score is its Euclidean distance to the nearest cell in
the bank; the image's map is those distances upsampled bilinearly to `target_size`² and smoothed (`smooth_sigma`),
and its score is the map's maximum (`detector`). Nothing is trained: the bank is the model, so a k-shot run
(`fewshot_unit` images) is k images' cells. Headline: image AUROC (`auroc`); also `aupr`, `f1_max`, `fpr95`
(lower is better), `auroc_<type>`, and `pixel_auroc` and `aupro` where the dataset has masks
(docs/protocols.md#knn-patch-anomaly-v1).

Unlike PatchCore, no coreset (every cell is kept: the banks here are a few thousand cells), no neighbourhood
aggregation of features and no re-weighting of the image score by the neighbour's density: the distance reads
the backbone's features as they are.
"""

from __future__ import annotations

import numpy as np

from harness.probes.anomaly.arrays import ANOMALY_ARRAYS
from harness.probes.anomaly.detector import AnomalyParams, CellScorer, run_detector
from harness.probes.base import ProbeInputs, ProbeResult, ProbeSpec, register_probe
from harness.probes.statistics.anomaly import METRIC_STATISTICS

BANK_BLOCK = 4096  # bank rows compared at a time: memory stays at (cells × block) distances


def nearest_distance(bank: np.ndarray) -> CellScorer:
    """A scorer giving each cell its Euclidean distance to the nearest row of `bank` (M, C)."""
    bank = np.ascontiguousarray(bank, dtype=np.float64)
    bank_norms = np.einsum("ij,ij->i", bank, bank)

    def score(cells: np.ndarray) -> np.ndarray:
        cells = np.asarray(cells, dtype=np.float64)
        norms = np.einsum("ij,ij->i", cells, cells)
        best = np.full(len(cells), np.inf)
        for start in range(0, len(bank), BANK_BLOCK):
            block = bank[start:start + BANK_BLOCK]
            squared = norms[:, None] + bank_norms[None, start:start + BANK_BLOCK] - 2.0 * (cells @ block.T)
            best = np.minimum(best, squared.min(axis=1))
        return np.sqrt(np.maximum(best, 0.0))  # the expansion can dip below 0 by rounding

    return score


def run_knn(inputs: ProbeInputs) -> ProbeResult:
    return run_detector(inputs, nearest_distance)


ANOMALY_KNN = register_probe(ProbeSpec(
    name="anomaly_knn",
    level="mid",
    protocol="knn-patch-anomaly/v1",
    feature_mode="dense",
    headline="auroc",
    run=run_knn,
    params=AnomalyParams,
    lower_is_better=frozenset({"fpr95"}),
    fit="squash",  # the map covers the whole image, as its mask does; the same extraction as anomaly_gaussian
    fewshot_unit="images",
    statistics=METRIC_STATISTICS,
    folder_layout="anomaly_folder",
    arrays=ANOMALY_ARRAYS,
))
