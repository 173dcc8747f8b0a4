"""COCO-style box mAP, following pycocotools' `COCOeval` (`evaluateImg`, `accumulate`, `summarize`) for
area "all" and maxDets 100.

Per image and class: detections sorted by decreasing score (stable) and cut to 100; ground truth
sorted with ignored objects last. For each IoU threshold t in 0.50:0.05:0.95, each detection in turn takes
the unmatched object of highest IoU ≥ t (the later one on ties, as `COCOeval`'s `<` lets an equal IoU
replace), preferring non-ignored objects: once matched to one, it never moves to an ignored one. A
detection matched to an ignored object is itself ignored. Per class, the images' detections are pooled
(image order, then score order), stably re-sorted by score, and precision is made monotone from the
right and read at 101 recall points (`searchsorted(recall, r, 'left')`; 0 past the last recall).
A class with no non-ignored object has no precision (-1 in `COCOeval`) and is left out of the means.

IoU is `COCOeval`'s +0 convention (w·h) on pixel-edge boxes, identical to VOC's +1 on inclusive
corners (see `voc_ap`). VOC's `difficult` objects are the ignored ones (`COCOeval` ignores `iscrowd`
objects, which also changes their IoU; no box here is a crowd).

Malformed boxes (inverted or not finite) are refused, not scored: see `annotations.check_boxes`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.probes.detection.annotations import Detections, GroundTruth, check_images

IOU_THRESHOLDS = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)  # COCOeval's
RECALL_POINTS = np.linspace(0.0, 1.0, int(np.round((1.0 - 0.0) / 0.01)) + 1, endpoint=True)
MAX_DETECTIONS = 100


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) IoU of pixel-edge boxes, +0 convention."""
    a, b = np.asarray(a, dtype=np.float64).reshape(-1, 4), np.asarray(b, dtype=np.float64).reshape(-1, 4)
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _match_image(ious: np.ndarray, ignored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """COCOeval.evaluateImg's greedy matching: (T, D) matched flags and (T, D) ignore flags.

    `ious` is (D, G) with detections in score order and objects with ignored ones last."""
    matched = np.zeros((len(IOU_THRESHOLDS), ious.shape[0]), dtype=bool)
    dt_ignored = np.zeros_like(matched)
    for t, threshold in enumerate(IOU_THRESHOLDS):
        taken = np.zeros(ious.shape[1], dtype=bool)
        for d in range(ious.shape[0]):
            best, m = min(threshold, 1 - 1e-10), -1
            for g in range(ious.shape[1]):
                if taken[g]:
                    continue
                if m > -1 and not ignored[m] and ignored[g]:
                    break
                if ious[d, g] < best:
                    continue
                best, m = ious[d, g], g
            if m > -1:
                taken[m], matched[t, d], dt_ignored[t, d] = True, True, ignored[m]
    return matched, dt_ignored


def _class_precision(
    ground_truth: Sequence[GroundTruth], detections: Sequence[Detections], label: int
) -> np.ndarray | None:
    """(T, R) interpolated precision of one class (COCOeval.accumulate), None without non-ignored objects."""
    scores, matched, dt_ignored, npig = [], [], [], 0
    for truth, found in zip(ground_truth, detections, strict=True):
        keep = truth.labels == label
        gt_ignored = truth.difficult[keep]
        gt_order = np.argsort(gt_ignored, kind="stable")
        mine = np.flatnonzero(found.labels == label)
        mine = mine[np.argsort(-found.scores[mine], kind="stable")][:MAX_DETECTIONS]
        ious = box_iou(found.boxes[mine], truth.boxes[keep][gt_order])
        m, ig = _match_image(ious, gt_ignored[gt_order])
        scores.append(found.scores[mine])
        matched.append(m)
        dt_ignored.append(ig)
        npig += int(np.sum(~gt_ignored))
    if npig == 0:
        return None
    all_scores = np.concatenate(scores)
    order = np.argsort(-all_scores, kind="mergesort")
    m, ig = np.concatenate(matched, axis=1)[:, order], np.concatenate(dt_ignored, axis=1)[:, order]
    tp_sum = np.cumsum(m & ~ig, axis=1).astype(np.float64)
    fp_sum = np.cumsum(~m & ~ig, axis=1).astype(np.float64)
    precision = np.zeros((len(IOU_THRESHOLDS), len(RECALL_POINTS)))
    for t in range(len(IOU_THRESHOLDS)):
        tp, fp = tp_sum[t], fp_sum[t]
        if len(tp) == 0:
            continue
        recall = tp / npig
        pr = tp / (fp + tp + np.spacing(1))  # COCOeval's guard against 0/0
        pr = np.maximum.accumulate(pr[::-1])[::-1]
        at = np.searchsorted(recall, RECALL_POINTS, side="left")
        inside = at < len(pr)
        precision[t, inside] = pr[at[inside]]
    return precision


def coco_metrics(
    ground_truth: Sequence[GroundTruth], detections: Sequence[Detections], num_classes: int
) -> dict[str, float]:
    """`coco_map` (mAP@[.5:.95]), `coco_map50`, `coco_map75`: means over classes with a non-ignored object."""
    check_images(ground_truth, detections)
    curves = [c for c in (_class_precision(ground_truth, detections, k) for k in range(num_classes)) if c is not None]
    if not curves:
        raise ValueError("no class has a non-ignored object in the evaluation split: mAP is undefined")
    scored = np.stack(curves)  # (classes, T, R)
    # COCOeval.summarize: the mean over every (threshold, recall point, class) cell; IoU 0.5 and 0.75 are
    # IOU_THRESHOLDS[0] and [5]
    return {"coco_map": float(np.mean(scored)), "coco_map50": float(np.mean(scored[:, 0])),
            "coco_map75": float(np.mean(scored[:, 5]))}
