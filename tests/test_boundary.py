"""The BSDS500 boundary probe (`edge_bsds`) against independent references, and the `sobel` control.

References: scikit-image's `thin` (the same Guo–Hall thinning as MATLAB's bwmorph), pyEdgeEval's C
kernels (`correspond_pixels` = BSDS's match.cc with its CSA solver, `nms` = SE's edgesNmsMex) and its
`calculate_metrics` (ODS/OIS/AUC), scipy's `linear_sum_assignment` (the Hungarian method, dense) for the
matching's size and least total weight, and loops written out from `collect_eval_bdry.m`. End to end on a
fixture laid out like the BSDS500 release. pyEdgeEval's CSA samples its outlier graph from the clock, so
its answers vary between runs: tolerances against it hold for any draw, not for one.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch
from PIL import Image
from scipy.ndimage import gaussian_filter
from scipy.optimize import linear_sum_assignment
from skimage.morphology import thin as skimage_thin

from harness.backbones import BackboneError, create_backbone
from harness.datasets.kinds import prepare_dataset
from harness.datasets.manifest import Manifest
from harness.probes.base import ProbeInputs
from harness.probes.boundary import matching, metrics, nms
from harness.probes.boundary.probe import EDGE_BSDS_PROBE
from harness.probes.boundary.thinning import thin

# the BSDS500 release in the shared/ folder beside the checkout (../shared), as the container mounts it
BSDS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "bsds500"
RNG = np.random.default_rng(0)


def _pyedgeeval(module: str):
    """A pyEdgeEval module; its package imports OpenCV only to write PNGs in helpers never called here."""
    pytest.importorskip("pyEdgeEval")
    try:
        importlib.import_module("cv2")
    except ImportError:
        sys.modules.setdefault("cv2", types.ModuleType("cv2"))
    return importlib.import_module(module)


def _segmentation_boundaries(labels: np.ndarray) -> np.ndarray:
    """1 where a pixel's label differs from its right or lower neighbour (thin region borders)."""
    edge = np.zeros(labels.shape, dtype=bool)
    edge[:, :-1] |= labels[:, :-1] != labels[:, 1:]
    edge[:-1, :] |= labels[:-1, :] != labels[1:, :]
    return edge


def _regions(h: int, w: int, rng: np.random.Generator, count: int = 6) -> np.ndarray:
    """Voronoi regions of `count` random seeds: a segmentation like a human annotator's."""
    seeds = rng.uniform([0, 0], [h, w], size=(count, 2))
    yy, xx = np.mgrid[0:h, 0:w]
    return np.argmin((yy[..., None] - seeds[:, 0]) ** 2 + (xx[..., None] - seeds[:, 1]) ** 2, axis=-1) + 1


JITTER = ((0, 0), (1, 0), (0, -1), (-1, 1), (2, 1))  # each annotator's displacement of the shared regions


