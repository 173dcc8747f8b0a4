"""The detection probe's VOC AP50 as a resampled statistic (`harness.probes.resampled`): AP pools every image's
detections of a class into one ranked list, so `voc_map50` is no mean of per-image scores. A run writes what
the pooling reads, per evaluation image, as auxiliary columns, and the site recomputes the mAP from them under
bootstrap row weights for its intervals and paired tests; `check_result` recomputes it over all rows when the
run ends and refuses a run whose metric differs. NumPy only: the site imports this module without any probe
module (`harness.probes.detection.voc_ap` reads annotations through torch-importing code).

Why per-image rows suffice: VOCevaldet matches each detection only against its own image's objects, in the
pooled order restricted to that image, which is the image's own detections stably sorted by decreasing score;
so whether a detection is a true positive, a false positive or neither (it matched a difficult object) is fixed
per image (`voc_ap.voc_image_outcomes`), and only the ranking is pooled.

Auxiliary columns (float64, one row per evaluation image, rows in sample-id order):
- `voc_num_detections`: the image's detections (all classes);
- per detection slot k (the image's own detection order, k zero-padded to three digits): `voc_score_k`, its
  confidence, and `voc_match_k` = 3·class + outcome (outcome 0: false positive, 1: true positive, 2: neither);
  slots past `voc_num_detections` hold 0 and are never read;
- per class c: `voc_objects_c`, the image's non-difficult objects of class c (the devkit's npos share).

Statistic `voc_map50`: per class, the detections of that class pooled in row order then slot order, stably
sorted by decreasing score (VOCevaldet's `sort(-confidence)`), cumulative TPs and FPs, precision and recall
(npos = Σ w·voc_objects_c), VOCap's all-point AP; the mean over the classes with npos > 0 (NaN when a resample
has none). Under integer row weights it is that computation on the images repeated, each copy beside its
original (`resampled.repeated_order`: one image's tied detections repeat as a block, copy after copy); with
every weight 1, VOCevaldet itself, bit for bit (tests/test_detection.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from harness.probes import resampled
from harness.probes.resampled import integer_weights, repeated_order

FALSE_POSITIVE, TRUE_POSITIVE, NEITHER = 0, 1, 2
OUTCOMES = 3  # voc_match = OUTCOMES·class + outcome
NUM_DETECTIONS = "voc_num_detections"
SCORE_PREFIX, MATCH_PREFIX, OBJECTS_PREFIX = "voc_score_", "voc_match_", "voc_objects_"
_COLUMN = re.compile(r"^voc_(score|match|objects)_(\d{3})$")
MAX_COLUMNS = 1000  # three digits of slot or class


def vocap(rec: np.ndarray, prec: np.ndarray) -> float:
    """VOCap.m: all-point interpolated AP. Precision is NaN (0/0) only on a leading run of detections
    matched to difficult objects, before the first recall step, so it never enters the sum; `np.fmax`
    skips it in the envelope as MATLAB's `max` does."""
    mrec = np.concatenate([[0.0], rec, [1.0]])
    mpre = np.concatenate([[0.0], prec, [0.0]])
    mpre = np.fmax.accumulate(mpre[::-1])[::-1]
    steps = np.flatnonzero(mrec[1:] != mrec[:-1]) + 1
    return float(np.sum((mrec[steps] - mrec[steps - 1]) * mpre[steps]))


