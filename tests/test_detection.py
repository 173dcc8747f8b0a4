"""The detection probe against independent references: pycocotools' COCOeval for COCO mAP, a plain
transcription of the VOC 2012 devkit's VOCevaldet.m/VOCap.m for VOC AP; FCOS assignment and decoding on
hand-checked cases; the voc2012_detection loader on a devkit-shaped fixture; and an end-to-end run on
tiny procedural scenes with fake dense features."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from harness.datasets.manifest import Manifest
from harness.datasets.voc_detection import VOC_DETECTION_CLASSES, prepare_voc2012_detection
from harness.probes import resampled
from harness.probes.base import ProbeInputs
from harness.probes.detection.annotations import (
    Detections,
    GroundTruth,
    detection_classes,
    ground_truth_reader,
)
from harness.probes.detection.coco_ap import coco_metrics
from harness.probes.detection.fcos import assign, decode
from harness.probes.detection.probe import DETECTION_PROBE
from harness.probes.detection.voc_ap import voc_image_columns, voc_metrics
from harness.runs.probe_run import check_result
from harness.runs.samples import samples_csv

NUM_CLASSES = 3


# -- generated ground truth and detections ---------------------------------------------------------------

def _random_boxes(rng: np.random.Generator, n: int, size: float = 100.0) -> np.ndarray:
    """n boxes in pixel edges; half of them clustered around one spot, so boxes overlap and crowd."""
    centre = rng.uniform(20, 80, size=2)
    xy = np.where(rng.random((n, 1)) < 0.5, centre + rng.normal(0, 4, size=(n, 2)), rng.uniform(0, size, (n, 2)))
    wh = rng.uniform(4, 40, size=(n, 2))
    return np.concatenate([xy - wh / 2, xy + wh / 2], axis=1)


def _jitter(rng: np.random.Generator, boxes: np.ndarray, scale: float) -> np.ndarray:
    out = boxes + rng.normal(0, scale, size=boxes.shape)
    return np.concatenate([np.minimum(out[:, :2], out[:, 2:] - 0.5), out[:, 2:]], axis=1)


def _lattice_boxes(rng: np.random.Generator, n: int) -> np.ndarray:
    """n boxes with corners on a 5-pixel lattice in a 30-pixel square: heavy overlap, IoUs that tie
    exactly and that land exactly on thresholds (e.g. [0, 0, 10, 10] vs [0, 0, 10, 5]: 0.5)."""
    start = rng.integers(0, 4, size=(n, 2)) * 5
    return np.concatenate([start, start + rng.integers(1, 4, size=(n, 2)) * 5], axis=1).astype(float)


def _scenario(seed: int, difficult: bool, integer: bool = False, lattice: bool = False) -> tuple[
        list[GroundTruth], list[Detections]]:
    """Images with 0..6 objects (some difficult), detections near objects (incl. duplicates), stray ones,
    images without objects or without detections; `integer` rounds object corners (VOC-style boxes),
    `lattice` puts objects and detections on a coarse lattice (ties; see `_lattice_boxes`)."""
    rng = np.random.default_rng(seed)
    truths, found = [], []
    for image in range(12):
        n = 0 if image % 5 == 0 else int(rng.integers(1, 7))
        boxes = _lattice_boxes(rng, n) if lattice else _random_boxes(rng, n)
        if integer:
            boxes = np.round(boxes)
            boxes[:, 2:] = np.maximum(boxes[:, 2:], boxes[:, :2] + 1)
        labels = rng.integers(0, NUM_CLASSES, size=n)
        hard = (rng.random(n) < 0.25) if difficult else np.zeros(n, dtype=bool)
        truths.append(GroundTruth(100, 100, boxes, labels, hard))
        if image % 7 == 3:
            found.append(Detections(np.zeros((0, 4)), np.zeros(0), np.zeros(0, dtype=np.int64)))
            continue
        near = np.repeat(np.arange(n), rng.integers(0, 3, size=n))  # 0, 1 or 2 (a duplicate) per object
        stray = int(rng.integers(0, 4))
        if lattice:
            det_boxes = np.concatenate([boxes[near] + rng.integers(-1, 2, size=(len(near), 4)) * 5,
                                        _lattice_boxes(rng, stray)]).reshape(-1, 4)
            det_boxes[:, 2:] = np.maximum(det_boxes[:, 2:], det_boxes[:, :2] + 5)
        else:
            det_boxes = np.concatenate([_jitter(rng, boxes[near], 3.0), _random_boxes(rng, stray)]).reshape(-1, 4)
        relabelled = np.where(rng.random(len(near)) < 0.85, labels[near], rng.integers(0, NUM_CLASSES, len(near)))
        det_labels = np.concatenate([relabelled, rng.integers(0, NUM_CLASSES, stray)]).astype(np.int64)
        scores = rng.random(len(det_boxes))
        order = np.argsort(-scores, kind="stable")
        found.append(Detections(det_boxes[order], scores[order], det_labels[order]))
    return truths, found


# -- COCO mAP vs pycocotools -------------------------------------------------------------------------------

class _DifficultIgnored(COCOeval):
    """COCOeval that ignores `difficult` objects (its `_prepare` overwrites `ignore` with `iscrowd`, which
    would also switch the IoU to the crowd form), the meaning coco_ap gives them."""

    def _prepare(self):
        super()._prepare()
        for objects in self._gts.values():
            for obj in objects:
                obj["ignore"] = obj["difficult"]


def _pycocotools(truths: list[GroundTruth], found: list[Detections]) -> list[float]:
    """AP, AP50, AP75 from COCOeval, boxes as [x, y, w, h] of the same pixel edges (its +0 area convention
    is the one coco_ap uses on edges, so both see identical IoUs)."""
    images, annotations, results = [], [], []
    for image_id, (truth, dets) in enumerate(zip(truths, found, strict=True), start=1):
        images.append({"id": image_id, "width": truth.width, "height": truth.height})
        for box, label, hard in zip(truth.boxes, truth.labels, truth.difficult, strict=True):
            w, h = box[2] - box[0], box[3] - box[1]
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": int(label) + 1,
                                "bbox": [box[0], box[1], w, h], "area": w * h, "iscrowd": 0, "difficult": int(hard)})
        for box, score, label in zip(dets.boxes, dets.scores, dets.labels, strict=True):
            results.append({"image_id": image_id, "category_id": int(label) + 1, "score": float(score),
                            "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]]})
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": images, "annotations": annotations,
                      "categories": [{"id": k + 1, "name": str(k)} for k in range(NUM_CLASSES)]}
        gt.createIndex()
        evaluator = _DifficultIgnored(gt, gt.loadRes(results), "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return [float(v) for v in evaluator.stats[:3]]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("difficult", [False, True])
@pytest.mark.parametrize("lattice", [False, True])
def test_coco_map_matches_pycocotools(seed, difficult, lattice):
    truths, found = _scenario(seed, difficult, lattice=lattice)
    ours = coco_metrics(truths, found, NUM_CLASSES)
    reference = _pycocotools(truths, found)
    assert [ours["coco_map"], ours["coco_map50"], ours["coco_map75"]] == pytest.approx(reference, abs=1e-9)
    assert 0.0 < ours["coco_map"] < 1.0


def _image(boxes, labels, difficult, det_boxes, det_scores, det_labels) -> tuple[GroundTruth, Detections]:
    return (GroundTruth(100, 100, np.array(boxes, float).reshape(-1, 4), np.array(labels, np.int64),
                        np.array(difficult, bool)),
            Detections(np.array(det_boxes, float).reshape(-1, 4), np.array(det_scores, float),
                       np.array(det_labels, np.int64)))


def test_coco_map_matches_pycocotools_on_crafted_ties():
    images = [
        # matched to the object first, the detection never moves to the better-overlapping difficult one
        _image([[0, 0, 10, 10], [2, 0, 12, 10]], [0, 0], [False, True], [[2, 0, 12, 10]], [0.9], [0]),
        # a tie (IoU 0.818 with both): COCOeval takes the later object, leaving the first to the next detection
        _image([[0, 0, 10, 10], [2, 0, 12, 10]], [1, 1], [False, False], [[1, 0, 11, 10], [-2, 0, 8, 10]],
               [0.8, 0.7], [1, 1]),
        # IoU exactly 0.5 and 0.75 (thresholds are inclusive)
        _image([[0, 0, 10, 10], [50, 50, 60, 60]], [2, 2], [False, False], [[0, 0, 10, 5], [50, 50, 60, 57.5]],
               [0.6, 0.5], [2, 2]),
    ]
    truths, found = [t for t, _ in images], [d for _, d in images]
    ours = coco_metrics(truths, found, NUM_CLASSES)
    assert [ours["coco_map"], ours["coco_map50"], ours["coco_map75"]] == pytest.approx(_pycocotools(truths, found),
                                                                                       abs=1e-12)
    assert ours["coco_map50"] == 1.0


def test_coco_map_of_the_ground_truth_is_one_and_classes_without_objects_are_left_out():
    truths, _ = _scenario(0, difficult=True)
    perfect = [Detections(t.boxes, np.linspace(1, 0.5, len(t.boxes)), t.labels) for t in truths]
    assert coco_metrics(truths, perfect, NUM_CLASSES + 2) == {"coco_map": 1.0, "coco_map50": 1.0, "coco_map75": 1.0}
    no_objects = [GroundTruth(100, 100, np.zeros((0, 4)), np.zeros(0, np.int64), np.zeros(0, bool))]
    with pytest.raises(ValueError, match="undefined"):
        coco_metrics(no_objects, perfect[:1], NUM_CLASSES)


def test_malformed_boxes_are_refused_at_the_scorers_door():
    """An inverted detection is where the references part: pycocotools gives it a negative area, outside
    area range "all", and ignores it; a plain transcription counts a false positive. Both scorers refuse."""
    truths, found = _scenario(1, difficult=False)
    k = next(i for i, d in enumerate(found) if len(d.boxes))
    inverted = found[k].boxes.copy()
    inverted[0, [0, 2]] = inverted[0, [2, 0]]  # x1 < x0
    bad = [*found[:k], Detections(inverted, found[k].scores, found[k].labels), *found[k + 1:]]
    reference = _pycocotools(truths, bad)  # pycocotools scores it as if the box were absent
    without = [*found[:k], Detections(inverted[1:], found[k].scores[1:], found[k].labels[1:]), *found[k + 1:]]
    assert reference == pytest.approx(_pycocotools(truths, without), abs=1e-12)
    for scorer in (lambda d: coco_metrics(truths, d, NUM_CLASSES), lambda d: voc_metrics(truths, d, ["a", "b", "c"])):
        with pytest.raises(ValueError, match=rf"image {k}, detections: 1 malformed box.*x0 <= x1"):
            scorer(bad)
    flipped_y = inverted.copy()
    flipped_y[0] = found[k].boxes[0][[0, 3, 2, 1]]  # y1 < y0
    nan = found[k].boxes.copy()
    nan[0, 1] = np.nan
    for boxes in (flipped_y, nan):
        with pytest.raises(ValueError, match="malformed"):
            coco_metrics(truths, [*found[:k], Detections(boxes, found[k].scores, found[k].labels), *found[k + 1:]],
                         NUM_CLASSES)
    j = next(i for i, t in enumerate(truths) if len(t.boxes))
    gt_bad = truths[j].boxes.copy()
    gt_bad[0, [1, 3]] = gt_bad[0, [3, 1]]
    broken = [*truths[:j], GroundTruth(100, 100, gt_bad, truths[j].labels, truths[j].difficult), *truths[j + 1:]]
    with pytest.raises(ValueError, match=rf"image {j}, ground truth: 1 malformed"):
        voc_metrics(broken, found, ["a", "b", "c"])
    empty = [*found[:k], Detections(np.concatenate([found[k].boxes[:, :2]] * 2, axis=1), found[k].scores,
                                    found[k].labels), *found[k + 1:]]  # zero-area boxes are well formed
    assert coco_metrics(truths, empty, NUM_CLASSES)["coco_map"] == pytest.approx(_pycocotools(truths, empty)[0],
                                                                                abs=1e-9)


def test_decoded_boxes_are_always_well_formed():
    """The probe's own decoder cannot produce a refused box (distances are exp(·) ≥ 0, clipping keeps the
    order), so the door changes no number of `fcos-single-scale/v1`."""
    rng = np.random.default_rng(0)
    raw = torch.from_numpy(rng.normal(0, 3, size=(NUM_CLASSES + 5, 6, 8)).astype(np.float32))
    found = decode(raw, 64, 48, num_classes=NUM_CLASSES, centerness=True, score_threshold=0.0, pre_nms_top_k=100,
                   nms_iou=1.0, max_detections=100)
    assert len(found.boxes) > 10
    assert np.all(found.boxes[:, 2] >= found.boxes[:, 0]) and np.all(found.boxes[:, 3] >= found.boxes[:, 1])


# -- VOC AP vs a transcription of the devkit -----------------------------------------------------------

def _matlab_max(a: float, b: float) -> float:
    """MATLAB's max(a, b): NaN loses to a number."""
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return max(a, b)


