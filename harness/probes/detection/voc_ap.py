"""PASCAL VOC 2012 detection AP, as the devkit's `VOCevaldet.m` and `VOCap.m` compute it.

Per class: every detection of the class over the evaluation images, sorted by decreasing confidence
(MATLAB's `sort` is stable: equal confidences keep their input order, here image order then the
image's own detection order); each is matched greedily to the ground-truth object of its image with the
highest overlap (first such object on ties), overlap computed with the devkit's +1 pixel convention on
inclusive corners. Overlap ≥ 0.5 with a non-difficult object not yet detected is a true positive;
with an already detected one, a false positive (duplicate); with a difficult object, neither. Below
0.5, a false positive. `npos` counts the non-difficult objects. AP is VOCap's all-point interpolation:
the area under the monotone (from the right) precision envelope, summed over the recall steps.

Convention. Boxes arrive as pixel edges (see `annotations`); the devkit's corners are inclusive pixel
indices. Edges [x0, x1) cover the inclusive pixels x0 .. x1 - 1, so `to_inclusive` subtracts 1 from the
far corners and the devkit's `x1 - x0 + 1` then gives back the edge width exactly. For a VOC box
(edges xmin - 1, xmax) this reproduces the devkit's numbers on the original annotation; for the
procedural scenes' tight boxes (edges from the object's pixels) the +1 counts each boundary pixel whole,
which is what those boxes mean. The COCO evaluator's +0 convention on the same edges gives the same IoU.
Malformed boxes (inverted or not finite) are refused, as in `coco_ap` (`annotations.check_boxes`).

Resampled form: `voc_image_columns` writes each image's detections with their outcomes and its objects per class,
from which `harness.probes.statistics.detection.voc_map50` recomputes `voc_map50` under bootstrap row weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.probes.detection.annotations import Detections, GroundTruth, check_images
from harness.probes.statistics.detection import FALSE_POSITIVE, NEITHER, TRUE_POSITIVE, voc_columns, vocap

MIN_OVERLAP = 0.5  # VOCopts.minoverlap


def to_inclusive(boxes: np.ndarray) -> np.ndarray:
    """Pixel edges [x0, y0, x1, y1) → the devkit's inclusive corners [x0, y0, x1 - 1, y1 - 1]."""
    return np.asarray(boxes, dtype=np.float64) - np.array([0.0, 0.0, 1.0, 1.0])


