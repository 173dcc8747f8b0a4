"""Chance rows: what a predictor that never looks at the image scores on a board, derived analytically.

A board's numbers mean little without the floor they stand on: 0.30 top-1 is strong with 100 classes and
weak with 3. Each protocol family that has an exact answer says here which image-blind predictor it uses and
what it scores; the board shows that row apart, never ranked, never in a tie group. Everything comes from the
board's own record fields and per-sample ids, so a chance row needs nothing the site does not already read.

- classification (`linear-probe-adamw`, `finetune-*`): the eval split's labels are the parent folder of
  each sample id (the image-folder layout every classification dataset here writes). *Uniform guess*: top-1
  1/C, top-5 min(5, C)/C, macro-F1 from the expected confusion counts (a class of n_c of N images gets
  F1 = 2·n_c / (N + C·n_c); 1/C when classes are balanced). Where the classes are imbalanced, a second row,
  *majority class*: top-1 the largest class's share, top-5 the five largest, macro-F1 2p/(1+p)/C for that
  class's share p (every other class scores 0).
- retrieval (`cosine-retrieval`): a *uniformly random ranking* of the gallery. For a query whose class has R
  of the gallery's N items, the expected AP is (H_N + (R−1)/(N−1)·(N − H_N)) / N (H_N the N-th harmonic
  number; the expected precision at each relevant item's rank, averaged), and recall@k (a relevant item in
  the top k) is 1 − C(N−R, k)/C(N, k); the board's value is the mean over its queries. The gallery's class
  sizes are the dataset's `per_class` count of the gallery split; without one there is no chance row.
- two-alternative forced choice (`*-2afc`): a coin flip, accuracy 0.5 (overall and per distortion).
- dense regression boards headed by a Pearson correlation: a prediction independent of the target has an
  expected Pearson r of 0.
- the head-family sweep (`head-family-sweep`): each head's top-1 as classification's uniform guess (1/C), and the
  MLP's gain over the linear head 0 (two image-blind heads score the same in expectation).
- anomaly detection (`*-patch-anomaly`): a *constant score*, the same for every image and pixel. Every image or
  pixel then ties at one threshold: AUROC 0.5 (image, per type and pixel), AUPR the share p of defective test
  images (the one threshold's precision), F1-max 2p/(1 + p) (flag everything: precision p, recall 1), FPR@95
  1 (reaching 95% of the defects flags every good image) and AUPRO 0.15 (the PRO curve is the straight line
  from (0, 0) to (1, 1), and its area to FPR 0.3, divided by 0.3, is 0.3/2). A test image's class is the parent
  folder of its id (`test/<type>/…`), `good` the defect-free one.
- target overlap (`knn-target-overlap`): *random neighbours*, k drawn uniformly from the reference split for every
  image. Each neighbour is then a uniform draw, so an image's expected overlap is (‖y − μ‖² + σ²)/(2σ²) whatever
  k: the probe records it per image as `overlap_chance`, which depends on the targets alone, so every run of a
  board records the same value and the row shows it (no row where the board's runs disagree on it, or lack it).
- texture orientation (`structure-tensor-orientation`): an orientation *drawn uniformly at random* for every
  cell, independent of the image. Its error Δθ is uniform on [0°, 90°] whatever the truth, so every weighting of
  the cells gives the same expectation: angular error 45° (weighted and unweighted), within 15° 1/6, within 30°
  1/3.

- surface normals (`probe3d-surface-normal`): a direction *drawn uniformly on the sphere* for every pixel. Its angle
  θ to any true normal has CDF (1 − cos θ)/2 on [0°, 180°], symmetric about 90°: mean and median error 90°, within
  t the share (1 − cos t)/2 (11.25°: 0.0096, 22.5°: 0.038, 30°: 0.067). A constant guess (the training mean
  normal) usually scores far better on scenes with a ground plane: the run itself scores that prior and warns
  when the head does not beat it (`harness.probes.dense.normals`).

Others (mIoU, depth δ1, detection mAP, PCK, boundary F) depend on the label maps' geometry or class balance in
ways the records do not carry, so their boards have no chance row; the protocol notes say what low means.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any


@dataclass(frozen=True)
class ChanceRow:
    predictor: str  # "uniform guess", "majority class", "random ranking", "coin flip", "independent prediction",
    # "constant score", "uniform orientation", "uniform direction", "random neighbours"
    metrics: dict[str, float]  # only the board's metrics this predictor has an exact value for


def chance_rows(board: dict[str, Any], sample_ids: list[str] | None) -> list[ChanceRow]:
    """The chance rows of a board (empty where its protocol has none): `board` as `db.boards` gives it,
    `sample_ids` the per-sample ids its runs share (None without per-sample files)."""
    family = board["protocol"].split("/")[0]
    names = {m["metric"] for m in board["metrics"]}
    if family == "linear-probe-adamw" or family.startswith("finetune"):
        rows = _classification(sample_ids)
    elif family == "cosine-retrieval":
        rows = _retrieval(board, sample_ids)
    elif family.endswith("-2afc"):
        rows = [ChanceRow("coin flip", {name: 0.5 for name in names if name.startswith("accuracy")})]
    elif family == "head-family-sweep":
        rows = [ChanceRow(r.predictor, {"linear_top1": r.metrics["top1"], "knn_top1": r.metrics["top1"],
                                        "mlp_top1": r.metrics["top1"], "mlp_minus_linear": 0.0})
                for r in _classification(sample_ids)[:1]]
    elif family.endswith("-patch-anomaly"):
        rows = _anomaly(names, sample_ids)
    elif family == "structure-tensor-orientation":
        rows = [ChanceRow("uniform orientation", ORIENTATION_CHANCE)]
    elif family == "probe3d-surface-normal":
        rows = [ChanceRow("uniform direction", NORMALS_CHANCE)]
    elif family == "knn-target-overlap":
        rows = _target_overlap(board)
    elif board["headline_metric"] == "pearson":
        rows = [ChanceRow("independent prediction", {"pearson": 0.0})]
    else:
        rows = []
    rows = [ChanceRow(r.predictor, {k: v for k, v in r.metrics.items() if k in names}) for r in rows]
    return [r for r in rows if board["headline_metric"] in r.metrics]


def sample_class(sample_id: str) -> str:
    """The class a per-sample id names by its parent folder (`<class>/<image>`, the layout every class-folder
    dataset writes); "" where the id has no folder."""
    return PurePosixPath(sample_id).parent.name


def _labels(sample_ids: list[str] | None) -> list[str] | None:
    if not sample_ids:
        return None
    labels = [sample_class(sample_id) for sample_id in sample_ids]
    return None if any(not label for label in labels) else labels


def _classification(sample_ids: list[str] | None) -> list[ChanceRow]:
    labels = _labels(sample_ids)
    if labels is None or len(set(labels)) < 2:
        return []  # one parent folder names the split, not a class: ids that do not say the labels give no row
    counts = sorted(Counter(labels).values(), reverse=True)
    classes, total = len(counts), len(labels)
    uniform = {"top1": 1.0 / classes, "top5": min(5, classes) / classes,
               "macro_f1": math.fsum(2.0 * n / (total + classes * n) for n in counts) / classes}
    rows = [ChanceRow("uniform guess", uniform)]
    if counts[0] != counts[-1]:
        share = counts[0] / total
        rows.append(ChanceRow("majority class", {"top1": share, "top5": sum(counts[:5]) / total,
                                                 "macro_f1": 2.0 * share / (1.0 + share) / classes}))
    return rows


def _anomaly(names: set[str], sample_ids: list[str] | None) -> list[ChanceRow]:
    labels = _labels(sample_ids)
    if labels is None or "good" not in labels or set(labels) == {"good"}:
        return []
    share = sum(label != "good" for label in labels) / len(labels)
    metrics = {"auroc": 0.5, "aupr": share, "f1_max": 2.0 * share / (1.0 + share), "fpr95": 1.0,
               "pixel_auroc": 0.5, "aupro": AUPRO_OF_A_CONSTANT_MAP}
    metrics |= {name: 0.5 for name in names if name.startswith("auroc_")}
    return [ChanceRow("constant score", metrics)]


TARGET_OVERLAP_CHANCE = "overlap_chance"  # the metric in which `knn-target-overlap` records its chance value


def _target_overlap(board: dict[str, Any]) -> list[ChanceRow]:
    """The runs' common recorded `overlap_chance` (a function of the targets alone) as the headline's chance value."""
    values = [row["metrics"].get(TARGET_OVERLAP_CHANCE) for row in board.get("rows", [])]
    if not values or any(v is None for v in values) or max(values) - min(values) > 1e-9 * max(1.0, abs(values[0])):
        return []
    return [ChanceRow("random neighbours", {"overlap": values[0], TARGET_OVERLAP_CHANCE: values[0]})]


# Δθ ~ U[0°, 90°]: its mean, and P(Δθ < t) = t / 90
ORIENTATION_CHANCE = {"angular_error": 45.0, "mean_error_unweighted": 45.0, "within_15": 15.0 / 90.0,
                      "within_30": 30.0 / 90.0}
# θ has CDF (1 − cos θ)/2 on [0°, 180°], symmetric about 90°
NORMALS_CHANCE = {"mean_error": 90.0, "median_error": 90.0,
                  **{f"within_{t}": (1.0 - math.cos(math.radians(t))) / 2.0 for t in (11.25, 22.5, 30.0)}}
AUPRO_OF_A_CONSTANT_MAP = 0.15  # the PRO curve (0, 0)–(1, 1) integrated to FPR 0.3, divided by 0.3


def expected_average_precision(gallery: int, relevant: int) -> float:
    """E[AP] of a uniformly random ranking of `gallery` items of which `relevant` are relevant (see above)."""
    harmonic = math.fsum(1.0 / k for k in range(1, gallery + 1))
    if gallery == 1:
        return 1.0
    return (harmonic + (relevant - 1) / (gallery - 1) * (gallery - harmonic)) / gallery


def expected_recall_at(gallery: int, relevant: int, k: int) -> float:
    """P(at least one relevant item in the top k) under a uniformly random ranking."""
    k = min(k, gallery)
    return 1.0 - math.comb(gallery - relevant, k) / math.comb(gallery, k)


def _retrieval(board: dict[str, Any], sample_ids: list[str] | None) -> list[ChanceRow]:
    labels = _labels(sample_ids)
    protocol = json.loads(board["protocol_params"])
    per_class = json.loads(board.get("dataset_params") or "{}").get("per_class")
    gallery_split = protocol.get("gallery_split")
    if (labels is None or gallery_split == protocol.get("query_split") or not isinstance(per_class, dict)
            or not isinstance(per_class.get(gallery_split), int)):
        return []  # queries inside their own gallery, or class sizes the record does not carry
    relevant = per_class[gallery_split]
    gallery = relevant * len(set(labels))
    # Every query has the same R and N here, so the mean over queries is the per-query value.
    metrics = {"map": expected_average_precision(gallery, relevant)}
    metrics.update({f"recall@{k}": expected_recall_at(gallery, relevant, k) for k in protocol.get("recall_at", [])})
    return [ChanceRow("random ranking", metrics)]