def _vocap_m(rec: list[float], prec: list[float]) -> float:
    """VOCap.m, line by line."""
    mrec = [0.0, *rec, 1.0]
    mpre = [0.0, *prec, 0.0]
    for i in range(len(mpre) - 2, -1, -1):
        mpre[i] = _matlab_max(mpre[i], mpre[i + 1])
    ap = 0.0
    for i in range(1, len(mrec)):
        if mrec[i] != mrec[i - 1]:
            ap += (mrec[i] - mrec[i - 1]) * mpre[i]
    return ap


def _vocevaldet_m(gt: dict[str, list[dict]], results: list[tuple[str, float, list[float]]]) -> float:
    """VOCevaldet.m for one class, line by line: `gt[id]` = [{"bbox": 1-based inclusive, "difficult"}],
    `results` = the class's results file, one (id, confidence, bbox) per line."""
    npos = 0
    det = {}
    for image_id, objects in gt.items():
        det[image_id] = [False] * len(objects)
        npos += sum(1 for o in objects if not o["difficult"])
    order = sorted(range(len(results)), key=lambda d: -results[d][1])  # sort(-confidence): stable
    tp, fp = [0] * len(order), [0] * len(order)
    for d, k in enumerate(order):
        image_id, _, bb = results[k]
        ovmax, jmax = -math.inf, -1
        for j, obj in enumerate(gt[image_id]):
            bbgt = obj["bbox"]
            bi = [max(bb[0], bbgt[0]), max(bb[1], bbgt[1]), min(bb[2], bbgt[2]), min(bb[3], bbgt[3])]
            iw = bi[2] - bi[0] + 1
            ih = bi[3] - bi[1] + 1
            if iw > 0 and ih > 0:
                ua = ((bb[2] - bb[0] + 1) * (bb[3] - bb[1] + 1) + (bbgt[2] - bbgt[0] + 1) * (bbgt[3] - bbgt[1] + 1)
                      - iw * ih)
                ov = iw * ih / ua
                if ov > ovmax:
                    ovmax, jmax = ov, j
        if ovmax >= 0.5:
            if not gt[image_id][jmax]["difficult"]:
                if not det[image_id][jmax]:
                    tp[d] = 1
                    det[image_id][jmax] = True
                else:
                    fp[d] = 1
        else:
            fp[d] = 1
    rec, prec, tp_sum, fp_sum = [], [], 0, 0
    for d in range(len(order)):
        tp_sum, fp_sum = tp_sum + tp[d], fp_sum + fp[d]
        rec.append(tp_sum / npos)
        prec.append(tp_sum / (fp_sum + tp_sum) if fp_sum + tp_sum else math.nan)
    return _vocap_m(rec, prec)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("lattice", [False, True])
