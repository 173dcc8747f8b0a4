"""Anomaly metrics (`harness.probes.anomaly.metrics`) and their resampled statistics against independent
references: scikit-learn's curves for the image and pixel metrics (ties included, with sample weights for the
resamples), and for AUPRO a slow transcription of the MVTec AD definition (a threshold sweep over every distinct
score, scipy's connected components) plus a case worked by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import ndimage
from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score, roc_curve

from harness.probes import resampled
from harness.probes.anomaly import metrics
from harness.probes.statistics.anomaly import ANOMALOUS, METRIC_STATISTICS, SCORE

EIGHT_CONNECTED = np.ones((3, 3), dtype=int)  # MVTec AD's structure for ground-truth regions


def _images(rng: np.random.Generator, n: int = 40, ties: bool = True) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.random(n) < 0.6
    labels[:2] = [False, True]
    scores = rng.normal(size=n) + 1.2 * labels
    if ties:  # coarse scores: many tied groups, mixing both classes
        scores = np.round(scores * 2) / 2
    return scores, labels


def _reference(name: str, scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None) -> float:
    if name == "auroc":
        return roc_auc_score(labels, scores, sample_weight=weights)
    if name == "aupr":
        return average_precision_score(labels, scores, sample_weight=weights)
    if name == "f1_max":
        precision, recall, _ = precision_recall_curve(labels, scores, sample_weight=weights)
        f1 = np.divide(2 * precision * recall, precision + recall, out=np.zeros_like(precision),
                       where=precision + recall > 0)
        return float(f1.max())
    fpr, tpr, _ = roc_curve(labels, scores, sample_weight=weights, drop_intermediate=False)
    return float(fpr[np.argmax(tpr >= 0.95)])


FUNCTIONS = {"auroc": metrics.auroc, "aupr": metrics.average_precision, "f1_max": metrics.f1_max,
             "fpr95": metrics.fpr_at_tpr}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("ties", [True, False])
def test_image_metrics_are_scikit_learns(name, ties):
    for seed in range(5):
        scores, labels = _images(np.random.default_rng(seed), ties=ties)
        got = FUNCTIONS[name](scores, labels)
        assert got.shape == (1,)
        assert got[0] == pytest.approx(_reference(name, scores, labels), abs=1e-12)


def test_metrics_at_the_extremes():
    labels = np.array([0, 0, 1, 1, 1], bool)
    separated = np.array([0.1, 0.2, 0.5, 0.6, 0.9])
    assert [FUNCTIONS[n](separated, labels)[0] for n in ("auroc", "aupr", "f1_max", "fpr95")] == [1, 1, 1, 0]
    constant = np.zeros(5)  # one threshold: everything positive
    assert metrics.auroc(constant, labels)[0] == 0.5 and metrics.fpr_at_tpr(constant, labels)[0] == 1.0
    assert metrics.average_precision(constant, labels)[0] == pytest.approx(0.6)
    assert np.isnan(metrics.auroc(separated, np.zeros(5, bool))[0])  # one class: no curve


@pytest.mark.parametrize("metric", sorted(METRIC_STATISTICS))
def test_statistics_are_the_metric_on_the_run_and_sklearn_with_weights_on_resamples(metric):
    rng = np.random.default_rng(7)
    scores, labels = _images(rng, n=30)
    columns = {SCORE: scores, ANOMALOUS: labels.astype(np.float64)}
    name = METRIC_STATISTICS[metric]
    assert resampled.evaluate(name, columns)[0] == FUNCTIONS[metric](scores, labels)[0]  # the same bits
    index = rng.integers(0, 30, size=(40, 30))
    weights = np.stack([np.bincount(row, minlength=30) for row in index]).astype(np.float64)
    got = resampled.evaluate(name, columns, weights)
    for row, w, i in zip(got, weights, index, strict=True):
        if labels[i].all() or not labels[i].any():
            assert np.isnan(row)
            continue
        assert row == pytest.approx(_reference(metric, scores, labels, w), abs=1e-12)
        assert row == pytest.approx(_reference(metric, scores[i], labels[i]), abs=1e-12)  # the rows drawn


def test_per_type_auroc_is_good_images_against_that_types():
    rng = np.random.default_rng(2)
    types = np.array([0] * 10 + [1] * 8 + [2] * 8)
    scores = rng.normal(size=26) + types
    for kind in (1, 2):
        keep = (types == 0) | (types == kind)
        assert metrics.auroc(scores[keep], types[keep] == kind)[0] == pytest.approx(
            roc_auc_score(types[keep] == kind, scores[keep]), abs=1e-12)


def test_pixel_auroc_is_sklearns_over_every_pixel():
    rng = np.random.default_rng(4)
    masks = rng.random((3, 9, 9)) < 0.2
    maps = np.round(rng.normal(size=(3, 9, 9)) + masks, 1)  # ties across images
    assert metrics.pixel_auroc(maps, masks) == pytest.approx(roc_auc_score(masks.ravel(), maps.ravel()), abs=1e-12)


def _slow_aupro(maps: np.ndarray, masks: np.ndarray, limit: float) -> float:
    """The definition, one threshold at a time: PRO = mean over every image's 8-connected regions of the share of
    the region at or above the threshold; FPR over all pixels outside the regions; trapezoid to `limit`."""
    regions = []  # one full-size boolean array per region
    for image, mask in enumerate(masks):
        labelled, count = ndimage.label(mask, structure=EIGHT_CONNECTED)
        for k in range(1, count + 1):
            region = np.zeros(masks.shape, bool)
            region[image] = labelled == k
            regions.append(region)
    ok = ~masks
    points = [(0.0, 0.0)]
    for threshold in np.unique(maps)[::-1]:
        above = maps >= threshold
        fpr = (above & ok).sum() / ok.sum()
        pro = np.mean([(above & region).sum() / region.sum() for region in regions])
        points.append((fpr, pro))
    area = 0.0
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 >= limit:
            break
        if x1 > limit:  # cut the last segment at the limit
            y1 = y0 + (y1 - y0) * (limit - x0) / (x1 - x0)
            x1 = limit
        area += (x1 - x0) * (y0 + y1) / 2
    return area / limit


@pytest.mark.parametrize("seed", range(6))
def test_aupro_equals_a_threshold_sweep_of_the_definition(seed):
    rng = np.random.default_rng(seed)
    masks = np.zeros((4, 12, 12), bool)
    for image in range(1, 4):  # image 0 is good; the others get a few rectangles, some touching diagonally
        for _ in range(rng.integers(1, 4)):
            r, c = rng.integers(0, 10, 2)
            masks[image, r:r + rng.integers(1, 4), c:c + rng.integers(1, 4)] = True
    maps = rng.normal(size=masks.shape) + 1.5 * masks
    if seed % 2:
        maps = np.round(maps, 1)  # ties
    regions = np.stack([ndimage.label(m, structure=EIGHT_CONNECTED)[0] for m in masks])
    for limit in (0.3, 0.05, 1.0):
        assert metrics.aupro(maps, regions, limit) == pytest.approx(_slow_aupro(maps, masks, limit), abs=1e-12)


def test_aupro_by_hand():
    """Two images of 2×2. Image 0: region A = its top row (2 px); image 1: region B = one pixel. Defect-free: 5 px."""
    maps = np.array([[[0.9, 0.5], [0.4, 0.1]], [[0.8, 0.2], [0.3, 0.6]]])
    regions = np.array([[[1, 1], [0, 0]], [[1, 0], [0, 0]]])
    # thresholds, highest first: 0.9 (A half) → FPR 0, PRO ½·½ = .25; 0.8 (B) → 0, .75; 0.6 → 1/5, .75;
    # 0.5 (A whole) → 1/5, 1; then FPR 2/5 … with PRO 1. Up to FPR 0.3: .75 over [0, .2], then 1 over [.2, .3]
    # (the vertical step at FPR .2 adds nothing): (0.2 · 0.75 + 0.1 · 1) / 0.3
    fpr, pro = metrics.pro_curve(maps, regions)
    assert fpr.tolist()[:5] == [0.0, 0.0, 0.0, 0.2, 0.2] and pro.tolist()[:5] == [0.0, 0.25, 0.75, 0.75, 1.0]
    assert metrics.aupro(maps, regions) == pytest.approx((0.2 * 0.75 + 0.1 * 1.0) / 0.3, abs=1e-15)
    assert metrics.aupro(maps, regions, limit=0.2) == pytest.approx(
        (0.0 * 0.25 + 0.0 + 0.2 * 0.75) / 0.2, abs=1e-15)


def test_aupro_refuses_maps_without_regions():
    with pytest.raises(ValueError, match="defect region"):
        metrics.aupro(np.zeros((1, 3, 3)), np.zeros((1, 3, 3), int))
