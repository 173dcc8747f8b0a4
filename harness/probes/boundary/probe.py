"""The BSDS500 boundary probe (`edge_bsds`, protocol `bsds500-boundary/v2`).

1. A dense head (`heads.build_head`, trained by the shared `train_head`) regresses the annotator-mean
   boundary map of the train splits, max-pooled to `target_size`² (thin boundaries survive, as in the
   dense edge probe), with binary cross-entropy on logits against that soft target. BCE is the proper
   scoring rule for a probability, so sigmoid(logit) estimates the fraction of annotators marking a
   boundary in the cell, and is a [0, 1] map as BSDS's thresholds expect; HED and RCF also train with
   (weighted) BCE on (consensus) edge targets. No class re-weighting: ODS picks its own threshold.
2. Each eval image's probability map is upsampled bilinearly from `target_size`² to the image's native
   H × W (dense features cover the whole image squashed to the backbone's square input, so the map
   stretches back onto it), then edge-NMS'd as SE/HED do (`nms.edge_nms`).
3. Per threshold and annotator, thinned predicted pixels are matched one-to-one to human boundary pixels
   within `max_dist` × diagonal (`matching`: the largest matching, of least total distance among those, as
   BSDS's correspondPixels), and ODS/OIS/AP/R50 follow `collect_eval_bdry.m` (`metrics`).

v2 (from v1): the matching's least total distance. v1 took any largest matching, so which predicted pixels
were matched, and cntP with them, drifted from the benchmark's (up to ~4 % per threshold on dense maps).

The head trains and predicts on the run's device (`ProbeInputs.device`); its logits come back to the CPU, where
steps 2 and 3 run as on a CPU-only run.

Per-sample unit "image" (id = the eval item's path) with columns `image_f_at_ods` (the image's F at the
dataset's ODS point) and `image_best_f` (its own best F along the curve). ODS, OIS, AP and R50 pool counts
over images and have no score column; the image's counts at every threshold are auxiliary columns
(`cnt_r_000` … `sum_p_098`), from which `harness.probes.statistics.boundary` recomputes ODS, OIS and AP (checked
against the metrics when the run ends, resampled by the site's bootstrap over images; the site also draws the
pooled P/R curve from them). Scoring runs in this process, one image at a time (see docs/protocols.md for its cost).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, PositiveFloat, PositiveInt

from harness.datasets.manifest import Item, Manifest
from harness.probes.base import ProbeInputs, ProbeResult, ProbeSpec, column_means, register_probe
from harness.probes.boundary.matching import boundary_counts, bsds_thresholds
from harness.probes.boundary.metrics import summarise
from harness.probes.boundary.nms import edge_nms
from harness.probes.dense.heads import build_head
from harness.probes.dense.params import HeadTrainingParams, Split
from harness.probes.dense.streaming import DenseStream
from harness.probes.dense.targets import encode_edge_magnitude, load_target
from harness.probes.dense.train import predict_logits, train_dense_head
from harness.probes.statistics.boundary import count_columns


class BoundaryParams(HeadTrainingParams):
    head: Literal["linear", "dpt"]
    train_splits: list[Split] = Field(min_length=1)  # BSDS trains on train + val
    target_size: PositiveInt
    thresholds: PositiveInt  # BSDS's default: 99, i.e. linspace(0.01, 0.99, 99)
    max_dist: PositiveFloat  # match tolerance, × the image diagonal


def _bce_on_soft_target(logits: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(logits[:, 0], target)


def _logit_of_mean_target(stream: DenseStream) -> float:
    """The output bias that predicts the training targets' mean everywhere: the head starts at the prior and
    spends its epochs on what the features add (as the dense probes' `Prior` does)."""
    total, count = 0.0, 0
    for batch in stream.batches():
        total += float(batch.target.double().sum())
        count += batch.target.numel()
    mean = min(max(total / max(count, 1), 1e-4), 1 - 1e-4)
    return math.log(mean / (1 - mean))


def _native_probability(logits: torch.Tensor, height: int, width: int) -> np.ndarray:
    """sigmoid at target_size², then bilinear to (H, W): a convex mix of predicted probabilities."""
    probability = torch.sigmoid(logits[None, :1].double())
    return F.interpolate(probability, size=(height, width), mode="bilinear", align_corners=False)[0, 0].numpy()


def _image_counts(manifest: Manifest, item: Item, logits: torch.Tensor, thresholds: np.ndarray,
                  max_dist: float) -> np.ndarray:
    """(K, 4) BSDS counts of one eval image: its probability at native size, edge-NMS'd, vs every annotator."""
    annotators = load_target(manifest, item, "boundaries")
    if annotators.ndim != 3:
        raise ValueError(f"{item.path}: boundaries must be (annotators, H, W); got shape {annotators.shape}")
    probability = _native_probability(logits, *annotators.shape[1:])
    return boundary_counts(edge_nms(probability), annotators, thresholds, max_dist)


def run_boundary(inputs: ProbeInputs) -> ProbeResult:
    p: dict[str, Any] = inputs.params
    manifest, size = inputs.manifest, int(p["target_size"])
    layer_channels = p.get("layer_channels")
    thresholds = bsds_thresholds(int(p["thresholds"]))

    def load(item: Item) -> tuple[np.ndarray, np.ndarray]:
        return encode_edge_magnitude(load_target(manifest, item, "edge"), size)

    train_items = [item for split in p["train_splits"] for item in manifest.split(split)]
    eval_items = manifest.split(p["eval_split"])
    if not train_items or not eval_items:
        raise ValueError(f"dataset {manifest.name}: no items in train_splits {p['train_splits']} "
                         f"or eval_split {p['eval_split']!r}")
    trained = train_dense_head(
        train_items, inputs.features, load, lambda in_channels, bias: build_head(p["head"], in_channels, 1, bias),
        _bce_on_soft_target, batch_size=int(p["batch_size"]), size=size, epochs=int(p["epochs"]), lr=float(p["lr"]),
        weight_decay=float(p["weight_decay"]), seed=inputs.seed, layer_channels=layer_channels, device=inputs.device,
        output_bias=lambda train: [_logit_of_mean_target(train)])
    evaluation = DenseStream(eval_items, inputs.features, int(p["batch_size"]), statistics=trained.statistics)
    counts = []
    for batch in evaluation.batches():
        # to the CPU: upsampling to native size, NMS and matching are host work on NumPy, per image
        logits = predict_logits(trained.head, batch.features, size=size, layer_channels=layer_channels).cpu()
        counts += [_image_counts(manifest, item, item_logits, thresholds, float(p["max_dist"]))
                   for item, item_logits in zip(batch.items, logits, strict=True)]
    metrics, columns = summarise(thresholds, np.stack(counts))
    metrics |= column_means(columns)
    metrics["train_loss"] = trained.train_loss
    return ProbeResult(metrics, [item.path for item in eval_items], columns, unit="image",
                       auxiliary=count_columns(np.stack(counts)), statistics=dict(EDGE_BSDS_STATISTICS))


EDGE_BSDS_STATISTICS = {"ods_f": "bsds_ods_f", "ois_f": "bsds_ois_f", "ap": "bsds_ap"}
EDGE_BSDS_PROBE = register_probe(ProbeSpec(
    name="edge_bsds", level="low", protocol="bsds500-boundary/v2", feature_mode="dense", headline="ods_f",
    run=run_boundary, params=BoundaryParams, lower_is_better=frozenset({"train_loss"}), fit="squash",
    uses_device=True, statistics=EDGE_BSDS_STATISTICS,
    train_split_param="train_splits"))