def test_voc_ap_matches_the_devkit_transcription(seed, lattice):
    truths, found = _scenario(seed, difficult=True, integer=True, lattice=lattice)
    if seed % 2:  # tied confidences: both sides must keep the results-file order (image, then detection)
        found = [Detections(d.boxes, np.round(d.scores, 1), d.labels) for d in found]
    ours = voc_metrics(truths, found, ["a", "b", "c"])
    expected = {}
    for k, name in enumerate(["a", "b", "c"]):
        # the devkit's inputs: 1-based inclusive corners; edges (x0, x1) are pixels x0 + 1 .. x1 in 1-based terms
        gt = {str(i): [{"bbox": [b[0] + 1, b[1] + 1, b[2], b[3]], "difficult": bool(h)}
                       for b, lab, h in zip(t.boxes, t.labels, t.difficult, strict=True) if lab == k]
              for i, t in enumerate(truths)}
        results = [(str(i), float(score), [b[0] + 1, b[1] + 1, b[2], b[3]]) for i, d in enumerate(found)
                   for b, score, lab in zip(d.boxes, d.scores, d.labels, strict=True) if lab == k]
        if any(not o["difficult"] for objects in gt.values() for o in objects):
            expected[f"ap50_{name}"] = _vocevaldet_m(gt, results)
    assert set(ours) == {"voc_map50", "classes_scored", *expected}
    for key, value in expected.items():
        assert ours[key] == pytest.approx(value, abs=1e-12), key
    assert ours["voc_map50"] == pytest.approx(np.mean(list(expected.values())), abs=1e-12)
    assert ours["classes_scored"] == len(expected)