def _annotators(h: int, w: int, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(segmentations, thin boundaries) of `count` annotators who agree on a base segmentation but jitter it."""
    base = _regions(h, w, rng)
    segs, bnds = [], []
    for shift in JITTER[:count]:
        seg = np.roll(base, shift, axis=(0, 1))
        segs.append(seg)
        bnds.append(thin(_segmentation_boundaries(seg)))
    return np.stack(segs).astype(np.uint16), np.stack(bnds).astype(np.uint8)


def _soft_prediction(boundaries: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A blurred, noisy, slightly displaced guess at the annotators' boundaries, in [0, 1]."""
    h, w = boundaries.shape[1:]
    mean = np.roll(boundaries.mean(axis=0), (1, -1), axis=(0, 1))
    soft = gaussian_filter(mean, 1.2) * 3 + 0.25 * gaussian_filter(rng.random((h, w)), 1.5)
    return np.clip(soft / soft.max(), 0.0, 1.0)


# -- thinning, matching, NMS vs references ---------------------------------------------------------

def test_thinning_equals_scikit_image():
    for _ in range(60):
        h, w = RNG.integers(1, 48, size=2)
        mask = gaussian_filter(RNG.random((h, w)), RNG.uniform(0, 2.5)) > RNG.uniform(0.3, 0.7)
        np.testing.assert_array_equal(thin(mask), skimage_thin(mask))
    with pytest.raises(ValueError, match="2-D"):
        thin(np.ones((2, 2, 2)))


BSDS_TOLERANCE = 0.05  # × the 48 × 64 fixtures' diagonal = 4 px, about BSDS's 0.0075 × 577 = 4.3 px


def _weights(p: np.ndarray, g: np.ndarray, max_px: float) -> np.ndarray:
    """(len(p), len(g)) match.cc link weights rint(100 × distance) of (y, x) points, inf beyond `max_px`."""
    distance = np.hypot(*(p[:, None, :] - g[None, :, :]).transpose(2, 0, 1))
    return np.where(distance <= max_px, np.rint(100 * distance), np.inf)


def _lexicographic_optimum(pred: np.ndarray, gt: np.ndarray, max_dist: float) -> tuple[int, float]:
    """(size, total weight) of a largest matching of least weight, by the Hungarian method on weights offset
    by more than any matching can weigh (so one more link always wins)."""
    weights = _weights(np.argwhere(pred), np.argwhere(gt), max_dist * np.hypot(*pred.shape))
    if weights.size == 0:
        return 0, 0.0
    offset = 1e3 * (np.isfinite(weights).sum() + 1) * 500
    rows, cols = linear_sum_assignment(np.where(np.isfinite(weights), weights - offset, 0.0))
    linked = np.isfinite(weights[rows, cols])
    return int(linked.sum()), float(weights[rows, cols][linked].sum())


def _match_cc_optimum(pred: np.ndarray, gt: np.ndarray, max_dist: float) -> float:
    """The least value of match.cc's objective, Σ weights − ceil(100 × outlierCost) per link (+ a constant),
    by the Hungarian method."""
    max_px = max_dist * np.hypot(*pred.shape)
    weights = _weights(np.argwhere(pred), np.argwhere(gt), max_px)
    outlier = np.ceil(100 * 100 * max_px)
    rows, cols = linear_sum_assignment(np.where(np.isfinite(weights), weights - outlier, 0.0))
    return float(np.where(np.isfinite(weights), weights - outlier, 0.0)[rows, cols].sum())


def _cheapest_pairing(match_pred: np.ndarray, match_gt: np.ndarray, max_dist: float) -> float:
    """Least total weight of a perfect matching between the matched pixels of each side (inf if none)."""
    weights = _weights(np.argwhere(match_pred), np.argwhere(match_gt), max_dist * np.hypot(*match_pred.shape))
    if weights.size == 0:
        return 0.0
    rows, cols = linear_sum_assignment(np.where(np.isfinite(weights), weights, 1e9))
    return float(weights[rows, cols].sum())


def _noisy_pair(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A thin human boundary map and a displaced, thinned, speckled guess at it (30 × 40)."""
    gt = _annotators(30, 40, 1, rng)[1][0].astype(bool)
    pred = np.roll(gt, tuple(rng.integers(-2, 3, size=2)), axis=(0, 1)) & (rng.random(gt.shape) < 0.8)
    pred |= rng.random(gt.shape) < 0.02
    return pred, gt


def test_correspondence_is_a_least_distance_maximum_matching():
    """Of maximum size, and its matched pixels pair up at the least total weight a maximum matching can have
    (the Hungarian method on the whole problem); that optimum is also match.cc's, whose objective
    charges each unmatched pixel 100 × the tolerance."""
    rng = np.random.default_rng(11)
    for max_dist in (0.03, 0.05, 0.1):
        for _ in range(6):
            pred, gt = _noisy_pair(rng)
            match_pred, match_gt = matching.correspond_pixels(pred, gt, max_dist=max_dist)
            size, weight = _lexicographic_optimum(pred, gt, max_dist)
            assert match_pred.sum() == match_gt.sum() == size
            assert not (match_pred & ~pred).any() and not (match_gt & ~gt).any()
            assert _cheapest_pairing(match_pred, match_gt, max_dist) == weight
            outlier = np.ceil(100 * 100 * max_dist * np.hypot(*pred.shape))
            assert _match_cc_optimum(pred, gt, max_dist) == weight - outlier * size
    empty = np.zeros((5, 5), dtype=bool)
    assert matching.correspond_pixels(empty, empty)[0].sum() == 0
    assert matching.correspond_pixels(empty, np.eye(5, dtype=bool))[1].sum() == 0


def test_least_distance_choice_among_maximum_matchings():
    """Two predicted pixels, one human pixel within reach of both: the nearer one is matched (a maximum
    matching alone could take either); a chain shifted by one keeps its coincident pairs."""
    gt = np.zeros((20, 30), dtype=bool)
    gt[10, 10] = True
    pred = np.zeros_like(gt)
    pred[10, 8], pred[10, 11] = True, True  # 2 px and 1 px away
    match_pred, _ = matching.correspond_pixels(pred, gt, max_dist=0.1)
    assert match_pred[10, 11] and not match_pred[10, 8]
    line, shifted = np.zeros_like(gt), np.zeros_like(gt)
    line[5, 5:25], shifted[5, 6:26] = True, True
    match_pred, match_gt = matching.correspond_pixels(shifted, line, max_dist=0.1)
    assert match_pred.sum() == 20 and match_gt.sum() == 20
    assert _cheapest_pairing(match_pred, match_gt, 0.1) == 20 * 100  # 20 links must shift the chain: 20 px in all


def _csa_weight(m_pred: np.ndarray, max_dist: float) -> tuple[int, float]:
    """(size, total weight) of BSDS's matcher's answer: m_pred holds each matched predicted pixel's human
    partner as MATLAB's 1-based column-major index."""
    h = m_pred.shape[0]
    py, px = np.nonzero(m_pred)
    partner = m_pred[py, px].astype(np.int64) - 1
    distance = np.hypot(py - partner % h, px - partner // h)
    assert np.all(distance <= max_dist * np.hypot(*m_pred.shape))
    return len(py), float(np.rint(100 * distance).sum())


def test_correspondence_never_loses_to_the_bsds_matcher():
    """Against pyEdgeEval's match.cc: as many matches or more, and never a larger total weight at the same
    size. Its CSA runs on an outlier graph sampled afresh on every call, so it is not deterministic: it
    sometimes misses a match, and equally cheap matchings may differ (a tie swaps one pixel for another);
    beyond that, the same predicted pixels. Its misses are independent from call to call (20 calls on each of
    these 10 cases: none in 155, one in 42, two in 3; one CI run met three), so the reference is the best of
    three calls."""
    correspond = _pyedgeeval("pyEdgeEval._lib").correspond_pixels
    rng = np.random.default_rng(12)
    for _ in range(10):
        gt = _annotators(48, 64, 1, rng)[1][0]
        pred = thin(_soft_prediction(gt[None], rng) > 0.3)
        mine_pred, mine_gt = matching.correspond_pixels(pred, gt, max_dist=BSDS_TOLERANCE)
        calls = [correspond(pred.astype(float), gt.astype(float), max_dist=BSDS_TOLERANCE) for _ in range(3)]
        ref_pred, ref_gt, _, _ = max(calls, key=lambda call: int((call[1] > 0).sum()))
        size, weight = _csa_weight(ref_pred, BSDS_TOLERANCE)
        assert size == (ref_gt > 0).sum() and mine_pred.sum() == mine_gt.sum() >= size
        assert mine_pred.sum() - size <= 2
        if mine_pred.sum() == size:
            assert _cheapest_pairing(mine_pred, mine_gt, BSDS_TOLERANCE) <= weight
            assert (mine_pred != (ref_pred > 0)).sum() <= 2


def test_boundary_counts_agree_with_bsds_evaluation_loop():
    """Per-threshold counts vs evaluation_bdry_image.m written with skimage's thin and BSDS's matcher, at a
    tolerance of about BSDS's 4 px. cntR exceeds the reference where CSA misses a match (measured: in
    ~18 % of cells, by up to 4); cntP, which depends on which pixels are matched, then differs by at most
    those misses, and otherwise by a tie now and then (measured over 1,080 cells: |ΔcntP| − ΔcntR ≤ 1,
    above 0 in one cell; a maximum matching blind to distance: up to 3, in 8 cells)."""
    correspond = _pyedgeeval("pyEdgeEval._lib").correspond_pixels
    thresholds = matching.bsds_thresholds(9)
    beyond_misses = 0
    for seed in range(4):
        rng = np.random.default_rng(seed)
        _, gts = _annotators(48, 64, 3, rng)
        pred = nms.edge_nms(_soft_prediction(gts, rng))
        got = matching.boundary_counts(pred, gts, thresholds, BSDS_TOLERANCE)
        for k, t in enumerate(thresholds):
            bmap = skimage_thin(pred >= t)
            matched_any, cnt_r = np.zeros(bmap.shape, dtype=bool), 0
            for gt in gts:
                m_pred, m_gt, _, _ = correspond(bmap.astype(float), gt.astype(float), max_dist=BSDS_TOLERANCE)
                matched_any |= m_pred > 0
                cnt_r += int((m_gt > 0).sum())
            assert got[k, 1] == gts.sum() and got[k, 3] == bmap.sum()
            misses = got[k, 0] - cnt_r
            assert 0 <= misses <= max(2, 0.01 * gts.sum())
            assert abs(got[k, 2] - matched_any.sum()) <= misses + 1
            beyond_misses += abs(got[k, 2] - matched_any.sum()) > misses
    assert beyond_misses <= 2


def test_nms_matches_structured_edges_kernels():
    toolbox = _pyedgeeval("pyEdgeEval.preprocess.nms.toolbox")
    kernel = _pyedgeeval("pyEdgeEval._lib").nms
    edges = _soft_prediction(_annotators(40, 56, 2, RNG)[1], RNG)
    smoothed = nms.conv_tri(edges, 1)
    np.testing.assert_allclose(smoothed, toolbox.conv_tri(edges, 1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(nms.conv_tri(smoothed, 4), toolbox.conv_tri(smoothed, 4), rtol=0, atol=1e-12)
    # edgesDetect.m's orientation, written with the toolbox's gradient2 (pyEdgeEval's own fast_nms replaces
    # Oxx == 0 by 1e-5 instead of adding 1e-5, which turns normals on low-contrast maps: not used here)
    ox, oy = toolbox.grad2(toolbox.conv_tri(smoothed, 4))
    oxx, _ = toolbox.grad2(ox)
    oxy, oyy = toolbox.grad2(oy)
    orientation = np.mod(np.arctan(oyy * np.sign(-oxy) / (oxx + 1e-5)), np.pi)
    np.testing.assert_allclose(nms.edge_orientation(smoothed), orientation, rtol=0, atol=1e-9)
    expected = kernel(smoothed, orientation, r=1, s=5, m=1.01)
    np.testing.assert_allclose(nms.edge_nms(edges), expected, rtol=0, atol=1e-12)
    assert (nms.edge_nms(edges) > 0).sum() < (edges > 0).sum()


# -- metrics -----------------------------------------------------------------------------------------

def _random_counts(images: int, thresholds: int, rng: np.random.Generator) -> np.ndarray:
    """Counts shaped like a real sweep: predictions and matches shrink as the threshold rises."""
    sum_r = rng.integers(200, 400, size=(images, 1)).repeat(thresholds, axis=1)
    sum_p = np.sort(rng.integers(20, 900, size=(images, thresholds)), axis=1)[:, ::-1]
    cnt_p = np.minimum(sum_p, (sum_p * rng.uniform(0.3, 1.0, size=(images, thresholds))).astype(int))
    cnt_r = np.minimum(0.95 * sum_r, cnt_p * rng.uniform(0.8, 1.5, size=(images, thresholds))).astype(int)
    return np.stack([cnt_r, sum_r, cnt_p, sum_p], axis=-1).astype(float)


def test_summary_agrees_with_pyedgeeval_calculate_metrics():
    calculate = _pyedgeeval("pyEdgeEval.common.binary_label.calculate_metrics").calculate_metrics
    thresholds = matching.bsds_thresholds(15)
    for seed in range(3):
        counts = _random_counts(6, 15, np.random.default_rng(seed))
        got, columns = metrics.summarise(thresholds, counts)
        samples = [{"name": str(i), "counts": tuple(c.T)} for i, c in enumerate(counts)]
        _, _, ref = calculate(lambda sample: sample["counts"], list(thresholds), samples, nproc=1)
        # pyEdgeEval samples 101 points per segment where maxF samples linspace(0, 1) = 100
        assert got["ods_f"] == pytest.approx(ref["ODS_f1"], abs=2e-4)
        assert got["ods_threshold"] == pytest.approx(ref["ODS_threshold"], abs=thresholds[1] - thresholds[0])
        assert (got["ois_f"], got["ois_precision"], got["ois_recall"]) == pytest.approx(
            (ref["OIS_f1"], ref["OIS_precision"], ref["OIS_recall"]), abs=1e-12)
        # its AUC is Area_PR on 0:0.01:0.99; Area_PR adds R = 1, which these curves never reach
        assert got["ap"] == pytest.approx(ref["AUC"], abs=1e-12)
        assert columns["image_f_at_ods"].shape == columns["image_best_f"].shape == (6,)
        assert np.all(columns["image_best_f"] >= columns["image_f_at_ods"] - 1e-12)


def test_summary_follows_collect_eval_bdry_loops():
    """ODS, OIS, AP and R50 against loops written out from collect_eval_bdry.m and edgesEvalDir.m."""
    thresholds = matching.bsds_thresholds(7)
    counts = _random_counts(4, 7, np.random.default_rng(5))
    got, _ = metrics.summarise(thresholds, counts)

    def rpf(c):
        r = c[..., 0] / (c[..., 1] + (c[..., 1] == 0))
        p = c[..., 2] / (c[..., 3] + (c[..., 3] == 0))
        return r, p, 2 * p * r / (p + r + ((p + r) == 0))

    r, p, f = rpf(counts.sum(axis=0))
    best = (f[0], thresholds[0])
    for i in range(1, len(thresholds)):
        for d in np.linspace(0, 1, 100):
            ri, pi = r[i] * d + r[i - 1] * (1 - d), p[i] * d + p[i - 1] * (1 - d)
            fi = 2 * pi * ri / (pi + ri + ((pi + ri) == 0))
            if fi > best[0]:
                best = (fi, thresholds[i] * d + thresholds[i - 1] * (1 - d))
    assert (got["ods_f"], got["ods_threshold"]) == pytest.approx(best, abs=1e-12)
    first_best = [c[np.argmax(rpf(c)[2])] for c in counts]  # ff(1): the first of equal maxima
    assert got["ois_f"] == pytest.approx(rpf(np.sum(first_best, axis=0))[2], abs=1e-12)
    order = sorted(range(len(r)), key=lambda k: (r[k], k))  # unique(R): sorted, first occurrence
    ru = [r[k] for i, k in enumerate(order) if i == 0 or r[k] != r[order[i - 1]]]
    pu = [p[k] for i, k in enumerate(order) if i == 0 or r[k] != r[order[i - 1]]]
    area = 0.0
    for j in range(101):
        x = j / 100
        for a in range(len(ru) - 1):
            if ru[a] <= x <= ru[a + 1]:
                area += pu[a] + (pu[a + 1] - pu[a]) * (x - ru[a]) / (ru[a + 1] - ru[a])
                break
    assert got["ap"] == pytest.approx(area * 0.01, abs=1e-12)
    if p.max() >= 0.5:
        by_precision = np.argsort(p, kind="stable")
        expected = np.interp(max(p.min(), 0.5), p[by_precision], r[by_precision])
        assert got["r50"] == pytest.approx(float(expected), abs=1e-9)
    single = metrics.summarise(thresholds[:1], counts[:, :1])[0]
    assert single["ap"] == 0.0 and single["ods_threshold"] == thresholds[0]


def test_recall_at_half_precision_is_zero_when_precision_never_reaches_half():
    assert metrics.recall_at_half_precision(np.array([0.9, 0.5]), np.array([0.2, 0.4])) == 0.0
    assert metrics.recall_at_half_precision(np.array([0.9, 0.5]), np.array([0.6, 0.8])) == 0.9


def test_perfect_prediction_scores_one():
    _, gts = _annotators(48, 64, 3, RNG)
    thresholds = matching.bsds_thresholds(19)
    perfect = matching.boundary_counts(gts[0].astype(float), gts[:1], thresholds)
    scores, columns = metrics.summarise(thresholds, perfect[None])
    assert scores["ods_f"] == scores["ois_f"] == scores["ods_precision"] == scores["ods_recall"] == 1.0
    assert columns["image_f_at_ods"][0] == columns["image_best_f"][0] == 1.0
    others = matching.boundary_counts(gts[0].astype(float), gts, thresholds)  # the other annotators disagree
    assert metrics.summarise(thresholds, others[None])[0]["ods_f"] < 1.0
    with pytest.raises(ValueError, match="annotators"):
        matching.boundary_counts(gts[0].astype(float), gts[0], thresholds)


def test_thresholds_sweep_monotonically():
    """A higher threshold keeps a subset of the NMS'd pixels: fewer predictions, fewer matches. (Thinning a
    blob may keep different pixels at two thresholds, so this holds for thin NMS output, not in general.)"""
    rng = np.random.default_rng(7)
    thresholds = matching.bsds_thresholds(19)
    assert np.all(np.diff(thresholds) > 0) and thresholds[0] > 0 and thresholds[-1] < 1
    assert thresholds == pytest.approx(np.arange(1, 20) / 20)
    _, gts = _annotators(120, 160, 3, rng)
    sweep = matching.boundary_counts(nms.edge_nms(_soft_prediction(gts, rng)), gts, thresholds)
    assert np.all(np.diff(sweep[:, 3]) <= 0) and np.all(np.diff(sweep[:, 0]) <= 0)
    assert np.all(sweep[:, 1] == gts.sum()) and sweep[0, 3] > 0 and sweep[-1, 3] == 0
    assert np.all(sweep[:, 0] <= sweep[:, 1]) and np.all(sweep[:, 2] <= sweep[:, 3])


# -- the probe end to end ------------------------------------------------------------------------------

def _bsds_release(root: Path, per_split: int = 3, h: int = 40, w: int = 56) -> None:
    """images/<split>/<id>.jpg and groundTruth/<split>/<id>.mat, as the BSDS500 release lays them out."""
    rng = np.random.default_rng(1)
    for split in ("train", "val", "test"):
        for n in range(per_split):
            image_id = str(1000 + 37 * n + len(split))
            segs, bnds = _annotators(h, w, 3, rng)
            palette = rng.integers(0, 256, size=(segs.max() + 1, 3))
            image = Image.fromarray(palette[segs[0]].astype(np.uint8))
            (root / "images" / split).mkdir(parents=True, exist_ok=True)
            image.save(root / "images" / split / f"{image_id}.jpg", quality=95)
            cells = np.empty((1, len(segs)), dtype=object)
            for k in range(len(segs)):
                cells[0, k] = {"Segmentation": segs[k], "Boundaries": bnds[k]}
            (root / "groundTruth" / split).mkdir(parents=True, exist_ok=True)
            scipy.io.savemat(str(root / "groundTruth" / split / f"{image_id}.mat"), {"groundTruth": cells})


def _sobel_features(manifest: Manifest):
    backbone = create_backbone("sobel")
    cache: dict[str, np.ndarray] = {}

    def lookup(item):
        if item.path not in cache:
            with Image.open(manifest.resolve(item)) as image:
                pixels = backbone.preprocess(image, "squash")[None]
            cache[item.path] = backbone.extract_features(pixels)["dense"][0].numpy()
        return cache[item.path]

    return lookup


PARAMS = {"head": "linear", "target_size": 28, "epochs": 3, "lr": 0.01, "weight_decay": 0.0, "batch_size": 4,
          "train_splits": ["train", "val"], "eval_split": "test", "thresholds": 9, "max_dist": 0.0075}


@pytest.fixture
def bsds_fixture(tmp_path, monkeypatch) -> Manifest:
    _bsds_release(tmp_path / "BSR")
    monkeypatch.chdir(tmp_path)  # prepared targets live in data/<name>, as in a stage
    return prepare_dataset("bsds_fixture", {"kind": "bsds500", "root": str(tmp_path / "BSR"),
                                            "splits": ["train", "val", "test"]}, Path("data/bsds_fixture"))


@pytest.mark.parametrize("head", ["linear", "dpt"])
def test_probe_end_to_end_on_a_bsds_layout(bsds_fixture, head):
    spec = EDGE_BSDS_PROBE
    assert (spec.name, spec.level, spec.protocol, spec.feature_mode, spec.headline) == (
        "edge_bsds", "low", "bsds500-boundary/v2", "dense", "ods_f")
    assert spec.fit == "squash" and spec.fewshot_unit is None  # trains on two splits: no k-shot subset
    features = _sobel_features(bsds_fixture)
    result = spec.run(ProbeInputs(bsds_fixture, features, {**PARAMS, "head": head}, seed=0))
    assert result.unit == "image" and result.sample_ids == [i.path for i in bsds_fixture.split("test")]
    assert {"ods_f", "ois_f", "ap", "r50", "ods_threshold", "train_loss"} <= set(result.metrics)
    assert all(np.isfinite(v) for v in result.metrics.values())
    assert 0 < result.metrics["ods_f"] <= 1 and 0 <= result.metrics["ap"] <= 1
    assert set(result.samples) == {"image_f_at_ods", "image_best_f"}
    for name, column in result.samples.items():
        assert column.dtype == np.float64 and column.shape == (3,)
        assert column.mean() == result.metrics[name]
    again = spec.run(ProbeInputs(bsds_fixture, features, {**PARAMS, "head": head}, seed=0))
    assert again.metrics == result.metrics


def test_probe_params_are_checked_against_the_schema():
    from harness.probes import validate_probe_params

    assert validate_probe_params("edge_bsds", PARAMS) == PARAMS
    with pytest.raises(ValueError, match=r"unknown key 'threshold'.*valid keys: .*thresholds"):
        validate_probe_params("edge_bsds", {**PARAMS, "threshold": 9})
    with pytest.raises(ValueError, match="train_splits"):
        validate_probe_params("edge_bsds", {**PARAMS, "train_splits": "train"})
    with pytest.raises(ValueError, match="train_splits"):
        validate_probe_params("edge_bsds", {**PARAMS, "train_splits": []})


# -- the sobel control ---------------------------------------------------------------------------------

def test_sobel_is_a_fixed_filter_control():
    backbone = create_backbone("sobel")
    described = backbone.describe()
    assert described["control"] is True and backbone.is_control
    assert described["weights"]["kind"] == "fixed-filter" and described["weights"]["stride"] == 4
    assert create_backbone("sobel").identity == backbone.identity != create_backbone("sobel", precision="bf16").identity
    with pytest.raises(BackboneError, match="no weights to randomise"):
        create_backbone("sobel@random")
    with pytest.raises(BackboneError, match="no checkpoint"):
        create_backbone("sobel", checkpoint="/nonexistent.pt")


def test_sobel_features_respond_to_edges():
    backbone = create_backbone("sobel")
    step = torch.zeros(2, 3, 224, 224)
    step[0, :, :, 112:] = 1.0  # dark left, bright right: a vertical edge at column 112
    out = backbone.extract_features(step)
    assert set(out) == {"dense", "pooled", "grid_hw", "pooling"} and out["grid_hw"] == (56, 56)
    dense = out["dense"]
    assert dense.shape == (2, 5, 56, 56) and dense.dtype == torch.float32
    torch.testing.assert_close(out["pooled"], dense.mean(dim=(2, 3)))
    assert torch.count_nonzero(dense[1]) == 0  # a flat image has no gradient
    magnitude = dense[0, :3].mean(dim=1)  # (3 scales, 56 columns)
    assert torch.all(magnitude.argmax(dim=1) == 27) or torch.all(magnitude.argmax(dim=1) == 28)
    assert dense[0, 3, :, 27].min() > 0 and dense[0, 4].abs().max() < 1e-6  # +x derivative, none along y


# -- real data ---------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(not (BSDS / "groundTruth").is_dir(), reason=f"{BSDS} absent")
def test_real_bsds500_subset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    manifest = prepare_dataset("bsds500", {"kind": "bsds500", "root": str(BSDS), "splits": ["train", "val", "test"],
                                           "limit_per_split": 4}, Path("data/bsds500"))
    item = manifest.split("test")[0]
    gts = np.load(Path("data/bsds500") / manifest.extra["targets"][item.path]["boundaries"]["path"])
    thresholds = matching.bsds_thresholds(9)
    for k in range(len(gts)):  # each annotator, predicted perfectly, scores 1 against itself
        scores, _ = metrics.summarise(thresholds, matching.boundary_counts(gts[k].astype(float), gts[k:k + 1],
                                                                           thresholds)[None])
        assert scores["ods_f"] == 1.0
    # counts on a real image's annotators (481×321: tolerance 4.3 px) against the BSDS matcher, from 0.2 up:
    # at 0.1 the noisy guess keeps ~20,000 pixels, where the CSA solver takes many minutes
    correspond = _pyedgeeval("pyEdgeEval._lib").correspond_pixels
    pred = nms.edge_nms(_soft_prediction(gts, np.random.default_rng(3)))
    got = matching.boundary_counts(pred, gts, thresholds[1:])
    for k, t in enumerate(thresholds[1:]):
        bmap = skimage_thin(pred >= t)
        matched = [correspond(bmap.astype(float), gt.astype(float), max_dist=0.0075) for gt in gts]
        cnt_r = sum(int((m_gt > 0).sum()) for _, m_gt, _, _ in matched)
        cnt_p = int(np.logical_or.reduce([m_pred > 0 for m_pred, _, _, _ in matched]).sum())
        misses = got[k, 0] - cnt_r  # CSA's: it is never ahead
        assert got[k, 3] == bmap.sum() and 0 <= misses <= 0.005 * gts.sum()
        # beyond CSA's misses, cntP differs by its ties and its excess distance: measured on real test maps
        # (HED's, sobel's), at most 4 px and 0.3 % per threshold; v1's distance-blind matching, up to 60 px
        assert abs(got[k, 2] - cnt_p) <= misses + max(4, 0.003 * cnt_p)
    params = {**PARAMS, "target_size": 112, "epochs": 5, "lr": 0.001}
    result = EDGE_BSDS_PROBE.run(ProbeInputs(manifest, _sobel_features(manifest), params, seed=0))
    assert result.sample_ids == [i.path for i in manifest.split("test")]
    assert 0 < result.metrics["ods_f"] < 1 and all(np.isfinite(v) for v in result.metrics.values())