def devkit_overlaps(bb: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """VOCevaldet's overlap of one inclusive box `bb` with each inclusive box in `gt` (0 where disjoint)."""
    iw = np.minimum(bb[2], gt[:, 2]) - np.maximum(bb[0], gt[:, 0]) + 1
    ih = np.minimum(bb[3], gt[:, 3]) - np.maximum(bb[1], gt[:, 1]) + 1
    inter = np.where((iw > 0) & (ih > 0), iw * ih, 0.0)
    union = (bb[2] - bb[0] + 1) * (bb[3] - bb[1] + 1) + (gt[:, 2] - gt[:, 0] + 1) * (gt[:, 3] - gt[:, 1] + 1) - inter
    return np.where(inter > 0, inter / np.where(inter > 0, union, 1.0), 0.0)


def voc_image_outcomes(truth: GroundTruth, found: Detections) -> np.ndarray:
    """(D,) each detection's outcome in VOCevaldet (`statistics.detection`'s TRUE_POSITIVE, FALSE_POSITIVE or
    NEITHER), in the image's own detection order. VOCevaldet matches a detection only against its own image's
    objects, in the pooled ranking restricted to that image: the image's detections of the class stably sorted
    by decreasing confidence. So the outcomes are `voc_class_ap`'s, computed one image at a time."""
    outcome = np.full(len(found.scores), FALSE_POSITIVE, dtype=np.int64)
    for label in np.unique(found.labels):
        gt_boxes = to_inclusive(truth.boxes[truth.labels == label]).reshape(-1, 4)
        gt_difficult = truth.difficult[truth.labels == label]
        detected = np.zeros(len(gt_boxes), dtype=bool)
        mine = np.flatnonzero(found.labels == label)
        for k in mine[np.argsort(-found.scores[mine], kind="stable")]:
            overlaps = devkit_overlaps(to_inclusive(found.boxes[k]), gt_boxes) if len(gt_boxes) else np.zeros(0)
            jmax = int(np.argmax(overlaps)) if len(overlaps) else -1  # first maximum, as `voc_class_ap`
            if jmax >= 0 and overlaps[jmax] >= MIN_OVERLAP:
                if gt_difficult[jmax]:
                    outcome[k] = NEITHER
                elif not detected[jmax]:
                    outcome[k], detected[jmax] = TRUE_POSITIVE, True
    return outcome


def voc_image_columns(ground_truth: Sequence[GroundTruth], detections: Sequence[Detections],
                      num_classes: int) -> dict[str, np.ndarray]:
    """The auxiliary columns `statistics.detection.voc_map50` resamples (one row per image, in the order given)."""
    check_images(ground_truth, detections)
    objects = np.array([[int(np.sum((g.labels == c) & ~g.difficult)) for c in range(num_classes)]
                        for g in ground_truth], dtype=np.int64).reshape(len(ground_truth), num_classes)
    return voc_columns([d.scores for d in detections], [d.labels for d in detections],
                       [voc_image_outcomes(g, d) for g, d in zip(ground_truth, detections, strict=True)], objects)


def voc_class_ap(ground_truth: Sequence[GroundTruth], detections: Sequence[Detections], label: int) -> float | None:
    """VOCevaldet for one class; None when the class has no non-difficult object (npos = 0)."""
    gt_boxes = [to_inclusive(g.boxes[g.labels == label]) for g in ground_truth]
    gt_difficult = [g.difficult[g.labels == label] for g in ground_truth]
    detected = [np.zeros(len(d), dtype=bool) for d in gt_difficult]
    npos = sum(int(np.sum(~d)) for d in gt_difficult)
    if npos == 0:
        return None
    image, boxes, confidence = [], [], []
    for index, found in enumerate(detections):
        mine = found.labels == label
        image += [index] * int(mine.sum())
        boxes.append(to_inclusive(found.boxes[mine]).reshape(-1, 4))
        confidence.append(found.scores[mine])
    bb_all = np.concatenate(boxes) if boxes else np.zeros((0, 4))
    order = np.argsort(-np.concatenate(confidence) if confidence else np.zeros(0), kind="stable")
    tp, fp = np.zeros(len(order)), np.zeros(len(order))
    for d, k in enumerate(order):
        i = image[k]
        overlaps = devkit_overlaps(bb_all[k], gt_boxes[i]) if len(gt_boxes[i]) else np.zeros(0)
        jmax = int(np.argmax(overlaps)) if len(overlaps) else -1  # first maximum: `ov > ovmax` is strict
        if jmax >= 0 and overlaps[jmax] >= MIN_OVERLAP:
            if not gt_difficult[i][jmax]:
                if not detected[i][jmax]:
                    tp[d], detected[i][jmax] = 1, True
                else:
                    fp[d] = 1  # a duplicate detection
        else:
            fp[d] = 1
    tp, fp = np.cumsum(tp), np.cumsum(fp)
    with np.errstate(invalid="ignore", divide="ignore"):
        prec = tp / (fp + tp)
    return vocap(tp / npos, prec)


def voc_metrics(
    ground_truth: Sequence[GroundTruth], detections: Sequence[Detections], class_names: Sequence[str]
) -> dict[str, float]:
    """`voc_map50` (mean over the classes with a non-difficult object), `ap50_<class>` for each of them,
    and `classes_scored`."""
    check_images(ground_truth, detections)
    per_class = {name: voc_class_ap(ground_truth, detections, k) for k, name in enumerate(class_names)}
    scored = {name: ap for name, ap in per_class.items() if ap is not None}
    if not scored:
        raise ValueError("no class has a non-difficult object in the evaluation split: mAP is undefined")
    return {"voc_map50": float(np.mean(list(scored.values()))), "classes_scored": float(len(scored)),
            **{f"ap50_{name}": ap for name, ap in scored.items()}}