def test_voc_difficult_duplicates_and_the_nan_prefix():
    boxes = np.array([[0, 0, 10, 10], [50, 50, 60, 60]], dtype=float)
    truth = GroundTruth(100, 100, boxes, np.array([0, 0]), np.array([True, False]))
    # best: a difficult match (neither TP nor FP: precision 0/0 at rank 1), then the object, then its duplicate
    dets = Detections(np.array([[0, 0, 10, 10], [50, 50, 60, 60], [50, 50, 60, 61]], dtype=float),
                      np.array([0.9, 0.8, 0.7]), np.array([0, 0, 0]))
    assert voc_metrics([truth], [dets], ["a"]) == {"voc_map50": 1.0, "classes_scored": 1.0, "ap50_a": 1.0}
    late = Detections(dets.boxes[[2, 1]], np.array([0.9, 0.8]), np.array([0, 0]))  # the duplicate ranks first
    assert voc_metrics([truth], [late], ["a"])["ap50_a"] == pytest.approx(1.0)  # it took the object: a TP
    # equal overlaps: the devkit's strict `ov > ovmax` keeps the first object, here the difficult one
    twins = GroundTruth(100, 100, boxes[[0, 0]], np.array([0, 0]), np.array([True, False]))
    one = Detections(boxes[:1], np.array([0.9]), np.array([0]))
    assert voc_metrics([twins], [one], ["a"])["ap50_a"] == 0.0
    only_difficult = GroundTruth(100, 100, boxes[:1], np.array([1]), np.array([True]))
    with pytest.raises(ValueError, match="undefined"):
        voc_metrics([only_difficult], [dets], ["a", "b"])


