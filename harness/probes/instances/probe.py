"""The `instance_segmentation` probe (protocol `instance-embedding/v1`): which pixels belong to which object, from
a light head on frozen dense features, scored by mask AP.

Design: a per-pixel embedding clustered into masks (De Brabandere, Neven & Van Gool, CVPR Workshops 2017), not
FCOS boxes with mask coefficients. The embedding head is a 1×1 convolution like the dense probes' linear head, so
the protocol reads what the features say linearly about *grouping* (these cells are one thing, those another)
with nothing else learnt; boxes with mask coefficients need a box regressor, a prototype branch and NMS, whose
own limits on a 7×7 grid (the detection probe's perfect-head ceiling) would be scored along with the features.
Category-agnostic: one class, "object", because the question is instance separation; the semantic classes have
their own board (`semantic_segmentation`, and `detection` for boxes with classes).

Protocol: features from the whole image squashed to the backbone's square input (`fit: squash`), standardised per
channel with the training split's statistics (streamed); a head (`head`: `linear`, a 1×1 conv, or `dpt`, the dense
probes' small decoder) outputs a foreground logit and an `embedding_dim`-dimensional embedding, upsampled to
`target_size`²; its foreground bias starts at the logit of the training split's foreground fraction. Targets are
the dataset's `instance` map (0 = no object, k = object k) at `target_size`² (nearest; see `embedding`). Loss:
foreground BCE plus the discriminative loss (margins `delta_v`, `delta_d`), trained with AdamW for `epochs`
epochs by the dense probes' loop (seeded, one CPU thread, shuffled batches, no early stopping) on the run's device.
Masks are decoded on the CPU by greedy clustering in the embedding (`clustering`: radius δ_d, `min_area`,
`max_detections`), each scored by its mean foreground probability.

Metrics: `mask_ap` (headline; AP@[.5:.95]), `mask_ap50`, `mask_ap75`: COCO's `segm` AP for one category, area
"all", maxDets 100, computed at `target_size`² against the encoded instance maps (`mask_ap`); they pool detections
over images, so each is a resampled statistic of per-image auxiliary columns (`harness.probes.statistics.instances`)
and the board gets bootstrap intervals and paired tests. Per-image columns (unit "image", rows in sample-id
order): `num_predicted` (masks kept), `foreground_iou` (IoU of the predicted foreground, p > `foreground_threshold`,
with the true one; 1 where both are empty). `train_loss`: the last epoch's mean loss (no column).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from harness.datasets.manifest import Item
from harness.probes import resampled
from harness.probes.base import ProbeInputs, ProbeResult, ProbeSpec, column_means, register_probe
from harness.probes.dense.heads import build_head, logit
from harness.probes.dense.params import DenseParams
from harness.probes.dense.streaming import DenseStream
from harness.probes.dense.targets import load_target
from harness.probes.dense.train import predict_logits, train_dense_head
from harness.probes.instances.clustering import greedy_clusters
from harness.probes.instances.embedding import encode_instances, instance_loss, instance_masks
from harness.probes.instances.mask_ap import MAX_DETECTIONS, NUM_PREDICTED, image_columns, mask_iou, match_image
from harness.probes.statistics.instances import METRIC_STATISTICS, RESULT_STATISTICS

PROTOCOL = "instance-embedding/v1"
INSTANCE = "instance"  # the scenes' per-pixel object index map (harness.datasets.scenes)
FOREGROUND_IOU = "foreground_iou"


class InstanceParams(DenseParams):
    # no defaults: a record's protocol_params hold what params.yaml says (`validate_probe_params` keeps the keys
    # given), so every value that shapes the number is written down in it
    embedding_dim: PositiveInt  # D, the embedding's dimension
    delta_v: PositiveFloat  # pull margin
    delta_d: PositiveFloat  # push margin (means pushed 2·δ_d apart), also the clustering radius
    foreground_threshold: float = Field(gt=0.0, lt=1.0)
    min_area: PositiveInt  # clusters smaller than this, in target pixels, are dropped
    max_detections: int = Field(ge=1, le=MAX_DETECTIONS)  # masks kept per image, best first

    @model_validator(mode="after")
    def _clusters_separate(self) -> InstanceParams:
        # the clustering radius δ_d separates instances only when δ_d > 2·δ_v (see `clustering`)
        if not self.delta_d > 2 * self.delta_v:
            raise ValueError(f"delta_d must exceed 2·delta_v (got {self.delta_d} and {self.delta_v}): otherwise a "
                             "loss at zero still leaves pixels of two instances within the clustering radius")
        return self


def _foreground_iou(predicted: np.ndarray, truth: np.ndarray) -> float:
    union = np.logical_or(predicted, truth).sum()
    return float(np.logical_and(predicted, truth).sum() / union) if union else 1.0


def run_instance_segmentation(inputs: ProbeInputs) -> ProbeResult:
    p = InstanceParams(**inputs.params)
    manifest, size = inputs.manifest, p.target_size
    train_items = manifest.split(p.train_split)
    # sample-id order: score ties between images resolve by row order in the AP (`mask_ap`), and the site's paired
    # resamples put rows in id order, so the run writes them so
    eval_items = sorted(manifest.split(p.eval_split), key=lambda item: item.path)
    if not train_items or not eval_items:
        raise ValueError(f"instance_segmentation needs {p.train_split} and {p.eval_split} images; got "
                         f"{len(train_items)} and {len(eval_items)}")

    def load(item: Item) -> tuple[np.ndarray, np.ndarray]:
        return encode_instances(load_target(manifest, item, INSTANCE), size)

    # one CPU pass over the training targets: the loss's instance slots and the foreground prior
    slots, foreground, pixels = 1, 0, 0
    for item in train_items:
        target, _ = load(item)
        slots = max(slots, 1 + int(target.max()))
        foreground, pixels = foreground + int((target > 0).sum()), pixels + target.size
    trained = train_dense_head(
        train_items, inputs.features, load,
        lambda in_channels, bias: build_head(p.head, in_channels, 1 + p.embedding_dim, bias),
        partial(instance_loss, slots=slots, delta_v=p.delta_v, delta_d=p.delta_d), batch_size=p.batch_size,
        size=size, epochs=p.epochs, lr=p.lr, weight_decay=p.weight_decay, seed=inputs.seed,
        layer_channels=p.layer_channels, device=inputs.device,
        output_bias=lambda _: [logit(foreground / pixels)] + [0.0] * p.embedding_dim)

    scores, matched, objects, foreground_iou = [], [], [], []
    evaluation = DenseStream(eval_items, inputs.features, p.batch_size, load, trained.statistics)
    for batch in evaluation.batches():
        logits = predict_logits(trained.head, batch.features, size=size, layer_channels=p.layer_channels)
        # decoded on the CPU: clustering is sequential host work; one transfer per batch
        probability = torch.sigmoid(logits[:, 0]).cpu().numpy()
        embedding = logits[:, 1:].cpu().numpy()
        for prob, emb, target in zip(probability, embedding, batch.target.numpy(), strict=True):
            decoded = greedy_clusters(prob, emb, foreground_threshold=p.foreground_threshold, radius=p.delta_d,
                                      min_area=p.min_area, max_detections=p.max_detections)
            truth = instance_masks(target)
            scores.append(decoded.scores)
            matched.append(match_image(mask_iou(decoded.masks, truth)))
            objects.append(len(truth))
            foreground_iou.append(_foreground_iou(prob > p.foreground_threshold, target > 0))
    if sum(objects) == 0:
        raise ValueError(f"no {p.eval_split} image has an object at {size}² pixels: mask AP is undefined")
    auxiliary = image_columns(scores, matched, objects)
    samples = {NUM_PREDICTED: auxiliary.pop(NUM_PREDICTED), FOREGROUND_IOU: np.asarray(foreground_iou)}
    metrics = column_means(samples)
    for name, statistic in RESULT_STATISTICS.items():
        metrics[name] = float(resampled.evaluate(statistic, {**samples, **auxiliary})[0])
    metrics["train_loss"] = trained.train_loss
    return ProbeResult(metrics, [item.path for item in eval_items], samples, unit="image", auxiliary=auxiliary,
                       statistics=dict(RESULT_STATISTICS))


INSTANCE_SEGMENTATION_PROBE = register_probe(ProbeSpec(
    name="instance_segmentation",
    level="mid",
    protocol=PROTOCOL,
    feature_mode="dense",
    headline="mask_ap",
    run=run_instance_segmentation,
    params=InstanceParams,
    lower_is_better=frozenset({"train_loss"}),
    fit="squash",  # the dense probes' read of the scenes: one extraction serves every task
    fewshot_unit="images",
    uses_device=True,
    statistics=METRIC_STATISTICS,
))
