"""The `detection` probe: a single-scale FCOS head on frozen dense features, scored with VOC and COCO AP.

Protocol `fcos-single-scale/v1`: the training split's dense features are standardised per channel with
that split's statistics (streamed, as the dense probes do), an `FCOSHead` (see `fcos`) is trained with
AdamW for `epochs` epochs by the dense probes' shared loop (seeded, one torch thread on the CPU, shuffled batches,
no early stopping), and the evaluation split is decoded to at most `max_detections` boxes per image. The head
trains and predicts on the run's device (`ProbeInputs.device`); its raw outputs come back to the CPU, where they
are decoded (thresholds, top-k, NMS) as on a CPU-only run.

Metrics (dataset-level, so no per-sample column; the record's samples list the evaluation images, in sample-id
order): `voc_map50` (headline; VOC 2012 devkit AP at IoU 0.5, see `voc_ap`; a resampled statistic of per-image
auxiliary columns, `harness.probes.statistics.detection`, so its board gets bootstrap intervals and paired
tests), `ap50_<class>` and `classes_scored` (classes with a non-difficult object in the evaluation split; the
mean runs over them), `coco_map` (mAP@[.5:.95]), `coco_map50`, `coco_map75` (see `coco_ap`), and `train_loss`
(last epoch's mean).

Params: train_split, eval_split, epochs, lr, weight_decay, batch_size; head: tower (3×3 conv layers, 0 =
linear read-out), width, centerness (bool), radius (centre sampling, cells); decoding: score_threshold,
pre_nms_top_k, nms_iou, max_detections; layer_channels for multi-layer features (as the dense probes).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, StrictBool

from harness.datasets.manifest import Item
from harness.probes.base import ProbeInputs, ProbeResult, ProbeSpec, register_probe
from harness.probes.dense.params import HeadTrainingParams, Split
from harness.probes.dense.streaming import DenseStream
from harness.probes.dense.train import predict_logits, train_dense_head
from harness.probes.detection.annotations import detection_classes, ground_truth_reader
from harness.probes.detection.coco_ap import coco_metrics
from harness.probes.detection.fcos import FCOSHead, assign, decode, fcos_loss
from harness.probes.detection.voc_ap import voc_image_columns, voc_metrics
from harness.probes.statistics.detection import METRIC_STATISTICS

PROTOCOL = "fcos-single-scale/v1"


class DetectionParams(HeadTrainingParams):
    train_split: Split
    tower: NonNegativeInt  # 3×3 conv layers before the 1×1 read-out (0 = strictly linear)
    width: PositiveInt
    centerness: StrictBool
    radius: PositiveFloat  # centre-sampling radius, in feature cells
    score_threshold: float = Field(ge=0.0, le=1.0)
    pre_nms_top_k: PositiveInt
    nms_iou: float = Field(gt=0.0, le=1.0)
    max_detections: PositiveInt


def run_detection(inputs: ProbeInputs) -> ProbeResult:
    p: dict[str, Any] = inputs.params
    manifest = inputs.manifest
    names = [name for _, name in detection_classes(manifest)]
    truth = ground_truth_reader(manifest)
    train_items = manifest.split(p["train_split"])
    # sample-id order: score ties between images resolve by row order in the AP (`statistics.detection`), and the
    # site's paired resamples put rows in id order, so the run writes them so
    eval_items = sorted(manifest.split(p["eval_split"]), key=lambda item: item.path)
    grid_hw = tuple(int(v) for v in inputs.features(train_items[0]).shape[-2:])
    radius, centerness = float(p["radius"]), bool(p["centerness"])

    def load(item: Item):
        return assign(truth(item), grid_hw, radius)

    batch_size = int(p["batch_size"])
    layer_channels = p.get("layer_channels")
    trained = train_dense_head(
        train_items, inputs.features, load,
        lambda in_channels, _: FCOSHead(in_channels, len(names), tower=int(p["tower"]), width=int(p["width"]),
                                        centerness=centerness),
        partial(fcos_loss, num_classes=len(names), centerness=centerness), batch_size=batch_size, size=0,
        epochs=int(p["epochs"]), lr=float(p["lr"]), weight_decay=float(p["weight_decay"]), seed=inputs.seed,
        layer_channels=layer_channels, device=inputs.device)
    settings = {"num_classes": len(names), "centerness": centerness, "score_threshold": float(p["score_threshold"]),
                "pre_nms_top_k": int(p["pre_nms_top_k"]), "nms_iou": float(p["nms_iou"]),
                "max_detections": int(p["max_detections"])}
    evaluation = DenseStream(eval_items, inputs.features, batch_size, statistics=trained.statistics)
    ground_truth, detections = [], []
    for batch in evaluation.batches():
        # decoded on the CPU: one small image at a time, with NMS, is host work; one transfer per batch
        raw = predict_logits(trained.head, batch.features, size=0, layer_channels=layer_channels).cpu()
        for item, output in zip(batch.items, raw, strict=True):
            image = truth(item)
            ground_truth.append(image)
            detections.append(decode(output, image.width, image.height, **settings))
    metrics = voc_metrics(ground_truth, detections, names) | coco_metrics(ground_truth, detections, len(names))
    metrics["train_loss"] = trained.train_loss
    auxiliary = voc_image_columns(ground_truth, detections, len(names))
    return ProbeResult(metrics, [item.path for item in eval_items], {}, unit="image", auxiliary=auxiliary,
                       statistics=dict(METRIC_STATISTICS))


DETECTION_PROBE = register_probe(ProbeSpec(
    name="detection", level="high", protocol=PROTOCOL, feature_mode="dense", headline="voc_map50",
    run=run_detection, params=DetectionParams, lower_is_better=frozenset({"train_loss"}), fit="squash",
    uses_device=True, folder_layout="voc_detection", statistics=METRIC_STATISTICS))