# -- VOC AP as a resampled statistic -------------------------------------------------------------------------

def _tied(found: list[Detections], levels: int = 10) -> list[Detections]:
    """Confidences rounded to `levels` steps: ties inside images and between them."""
    return [Detections(d.boxes, np.round(d.scores * levels) / levels, d.labels) for d in found]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("lattice", [False, True])
def test_voc_statistic_over_all_rows_is_voc_metrics_bit_for_bit(seed, lattice):
    truths, found = _scenario(seed, difficult=True, integer=True, lattice=lattice)
    found = _tied(found) if seed % 2 else found
    columns = voc_image_columns(truths, found, NUM_CLASSES)
    assert resampled.evaluate("voc_map50", columns)[0] == voc_metrics(truths, found, ["a", "b", "c"])["voc_map50"]


@pytest.mark.parametrize("seed", range(4))
def test_voc_statistic_under_integer_weights_is_the_devkit_on_the_images_repeated(seed):
    truths, found = _scenario(seed, difficult=True, integer=True, lattice=seed % 2 == 1)
    found = _tied(found, levels=2)
    columns = voc_image_columns(truths, found, NUM_CLASSES)
    rng = np.random.default_rng(seed)
    n = len(truths)
    weights = rng.multinomial(n, np.full(n, 1 / n), size=6)
    tied = [i for i, d in enumerate(found) if len(np.unique(np.c_[d.scores, d.labels], axis=0)) < len(d.scores)]
    assert tied, "the scenario must tie a class's confidences inside an image"
    weights[0, tied] = 3  # every image with a tie inside it drawn three times
    got = resampled.evaluate("voc_map50", columns, weights)
    for b, counts in enumerate(weights):
        repeated = np.repeat(np.arange(n), counts)  # each copy beside its original
        again = voc_image_columns([truths[i] for i in repeated], [found[i] for i in repeated], NUM_CLASSES)
        literal = resampled.evaluate("voc_map50", again)[0]
        if np.isnan(got[b]):  # no non-difficult object drawn: the devkit has no mAP either
            assert np.isnan(literal)
            continue
        assert got[b] == literal  # the weighted count is the unweighted one on the copies, bit for bit
        reference = voc_metrics([truths[i] for i in repeated], [found[i] for i in repeated], ["a", "b", "c"])
        assert got[b] == reference["voc_map50"]


def test_voc_statistic_refuses_what_it_cannot_read():
    truths, found = _scenario(0, difficult=True)
    columns = voc_image_columns(truths, found, NUM_CLASSES)
    with pytest.raises(ValueError, match="voc_objects"):
        resampled.evaluate("voc_map50", {k: v for k, v in columns.items() if k != "voc_match_000"})
    with pytest.raises(ValueError, match="integer row weights"):
        resampled.evaluate("voc_map50", columns, np.full((1, len(truths)), 0.5))


