"""The dense probes: each is a `DenseTask` (target file, encoding, output size, loss, output activation,
metrics) run by one shared `run_dense`.

Protocol (every task): features of the train split are standardised per channel with that split's
statistics (streamed), a head (`head`: "linear" = 1×1 conv, "dpt" = the small DPT decoder; see
`heads`) is trained with AdamW for `epochs` epochs on targets encoded at `target_size`² (see
`targets` for each resampling operator), and the eval split is scored at that same resolution, a batch
at a time. Params: train_split, eval_split, epochs, lr, weight_decay, batch_size, head, target_size and,
for multi-layer features, layer_channels. Every record's metrics carry `train_loss` (last epoch's mean;
no column). Per-sample unit "image", id = the eval item's path.

Losses and activations: depth predicts log-depth (activation exp, loss L1 in log space); normals
predict a 3-vector (activation: normalise, loss 1 − cos); segmentation uses (binary) cross-entropy
and argmax / logit > 0; edges and occlusion edges regress with MSE on the raw output; keypoint
responses (peak 1) go through a sigmoid, MSE on the result.

The normals headline is `within_11.25`: higher is better like every other headline, and the coarse
thresholds saturate once the flat ground plane is solved; mean/median error are reported beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from harness.datasets.manifest import Manifest
from harness.probes.base import ProbeInputs, ProbeResult, ProbeSpec, register_probe
from harness.probes.dense import metrics as M
from harness.probes.dense import targets as T
from harness.probes.dense.heads import build_head
from harness.probes.dense.streaming import DenseStream, channel_statistics
from harness.probes.dense.train import predict_logits, train_head


class Accumulator(Protocol):
    def update(self, pred: np.ndarray, target: np.ndarray, valid: np.ndarray) -> None: ...
    def result(self) -> dict[str, float]: ...


@dataclass(frozen=True)
class DenseTask:
    target: str  # name in manifest.extra["targets"][item.path]
    encode: T.Encoder
    out_channels: Callable[[Manifest], int]
    loss: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    activate: Callable[[torch.Tensor], np.ndarray]  # logits → prediction in the target's encoding
    per_image: Callable[..., dict[str, np.ndarray]]  # (pred, target, valid, num_outputs) → (N,) columns
    accumulator: Callable[[Manifest], Accumulator] | None = None


class _Confusion:
    def __init__(self, num_classes: int) -> None:
        self.matrix = np.zeros((num_classes, num_classes), dtype=np.int64)

    def update(self, pred, target, valid) -> None:
        self.matrix += M.confusion_matrix(pred, target, len(self.matrix))

    def result(self) -> dict[str, float]:
        return M.semantic_summary(self.matrix)


class _PooledIoU:
    def __init__(self) -> None:
        self.inter = self.union = 0

    def update(self, pred, target, valid) -> None:
        inter, union = M.binary_counts(pred, target)
        self.inter, self.union = self.inter + inter, self.union + union

    def result(self) -> dict[str, float]:
        return {"iou_pooled": self.inter / self.union if self.union else 1.0}


class _Pearson:
    def __init__(self) -> None:
        self.pearson = M.PearsonAccumulator()

    def update(self, pred, target, valid) -> None:
        self.pearson.update(pred, target)

    def result(self) -> dict[str, float]:
        return {"pearson": self.pearson.value()}


def _depth_loss(logits, target, valid):
    log_gt = torch.log(target.clamp_min(1e-6))
    return (logits[:, 0] - log_gt).abs()[valid].mean()


def _normals_loss(logits, target, valid):
    cos = F.cosine_similarity(logits, target, dim=1, eps=1e-6)
    return (1.0 - cos)[valid].mean()


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().numpy()


DEPTH = DenseTask(
    "depth", T.encode_depth, lambda m: 1, _depth_loss,
    lambda z: _numpy(torch.exp(z[:, 0])), lambda p, t, v, k: M.depth_per_image(p, t, v))
NORMALS = DenseTask(
    "normals", T.encode_normals, lambda m: 3, _normals_loss,
    lambda z: _numpy(F.normalize(z, dim=1, eps=1e-6)), lambda p, t, v, k: M.normals_per_image(p, t, v))
GENERIC = DenseTask(
    "foreground", T.encode_labels, lambda m: 1,
    lambda z, t, v: F.binary_cross_entropy_with_logits(z[:, 0], t.float()),
    lambda z: _numpy(z[:, 0] > 0), lambda p, t, v, k: M.binary_per_image(p, t), lambda m: _PooledIoU())
SEMANTIC = DenseTask(
    "semantic", T.encode_labels, lambda m: len(m.classes), lambda z, t, v: F.cross_entropy(z, t),
    lambda z: _numpy(z.argmax(dim=1)), lambda p, t, v, k: M.semantic_per_image(p, t, k),
    lambda m: _Confusion(len(m.classes)))
EDGE = DenseTask(
    "texture_edges", T.encode_edge_magnitude, lambda m: 1, lambda z, t, v: F.mse_loss(z[:, 0], t),
    lambda z: _numpy(z[:, 0]), lambda p, t, v, k: M.regression_per_image(p, t), lambda m: _Pearson())
KEYPOINTS = DenseTask(
    "keypoints", T.encode_keypoints, lambda m: 1, lambda z, t, v: F.mse_loss(torch.sigmoid(z[:, 0]), t),
    lambda z: _numpy(torch.sigmoid(z[:, 0])), lambda p, t, v, k: M.regression_per_image(p, t), lambda m: _Pearson())
OCCLUSION = DenseTask(
    "occlusion_edges", T.encode_occlusion_log1p, lambda m: 1, lambda z, t, v: F.mse_loss(z[:, 0], t),
    lambda z: _numpy(z[:, 0]), lambda p, t, v, k: M.regression_per_image(p, t), lambda m: _Pearson())


def run_dense(task: DenseTask, inputs: ProbeInputs) -> ProbeResult:
    p: dict[str, Any] = inputs.params
    manifest, size = inputs.manifest, int(p["target_size"])
    layer_channels = p.get("layer_channels")

    def load(item):
        return task.encode(T.load_target(manifest, item, task.target), size)

    train = DenseStream(manifest.split(p["train_split"]), inputs.features, int(p["batch_size"]), load)
    statistics = channel_statistics(train)
    train.statistics = statistics
    in_channels = list(layer_channels) if layer_channels else [len(statistics[0])]
    out_channels = task.out_channels(manifest)
    trained = train_head(
        lambda: build_head(p["head"], in_channels, out_channels), train, task.loss, size=size,
        epochs=int(p["epochs"]), lr=float(p["lr"]), weight_decay=float(p["weight_decay"]), seed=inputs.seed,
        layer_channels=layer_channels)
    evaluation = DenseStream(manifest.split(p["eval_split"]), inputs.features, int(p["batch_size"]), load,
                             statistics)
    accumulator = task.accumulator(manifest) if task.accumulator else None
    ids: list[str] = []
    parts: dict[str, list[np.ndarray]] = {}
    for batch in evaluation.batches():
        logits = predict_logits(trained.head, batch.features, size=size, layer_channels=layer_channels)
        pred, target, valid = task.activate(logits), batch.target.numpy(), batch.valid.numpy()
        for name, column in task.per_image(pred, target, valid, out_channels).items():
            parts.setdefault(name, []).append(column)
        if accumulator is not None:
            accumulator.update(pred, target, valid)
        ids += [item.path for item in batch.items]
    columns = {name: np.concatenate(chunks).astype(np.float64) for name, chunks in parts.items()}
    # an image with no valid pixels (depth, normals) has no score: it is left out, not counted as 0
    scored = np.all([np.isfinite(c) for c in columns.values()], axis=0)
    if not scored.any():
        raise ValueError("no evaluation image has a valid target pixel")
    columns = {name: column[scored] for name, column in columns.items()}
    ids = [i for i, keep in zip(ids, scored, strict=True) if keep]
    metrics = accumulator.result() if accumulator is not None else {}
    metrics |= {name: float(column.mean()) for name, column in columns.items()}  # the column is the truth
    metrics["train_loss"] = trained.train_loss
    return ProbeResult(metrics, ids, columns, unit="image")


def _spec(name, level, protocol, headline, task, lower=()) -> ProbeSpec:
    return register_probe(ProbeSpec(
        name=name, level=level, protocol=protocol, feature_mode="dense", headline=headline,
        run=partial(run_dense, task), lower_is_better=frozenset({"train_loss", *lower})))


DEPTH_PROBE = _spec("depth", "mid", "probe3d-depth/v1", "delta1", DEPTH, ("abs_rel", "rmse"))
SURFACE_NORMAL_PROBE = _spec("surface_normal", "mid", "probe3d-surface-normal/v1", "within_11.25", NORMALS,
                             ("mean_error", "median_error"))
GENERIC_SEGMENTATION_PROBE = _spec("generic_segmentation", "mid", "dense-binary-segmentation/v1", "iou", GENERIC)
SEMANTIC_SEGMENTATION_PROBE = _spec("semantic_segmentation", "high", "dense-semantic-segmentation/v1", "miou",
                                    SEMANTIC)
EDGE_PROBE = _spec("edge", "low", "dense-edge-regression/v1", "pearson", EDGE, ("rmse", "mae"))
KEYPOINTS_PROBE = _spec("keypoints2d", "low", "dense-keypoint-heatmap/v1", "pearson", KEYPOINTS, ("rmse", "mae"))
OCCLUSION_PROBE = _spec("occlusion_edge", "mid", "dense-occlusion-edge-log1p/v1", "pearson", OCCLUSION,
                        ("rmse", "mae"))
