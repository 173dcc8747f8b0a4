"""Mask AP as pycocotools' `COCOeval(iouType="segm")` computes it for one category, area "all", maxDets 100, and
the same AP recomputed under bootstrap row weights (a resampled statistic, `harness.probes.resampled`).

IoU of two binary masks is |A ∩ B| / |A ∪ B| in pixels (pycocotools' `maskUtils.iou` on RLEs with `iscrowd` 0);
an empty mask overlaps nothing (IoU 0, as `rleIou`, which skips pairs whose boxes do not overlap).

Per image (`COCOeval.evaluateImg`): detections in decreasing score order (stable), at most 100. For each IoU
threshold t in 0.50:0.05:0.95, each detection in turn takes the unmatched object of highest IoU ≥ t, the later
object on ties (`COCOeval`'s `<` lets an equal IoU replace). No object here is ignored or a crowd, so no
detection is ignored either. Over the images (`COCOeval.accumulate`): the images' detections pooled in image
order, then each image's score order, stably re-sorted by score; precision made monotone from the right and read
at 101 recall points (`searchsorted(recall, r, 'left')`, 0 past the last recall). `mask_ap` is the mean over
thresholds and recall points (`summarize`'s AP), `mask_ap50` and `mask_ap75` the means at IoU 0.5 and 0.75.

The box evaluator (`harness.probes.detection.coco_ap`) follows the same code on box IoUs; it is not imported
here because its module reads annotation files through torch-importing code, and this module is imported by the
site (through `harness.probes.statistics.instances`) that must not load torch.

Resampled form. A run writes one row per evaluation image (`image_columns`): `num_predicted` (its detections),
`num_objects` (its objects) and, per detection slot k (score order), `mask_score_k` and `mask_matched_k`, the
thresholds at which that detection is a true positive as a bit mask (bit t set: matched at IoU_THRESHOLDS[t];
the greedy matching is not monotone in t, so one number per detection would not do). Slots past an image's
`num_predicted` hold 0 and are never read. Under integer row weights w (how many times each image is drawn),
the AP is `COCOeval`'s on the images repeated w_i times, each copy beside its original (with every weight 1, the
run itself): the number of objects is Σ w_i·num_objects_i, and the cumulative true and false positives run over
the pooled order of the repeated images (`resampled.repeated_order`), where detections of one image that tie on
score repeat as a block, copy after copy, as `COCOeval` orders them. Counting each detection w_i times in place
would put a tied pair's copies side by side ([a, a, b, b] for `COCOeval`'s [a, b, a, b]) and move the AP by up
to 0.075. Weights must be whole numbers (bootstrap counts). Rows are read in the order given: the probe writes
them in sample-id order, so score ties between images resolve the same way in the run and in the site's paired
resamples, which put rows in id order.
A resample with no object has no AP (NaN), as `COCOeval` leaves a category without objects at -1.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from harness.probes.resampled import integer_weights, repeated_order

# COCOeval's parameters (Params.setDetParams), spelled as it builds them
IOU_THRESHOLDS = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
RECALL_POINTS = np.linspace(0.0, 1.0, int(np.round((1.0 - 0.0) / 0.01)) + 1, endpoint=True)
MAX_DETECTIONS = 100  # COCOeval's largest maxDets, the one its AP summaries use

NUM_PREDICTED, NUM_OBJECTS = "num_predicted", "num_objects"
SCORE_PREFIX, MATCHED_PREFIX = "mask_score_", "mask_matched_"
_SLOT = re.compile(r"^(mask_score|mask_matched)_(\d{3})$")


def mask_iou(detected: np.ndarray, objects: np.ndarray) -> np.ndarray:
    """(D, G) IoU of (D, H, W) and (G, H, W) binary masks; 0 where both masks are empty."""
    detected, objects = np.asarray(detected, dtype=bool), np.asarray(objects, dtype=bool)
    # flattened with the pixel count spelled out: reshape(0, -1) of an image without masks is ambiguous
    a = detected.reshape(len(detected), int(np.prod(detected.shape[1:]))).astype(np.float64)
    b = objects.reshape(len(objects), int(np.prod(objects.shape[1:]))).astype(np.float64)
    inter = a @ b.T  # pixel counts: exact in float64
    union = a.sum(axis=1)[:, None] + b.sum(axis=1)[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def match_image(ious: np.ndarray) -> np.ndarray:
    """(T, D) true-positive flags of one image's detections (rows of `ious`, in score order) against its objects
    (columns), by COCOeval.evaluateImg's greedy matching without ignored objects (module docstring)."""
    ious = np.asarray(ious, dtype=np.float64)
    detections, objects = ious.shape
    matched = np.zeros((len(IOU_THRESHOLDS), detections), dtype=bool)
    for t, threshold in enumerate(IOU_THRESHOLDS):
        taken = np.zeros(objects, dtype=bool)
        floor = min(threshold, 1 - 1e-10)
        for d in range(detections):
            free = np.where(taken, -np.inf, ious[d])
            if objects == 0 or free.max() < floor:
                continue
            m = objects - 1 - int(np.argmax(free[::-1]))  # the last object at the maximum: COCOeval's tie rule
            taken[m], matched[t, d] = True, True
    return matched


def matched_bits(matched: np.ndarray) -> np.ndarray:
    """(D,) float64 bit masks of (T, D) flags: bit t set where the detection is matched at IOU_THRESHOLDS[t]."""
    powers = 2 ** np.arange(matched.shape[0], dtype=np.int64)
    return (powers @ np.asarray(matched, dtype=np.int64)).astype(np.float64)