# -- assignment and decoding ---------------------------------------------------------------------------------

def test_assignment_centre_sampling_fallback_and_smallest_box():
    # a 4×4 grid on a 64×64 image: cell (i, j) covers pixels [16j, 16j + 16) × [16i, 16i + 16)
    boxes = np.array([[0, 0, 64, 64],     # whole image, centre (2, 2) cells: radius 1 → centres 1.5, 2.5
                      [16, 16, 48, 48],   # the middle 2×2 cells, smaller: takes them
                      [50, 2, 56, 8]],    # smaller than a cell, off every centre: its centre's cell (0, 3)
                     dtype=float)
    truth = GroundTruth(64, 64, boxes, np.array([0, 1, 2]), np.zeros(3, bool))
    target, positive = assign(truth, (4, 4), radius=1.0)
    expected = np.full((4, 4), -1)
    expected[1:3, 1:3] = 1
    expected[0, 3] = 2
    np.testing.assert_array_equal(positive, expected >= 0)
    np.testing.assert_array_equal(target[0], expected)
    np.testing.assert_allclose(target[1:, 1, 1], [1, 1, 3, 3])  # box 1 in grid units
    np.testing.assert_allclose(target[1:, 0, 3], [50 / 16, 2 / 16, 56 / 16, 8 / 16])
    wide = assign(truth, (4, 4), radius=2.0)[0]  # radius 2 reaches every centre of box 0
    assert (wide[0] == 0).sum() == 16 - 4 - 1 and wide[0, 1, 1] == 1
    # a non-square image maps x and y separately (the squashed input)
    stretched = GroundTruth(128, 64, boxes * [2, 1, 2, 1], truth.labels, truth.difficult)
    np.testing.assert_array_equal(assign(stretched, (4, 4), 1.0)[0], target)


def _raw(cells: dict[tuple[int, int], tuple[int, float, tuple[float, float, float, float]]], grid=(4, 4)):
    """Raw head output (3 classes + 4 log-distances + centerness) with given (class, logit, ltrb) per cell."""
    raw = torch.full((NUM_CLASSES + 5, *grid), -20.0)
    raw[NUM_CLASSES: NUM_CLASSES + 4] = 0.0
    raw[-1] = 20.0  # centerness ≈ 1
    for (i, j), (label, logit, ltrb) in cells.items():
        raw[label, i, j] = logit
        raw[NUM_CLASSES: NUM_CLASSES + 4, i, j] = torch.log(torch.tensor(ltrb))
    return raw


def test_decode_threshold_classwise_nms_and_pixels():
    raw = _raw({(1, 1): (0, 3.0, (1.0, 1.0, 1.0, 1.0)),     # box [0.5, 0.5, 2.5, 2.5] cells
                (1, 2): (0, 2.0, (2.0, 1.0, 0.5, 1.0)),     # same box, same class, lower: suppressed
                (2, 1): (1, 1.0, (1.0, 2.0, 1.0, 0.5)),     # box [0.5, 0.5, 2.5, 3], other class: kept
                (3, 3): (2, -4.0, (0.5, 0.5, 0.5, 0.5))})   # sigmoid(-4) = 0.018 < 0.05: dropped
    found = decode(raw, 64, 32, num_classes=NUM_CLASSES, centerness=True, score_threshold=0.05, pre_nms_top_k=10,
                   nms_iou=0.5, max_detections=100)
    np.testing.assert_array_equal(found.labels, [0, 1])
    np.testing.assert_allclose(found.scores, torch.sigmoid(torch.tensor([3.0, 1.0])).numpy(), rtol=1e-6)
    np.testing.assert_allclose(found.boxes, [[8, 4, 40, 20], [8, 4, 40, 24]], rtol=1e-6)  # ×16 in x, ×8 in y
    capped = decode(raw, 64, 32, num_classes=NUM_CLASSES, centerness=True, score_threshold=0.05, pre_nms_top_k=10,
                    nms_iou=0.5, max_detections=1)
    np.testing.assert_array_equal(capped.labels, [0])
    edge = decode(_raw({(0, 0): (2, 3.0, (4.0, 4.0, 1.0, 1.0))}), 64, 64, num_classes=NUM_CLASSES, centerness=False,
                  score_threshold=0.05, pre_nms_top_k=10, nms_iou=0.5, max_detections=100)
    np.testing.assert_allclose(edge.boxes, [[0, 0, 24, 24]])  # clipped to the image


