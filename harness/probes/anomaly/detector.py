"""The run both anomaly probes share: one read of the dense features, a detector fitted on the training split's
defect-free cells, every test cell scored, and the maps and image scores turned into the metrics.

Features: the frozen dense map (`fit: squash`, so the map covers the whole image and lines up with its mask; the
layers asked for), each cell a vector. Every cell of every training image (all defect-free) is standardised per
channel with the training cells' mean and floored std (`floored_std`), and the detector (`knn`, `gaussian`) is fitted
on them; a test image's cells are standardised the same way and scored, the cell map upsampled and smoothed to
`target_size`² (`maps`), and the image's score is the maximum of that map.

Result: one row per test image (unit "image"), no score column (no metric here is a mean over images); the
auxiliary columns `anomaly_score`, `anomalous` and `defect_type` (`harness.probes.statistics.anomaly`), from
which `auroc`, `aupr`, `f1_max` and `fpr95` are computed (so the site resamples them); `auroc_<type>` (good test
images against that type's), and, when the dataset has masks, `pixel_auroc` and `aupro` over the maps at
target_size².
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveInt

from harness.datasets.anomaly_folder import MASK
from harness.datasets.manifest import Item, Manifest
from harness.probes import resampled
from harness.probes.anomaly import maps as M
from harness.probes.anomaly import metrics
from harness.probes.base import Layers, ProbeInputs, ProbeParams, ProbeResult, floored_std
from harness.probes.dense.targets import load_target
from harness.probes.statistics.anomaly import ANOMALOUS, DEFECT_TYPE, METRIC_STATISTICS, SCORE

GOOD = 0  # the class index of defect-free images
# a fitted detector: standardised cells (n, C) → (n,) anomaly scores
CellScorer = Callable[[np.ndarray], np.ndarray]
Split = Annotated[str, Field(min_length=1)]


class AnomalyParams(ProbeParams):
    layers: Layers = None
    train_split: Split = "train"  # defect-free images only
    eval_split: Split = "test"
    target_size: PositiveInt = 112  # maps and masks are scored at target_size² pixels
    smooth_sigma: NonNegativeFloat = 2.0  # Gaussian smoothing of the map, in target pixels; 0 = none


def cell_rows(dense: np.ndarray) -> np.ndarray:
    """(C, h, w) features → (h·w, C) float64 rows, row-major over the cells."""
    dense = np.asarray(dense, dtype=np.float64)
    if dense.ndim != 3:
        raise ValueError(f"anomaly probes read dense (C, h, w) features; got shape {dense.shape}")
    return dense.reshape(dense.shape[0], -1).T


def _check(manifest: Manifest, p: AnomalyParams, train: list[Item], test: list[Item]) -> None:
    if any(item.label is None for item in train + test):
        raise ValueError(f"dataset {manifest.name} has unlabelled items: anomaly probes read an anomaly_folder or "
                         "procedural_defects dataset (label 0 = good)")
    defective = [item.path for item in train if item.label != GOOD]
    if defective:
        raise ValueError(f"split {p.train_split!r} of dataset {manifest.name} must hold defect-free images only; "
                         f"{len(defective)} are not (e.g. {defective[0]})")
    labels = {item.label for item in test}
    if GOOD not in labels or labels == {GOOD}:
        raise ValueError(f"split {p.eval_split!r} of dataset {manifest.name} needs good and defective images; it has "
                         f"{'only good' if labels == {GOOD} else 'no good'} ones")


def _masks(manifest: Manifest, test: list[Item], size: int) -> np.ndarray | None:
    """(N, size, size) bool masks of the test images (a good image's all False), or None when the dataset has none."""
    targets = manifest.extra.get("targets", {})
    if not all(MASK in targets.get(item.path, {}) for item in test if item.label != GOOD):
        return None
    blank = np.zeros((size, size), dtype=bool)
    return np.stack([blank if item.label == GOOD else M.mask_at(load_target(manifest, item, MASK), size)
                     for item in test])


def run_detector(inputs: ProbeInputs, fit: Callable[[np.ndarray], CellScorer]) -> ProbeResult:
    """Fit the detector on the training split's cells and score the evaluation split (module docstring)."""
    p = AnomalyParams(**inputs.params)  # with the defaults params.yaml leaves out
    manifest = inputs.manifest
    train, test = manifest.split(p.train_split), manifest.split(p.eval_split)
    _check(manifest, p, train, test)
    bank = np.concatenate([cell_rows(inputs.features(item)) for item in train])
    mean, std = bank.mean(axis=0), floored_std(bank.std(axis=0)).astype(np.float64)
    score_cells = fit((bank - mean) / std)
    del bank
    maps = []
    for item in test:
        dense = np.asarray(inputs.features(item))
        scores = score_cells((cell_rows(dense) - mean) / std).reshape(dense.shape[1:])
        maps.append(M.anomaly_map(scores, p.target_size, p.smooth_sigma))
    stacked = np.stack(maps)
    labels = np.array([item.label for item in test], dtype=np.int64)
    auxiliary = {SCORE: stacked.reshape(len(test), -1).max(axis=1), ANOMALOUS: (labels != GOOD).astype(np.float64),
                 DEFECT_TYPE: labels.astype(np.float64)}
    result_metrics = {name: float(resampled.evaluate(statistic, auxiliary)[0])
                      for name, statistic in METRIC_STATISTICS.items()}
    for label in sorted(set(labels.tolist()) - {GOOD}):
        keep = (labels == GOOD) | (labels == label)
        result_metrics[f"auroc_{manifest.classes[label]}"] = float(
            metrics.auroc(auxiliary[SCORE][keep], labels[keep] == label)[0])
    masks = _masks(manifest, test, p.target_size)
    if masks is not None:
        if not masks.any():
            raise ValueError(f"no defect pixel is left in the masks at target_size {p.target_size}: raise it")
        result_metrics["pixel_auroc"] = metrics.pixel_auroc(stacked, masks)
        result_metrics["aupro"] = metrics.aupro(stacked, M.regions(masks))
    return ProbeResult(result_metrics, [item.path for item in test], {}, unit="image", auxiliary=auxiliary,
                       statistics=dict(METRIC_STATISTICS))