def image_columns(scores: Sequence[np.ndarray], matched: Sequence[np.ndarray],
                  num_objects: Sequence[int]) -> dict[str, np.ndarray]:
    """The per-image rows the statistic reads: each image's detection scores (in decreasing order, at most
    MAX_DETECTIONS), their (T, D) match flags from `match_image`, and its number of objects."""
    slots = max((len(s) for s in scores), default=0)
    if slots > MAX_DETECTIONS:
        raise ValueError(f"an image has {slots} detections; COCO's AP reads at most {MAX_DETECTIONS}")
    n = len(scores)
    columns = {NUM_PREDICTED: np.array([len(s) for s in scores], dtype=np.float64),
               NUM_OBJECTS: np.asarray(num_objects, dtype=np.float64).reshape(n)}
    for k in range(slots):
        columns[f"{SCORE_PREFIX}{k:03d}"] = np.zeros(n)
        columns[f"{MATCHED_PREFIX}{k:03d}"] = np.zeros(n)
    for i, (score, flags) in enumerate(zip(scores, matched, strict=True)):
        score = np.asarray(score, dtype=np.float64)
        if np.any(np.diff(score) > 0) or not np.all(np.isfinite(score)):
            raise ValueError("an image's detections must come with finite scores in decreasing order")
        for k, (value, bits) in enumerate(zip(score, matched_bits(flags), strict=True)):
            columns[f"{SCORE_PREFIX}{k:03d}"][i], columns[f"{MATCHED_PREFIX}{k:03d}"][i] = value, bits
    return columns


def pooled_detections(columns: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every detection of the rows, in image order then slot order: (owner row, score, matched bits)."""
    predicted = np.asarray(columns[NUM_PREDICTED]).astype(np.int64)
    slots = {}
    for name in columns:
        match = _SLOT.match(name)
        if match:
            slots.setdefault(int(match[2]), set()).add(match[1])
    count = 1 + max(slots, default=-1)
    if any(slots.get(k) != {"mask_score", "mask_matched"} for k in range(count)) or predicted.max(initial=0) > count:
        raise ValueError("an instance run's per-sample file needs mask_score/mask_matched columns for every slot "
                         "up to its largest num_predicted")
    take = np.arange(count)[None, :] < predicted[:, None]  # (n, slots): the real detections
    owner = np.broadcast_to(np.arange(len(predicted))[:, None], take.shape)[take]
    if count == 0:
        return owner, np.zeros(0), np.zeros(0, dtype=np.int64)
    score = np.stack([columns[f"{SCORE_PREFIX}{k:03d}"] for k in range(count)], axis=1)[take]
    bits = np.stack([columns[f"{MATCHED_PREFIX}{k:03d}"] for k in range(count)], axis=1)[take].astype(np.int64)
    return owner, np.asarray(score, dtype=np.float64), bits


def _threshold_indices(argument: str) -> list[int]:
    """"" → every IoU threshold (AP@[.5:.95]); "50", "75", … → the one at that percentage."""
    if not argument:
        return list(range(len(IOU_THRESHOLDS)))
    wanted = [t for t, value in enumerate(IOU_THRESHOLDS) if argument == f"{round(value * 100):d}"]
    if not wanted:
        raise ValueError(f"mask_ap:{argument}: the IoU threshold is a percentage of 50, 55, …, 95")
    return wanted


def mask_ap(columns: Mapping[str, np.ndarray], weights: np.ndarray, argument: str = "") -> np.ndarray:
    """(B,) mask AP of the rows under (B, n) integer row weights (module docstring); `argument` picks one IoU
    threshold ("50": AP50) or, empty, averages all ten (AP@[.5:.95])."""
    thresholds = _threshold_indices(argument)
    owner, score, bits = pooled_detections(columns)
    counts = integer_weights(weights, "mask_ap")
    positives = counts @ np.asarray(columns[NUM_OBJECTS], dtype=np.int64)  # (B,)
    order = np.argsort(-score, kind="mergesort")  # COCOeval.accumulate's pooled sort
    hits = (bits[order][None, :] >> np.asarray(thresholds)[:, None]) & 1 == 1  # (T', D) in pooled order
    precision = np.zeros((len(counts), len(thresholds), len(RECALL_POINTS)))
    for b in range(len(counts) if len(order) else 0):
        if positives[b] <= 0:
            continue
        # the pooled order of the images repeated: each copy's tied detections together (`repeated_order`)
        hit = hits[:, repeated_order(owner[order], score[order], counts[b])]
        if not hit.shape[1]:
            continue
        tp, fp = np.cumsum(hit, axis=1, dtype=np.float64), np.cumsum(~hit, axis=1, dtype=np.float64)
        recall = tp / positives[b]
        pr = tp / (fp + tp + np.spacing(1))  # COCOeval's guard against 0/0
        pr = np.maximum.accumulate(pr[:, ::-1], axis=1)[:, ::-1]
        for j in range(len(thresholds)):
            at = np.searchsorted(recall[j], RECALL_POINTS, side="left")
            inside = at < hit.shape[1]
            precision[b, j, inside] = pr[j, at[inside]]
    ap = precision.reshape(len(counts), -1).mean(axis=1)
    return np.where(positives > 0, ap, np.nan)