# -- voc2012_detection loader ------------------------------------------------------------------------------

def _voc_xml(filename: str, width: int, height: int, objects: list[tuple[str, tuple, int | None]]) -> str:
    parts = [f"<annotation><folder>VOC2012</folder><filename>{filename}</filename>"
             f"<size><width>{width}</width><height>{height}</height><depth>3</depth></size><segmented>0</segmented>"]
    for name, (xmin, ymin, xmax, ymax), difficult in objects:
        tag = "" if difficult is None else f"<difficult>{difficult}</difficult>"
        parts.append(f"<object><name>{name}</name><pose>Left</pose><truncated>1</truncated>{tag}"
                     f"<bndbox><xmin>{xmin}</xmin><ymin>{ymin}</ymin><xmax>{xmax}</xmax><ymax>{ymax}</ymax></bndbox>"
                     "<part><name>head</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>2</xmax><ymax>2</ymax></bndbox>"
                     "</part></object>")
    return "".join(parts) + "</annotation>\n"


@pytest.fixture
def voc_root(tmp_path: Path) -> Path:
    root = tmp_path / "VOCdevkit" / "VOC2012"
    (root / "ImageSets" / "Main").mkdir(parents=True)
    (root / "JPEGImages").mkdir()
    (root / "Annotations").mkdir()
    splits = {"train": ["2008_000010", "2008_000002"], "val": ["2009_000001"]}
    for split, ids in splits.items():
        (root / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"{i}\n" for i in ids))
    (root / "ImageSets" / "Main" / "person_train.txt").write_text("2008_000002  1\n")  # a per-class list
    objects = {"2008_000002": [("person", (1, 2, 30, 40), 0), ("dog", (10, 10, 20, 20), 1)],
               "2008_000010": [("tvmonitor", (5, 5, 48, 32), None)],
               "2009_000001": [("aeroplane", (3.5, 4, 20, 22), 0)]}
    for image_id, objs in objects.items():
        Image.fromarray(np.full((32, 48, 3), 90, np.uint8)).save(root / "JPEGImages" / f"{image_id}.jpg", quality=90)
        (root / "Annotations" / f"{image_id}.xml").write_text(_voc_xml(f"{image_id}.jpg", 48, 32, objs))
    return root


def test_voc2012_detection_loader(voc_root, tmp_path, monkeypatch):
    out = tmp_path / "data" / "voc_det"
    manifest = prepare_voc2012_detection("voc_det", out, str(voc_root))
    assert manifest.classes == VOC_DETECTION_CLASSES and len(manifest.classes) == 20
    assert [(i.path, i.split) for i in manifest.items] == [
        ("JPEGImages/2008_000002.jpg", "train"), ("JPEGImages/2008_000010.jpg", "train"),
        ("JPEGImages/2009_000001.jpg", "val")]
    entry = manifest.extra["targets"]["JPEGImages/2008_000002.jpg"]["annotations"]
    assert entry["base"] == "prepared" and entry["path"] == "train/2008_000002/annotations.json"
    payload = json.loads((out / entry["path"]).read_text())
    assert payload["image_size"] == [48, 32]
    assert payload["boxes"] == [
        {"box": [0, 1, 30, 40], "class_id": 14, "difficult": False, "truncated": True, "instance": 1, "area": 1170},
        {"box": [9, 9, 20, 20], "class_id": 11, "difficult": True, "truncated": True, "instance": 2, "area": 121}]
    # the probe's reader finds the prepared target under data/<name> (stages run in the project root)
    monkeypatch.chdir(tmp_path)
    manifest.save(out / "manifest.json")
    truth = ground_truth_reader(Manifest.load(out / "manifest.json"))
    first = truth(manifest.items[0])
    np.testing.assert_array_equal(first.labels, [14, 11])
    np.testing.assert_array_equal(first.difficult, [False, True])
    assert truth(manifest.items[1]).difficult.tolist() == [False]  # no <difficult> tag reads as 0
    np.testing.assert_allclose(truth(manifest.items[2]).boxes, [[2.5, 3, 20, 22]])  # fractional corners kept
    assert detection_classes(manifest)[14] == (14, "person")
    again = prepare_voc2012_detection("voc_det", tmp_path / "again", str(voc_root))
    assert again.identity == manifest.identity  # byte-deterministic targets
    limited = prepare_voc2012_detection("voc_det", tmp_path / "limited", str(voc_root), limit_per_split=1)
    assert [i.path for i in limited.split("train")] == ["JPEGImages/2008_000002.jpg"]