def ranked_ap(outcomes: np.ndarray, npos: int) -> float:
    """VOCevaldet's AP of one class's detections in ranked order, each a FALSE_POSITIVE, TRUE_POSITIVE or
    NEITHER; npos > 0."""
    tp = np.cumsum((outcomes == TRUE_POSITIVE).astype(np.float64))
    fp = np.cumsum((outcomes == FALSE_POSITIVE).astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        prec = tp / (fp + tp)
    return vocap(tp / npos, prec)


def voc_columns(scores: Sequence[np.ndarray], labels: Sequence[np.ndarray], outcomes: Sequence[np.ndarray],
                objects: np.ndarray) -> dict[str, np.ndarray]:
    """The per-image rows: each image's detection confidences, classes and outcomes (its own detection order),
    and its (n, K) non-difficult objects per class."""
    objects = np.asarray(objects, dtype=np.int64)
    n, classes = objects.shape
    slots = max((len(s) for s in scores), default=0)
    if slots > MAX_COLUMNS or classes > MAX_COLUMNS:
        raise ValueError(f"an image has {slots} detections or the dataset {classes} classes; the columns hold at "
                         f"most {MAX_COLUMNS}: lower max_detections")
    columns = {NUM_DETECTIONS: np.array([len(s) for s in scores], dtype=np.float64).reshape(n)}
    for k in range(slots):
        columns[f"{SCORE_PREFIX}{k:03d}"] = np.zeros(n)
        columns[f"{MATCH_PREFIX}{k:03d}"] = np.zeros(n)
    for i, (score, label, outcome) in enumerate(zip(scores, labels, outcomes, strict=True)):
        score, label, outcome = (np.asarray(a).reshape(-1) for a in (score, label, outcome))
        if not np.all(np.isfinite(score)) or np.any((label < 0) | (label >= classes)):
            raise ValueError(f"image {i}: detections need finite scores and classes in 0..{classes - 1}")
        for k in range(len(score)):
            columns[f"{SCORE_PREFIX}{k:03d}"][i] = score[k]
            columns[f"{MATCH_PREFIX}{k:03d}"][i] = OUTCOMES * int(label[k]) + int(outcome[k])
    for c in range(classes):
        columns[f"{OBJECTS_PREFIX}{c:03d}"] = objects[:, c].astype(np.float64)
    return columns


def _read(columns: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """(owner row, score, class, outcome) of every detection in row then slot order, and the (n, K) objects."""
    found: dict[str, dict[int, np.ndarray]] = {"score": {}, "match": {}, "objects": {}}
    for name, column in columns.items():
        match = _COLUMN.match(name)
        if match:
            found[match[1]][int(match[2])] = np.asarray(column, dtype=np.float64)
    count = np.asarray(columns.get(NUM_DETECTIONS, np.zeros(0))).astype(np.int64)
    slots, classes = 1 + max(found["score"], default=-1), 1 + max(found["objects"], default=-1)
    if (NUM_DETECTIONS not in columns or classes == 0 or len(found["objects"]) != classes
            or any(k not in found["score"] or k not in found["match"] for k in range(slots))
            or count.max(initial=0) > slots):
        raise ValueError("a detection run's per-sample file needs voc_num_detections, voc_score/voc_match columns "
                         "for every slot and voc_objects for every class; re-run the probe to write them")
    objects = np.stack([found["objects"][c] for c in range(classes)], axis=1).astype(np.int64)
    take = np.arange(slots)[None, :] < count[:, None]  # (n, slots): the real detections
    owner = np.broadcast_to(np.arange(len(count))[:, None], take.shape)[take]
    if slots == 0:
        return owner, np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), objects
    score = np.stack([found["score"][k] for k in range(slots)], axis=1)[take]
    code = np.stack([found["match"][k] for k in range(slots)], axis=1)[take].astype(np.int64)
    return owner, score, code // OUTCOMES, code % OUTCOMES, objects


def voc_map50(columns: Mapping[str, np.ndarray], weights: np.ndarray, _: str = "") -> np.ndarray:
    """(B,) VOC mAP at IoU 0.5 of the rows under (B, n) integer row weights (module docstring)."""
    owner, score, label, outcome, objects = _read(columns)
    counts = integer_weights(weights, "voc_map50")
    npos = counts @ objects  # (B, K)
    ranked = []
    for c in range(objects.shape[1]):
        mine = np.flatnonzero(label == c)
        order = mine[np.argsort(-score[mine], kind="stable")]  # VOCevaldet's sort(-confidence)
        ranked.append((owner[order], score[order], outcome[order]))
    values = np.full(len(counts), np.nan)
    for b in range(len(counts)):
        aps = [ranked_ap(kept[repeated_order(rows, scores, counts[b])], int(npos[b, c]))
               for c, (rows, scores, kept) in enumerate(ranked) if npos[b, c] > 0]
        if aps:
            values[b] = np.mean(aps)
    return values


resampled.STATISTICS.register("voc_map50", module=__name__)(voc_map50)
# metric name → statistic name, what the detection probe declares (`ProbeSpec.statistics`) and its results name
METRIC_STATISTICS = {"voc_map50": "voc_map50"}