def test_voc2012_detection_errors(voc_root, tmp_path):
    with pytest.raises(KeyError, match="valid: train, val"):
        prepare_voc2012_detection("v", tmp_path / "a", str(voc_root), splits=["test"])
    with pytest.raises(FileNotFoundError, match="VOCdevkit/VOC2012"):
        prepare_voc2012_detection("v", tmp_path / "b", str(voc_root.parent))
    (voc_root / "ImageSets" / "Main" / "trainval.txt").write_text("2008_000002\n2009_000001\n")
    with pytest.raises(ValueError, match="both split"):
        prepare_voc2012_detection("v", tmp_path / "c", str(voc_root), splits=["train", "trainval"])
    (voc_root / "Annotations" / "2009_000001.xml").write_text(_voc_xml("x.jpg", 48, 32, [("unicorn", (1, 1, 5, 5), 0)]))
    with pytest.raises(ValueError, match=r"2009_000001\.xml.*'unicorn'; valid: aeroplane"):
        prepare_voc2012_detection("v", tmp_path / "d", str(voc_root))


# -- end to end on procedural scenes ------------------------------------------------------------------------

PARAMS = {"train_split": "train", "eval_split": "val", "epochs": 3, "lr": 0.01, "weight_decay": 0.0, "batch_size": 4,
          "tower": 1, "width": 8, "centerness": True, "radius": 1.5, "score_threshold": 0.05, "pre_nms_top_k": 1000,
          "nms_iou": 0.5, "max_detections": 100}


def test_scene_boxes_read_as_detection_classes_and_score_one_as_detections(scenes):
    assert detection_classes(scenes) == [(2, "box"), (3, "sphere"), (4, "cylinder")]
    truth = ground_truth_reader(scenes)
    truths = [truth(item) for item in scenes.items]
    raw = [json.loads(Path(scenes.root, scenes.extra["targets"][i.path]["annotations"]["path"]).read_text())["boxes"]
           for i in scenes.items]
    assert [t.labels.tolist() for t in truths] == [[b["class_id"] - 2 for b in boxes] for boxes in raw]
    perfect = [Detections(t.boxes, np.ones(len(t.boxes)), t.labels) for t in truths]
    assert voc_metrics(truths, perfect, ["box", "sphere", "cylinder"])["voc_map50"] == 1.0
    assert coco_metrics(truths, perfect, 3)["coco_map"] == 1.0


@pytest.mark.parametrize("tower", [0, 1])
def test_detection_probe_end_to_end(scenes, fake_dense_features, tower):
    spec = DETECTION_PROBE
    assert (spec.name, spec.level, spec.feature_mode, spec.headline, spec.fit) == (
        "detection", "high", "dense", "voc_map50", "squash")
    result = spec.run(ProbeInputs(scenes, fake_dense_features(scenes), {**PARAMS, "tower": tower}, seed=0))
    check_result(spec, result)  # what probe_run checks before writing a record
    assert result.unit == "image" and result.samples == {}
    # the headline resamples from the auxiliary rows: its board gets intervals and tie groups
    assert result.statistics == {"voc_map50": "voc_map50"} == dict(spec.statistics)
    assert resampled.evaluate("voc_map50", result.auxiliary)[0] == result.metrics["voc_map50"]
    assert result.sample_ids == sorted(i.path for i in scenes.split("val"))
    assert samples_csv(result.sample_ids, result.samples).splitlines()[0] == "sample_id"
    scored = int(result.metrics["classes_scored"])
    per_class = sorted(k for k in result.metrics if k.startswith("ap50_"))
    assert 1 <= scored <= 3 and len(per_class) == scored
    assert {"voc_map50", "coco_map", "coco_map50", "coco_map75", "train_loss"} <= set(result.metrics)
    assert all(0.0 <= result.metrics[k] <= 1.0 for k in ["voc_map50", "coco_map", *per_class])
    assert result.metrics["voc_map50"] == pytest.approx(np.mean([result.metrics[k] for k in per_class]))
    again = spec.run(ProbeInputs(scenes, fake_dense_features(scenes), {**PARAMS, "tower": tower}, seed=0))
    assert again.metrics == result.metrics  # seeded, one thread: a re-run reproduces exactly
