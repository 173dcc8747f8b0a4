"""The dense probes: each is a `DenseTask` (target file, encoding, output size, loss, output activation,
metrics) run by one shared `run_dense`.

Protocol (every task, v2): features are taken from the whole image squashed to the backbone's square
input (`fit="squash"`, so every backbone sees the same pixels and the targets, resized the same way,
line up); features of the train split are standardised per channel with that split's statistics
(streamed); the head's output bias starts at the training targets' prior (`Prior`); a head (`head`:
"linear" = 1×1 conv, "dpt" = the small DPT decoder; see `heads`) is trained with AdamW for `epochs`
epochs on targets encoded at `target_size`² (see `targets` for each resampling operator), and the eval
split is scored at that same resolution, a batch at a time. Params: train_split, eval_split, epochs, lr,
weight_decay, batch_size, head, target_size and, for multi-layer features, layer_channels. Every
record's metrics carry `train_loss` (last epoch's mean; no column). Per-sample unit "image", id = the
eval item's path. A metric pooled over pixels (semantic `miou` and `mean_acc`, the regression maps' `pearson`)
has no column: each image's share of it is written as auxiliary columns and the metric is its resampled
statistic over them (`harness.probes.statistics.dense`), so its board gets bootstrap intervals.

Device: the head trains and predicts on the run's device (`ProbeInputs.device`; `uses_device`), built on the CPU
under the seed and moved there. What is read from the data (feature statistics, the prior) is summed on the
CPU in float64, and predictions come back to the CPU (`.cpu()`) after the output activation, before the metrics.

Losses and activations: depth predicts log-depth (activation exp, loss L1 in log space); surface normals are
their own module (`normals`: the uncertainty-aware angular loss); segmentation uses (binary) cross-entropy
and argmax / logit > 0; edges and occlusion edges regress with MSE on the raw output; keypoint
responses (peak 1) go through a sigmoid, MSE on the result.

A task with a `warn` check (normals) is also scored with its prior as a constant prediction, the image-blind
baseline the head started from; the check compares the two and may add warnings to the record.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeAlias

import numpy as np
import torch
import torch.nn.functional as F

from harness.datasets.manifest import Manifest
from harness.probes import resampled
from harness.probes.arrays import ARRAYS_DATASET, ArrayForm, class_names, rows_of
from harness.probes.base import ProbeHead, ProbeInputs, ProbeResult, ProbeSpec, column_means, register_probe
from harness.probes.dense import metrics as M
from harness.probes.dense import targets as T
from harness.probes.dense.heads import build_head, logit
from harness.probes.dense.keypoints import keypoint_columns
from harness.probes.dense.params import DenseParams
from harness.probes.dense.streaming import DenseStream
from harness.probes.dense.train import predict_logits, train_dense_head
from harness.probes.statistics import dense as S
from harness.probes.statistics.keypoints import KEYPOINT_STATISTICS


class Accumulator(Protocol):
    def update(self, pred: np.ndarray, target: np.ndarray, valid: np.ndarray) -> None: ...
    def result(self) -> dict[str, float]: ...


@dataclass(frozen=True)
class DenseTask:
    target: str | tuple[str, ...]  # name in manifest.extra["targets"][item.path]; the first the dataset has
    encode: T.Encoder
    out_channels: Callable[[Manifest], int]
    loss: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    activate: Callable[[torch.Tensor], np.ndarray]  # logits → prediction in the target's encoding
    per_image: Callable[..., dict[str, np.ndarray]]  # (pred, target, valid, num_outputs) → (N,) columns
    accumulator: Callable[[Manifest], Accumulator] | None = None
    # the output bias that predicts the training split's prior: (target, valid, num_outputs) → summed
    # statistics per batch, and those sums → bias. None: PyTorch's default initialisation.
    prior: Prior | None = None
    # (the head's metrics, its prior's as a constant prediction on the same images) → warnings for the record;
    # needs `prior`. None: no check.
    warn: Callable[[dict[str, float], dict[str, float]], list[str]] | None = None
    # metrics pooled over pixels (mIoU, Pearson r): (pred, target, valid, num_outputs) → (N,) auxiliary columns,
    # each image's share of the pooled quantity, and metric → the `harness.probes.statistics.dense` statistic that
    # recomputes the metric from them (so the site can resample it). The run reports the statistic over all rows.
    auxiliary: Callable[..., dict[str, np.ndarray]] | None = None
    statistics: Mapping[str, str] = field(default_factory=dict)
    # (pred, target, valid, num_outputs) → (per-image columns, auxiliary columns) in one pass, for a task whose two
    # share their work (keypoints: one peak search and matching serve both); None: `per_image` and `auxiliary`
    both: Callable[..., tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] | None = None

    def columns(self, pred: np.ndarray, target: np.ndarray, valid: np.ndarray, num_outputs: int
                ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """A batch's per-image score columns and auxiliary columns."""
        if self.both is not None:
            return self.both(pred, target, valid, num_outputs)
        auxiliary = {} if self.auxiliary is None else self.auxiliary(pred, target, valid, num_outputs)
        return self.per_image(pred, target, valid, num_outputs), auxiliary


# a probe whose parameters choose between tasks (normals' loss) registers a choice: params → task
TaskChoice: TypeAlias = Callable[[dict[str, Any]], DenseTask]


@dataclass(frozen=True)
class Prior:
    """A head that starts at the prior spends its epochs on what the features add, not on finding the
    mean: without it a linear head on 1,280 standardised channels needed most of 30 epochs to reach the
    mean log-depth, and its record read as "the features know no depth"."""

    statistic: Callable[[torch.Tensor, torch.Tensor, int], np.ndarray]  # one batch → additive sums
    bias: Callable[[np.ndarray], np.ndarray]


def _valid_mean_sums(values: torch.Tensor, valid: torch.Tensor) -> np.ndarray:
    """[Σ value per channel over valid cells..., count of valid cells]; values (B, C, S, S), valid (B, S, S)."""
    mask = valid[:, None].to(torch.float64)
    return np.append((values.double() * mask).sum(dim=(0, 2, 3)).numpy(), float(mask.sum()))


def _mean(sums: np.ndarray) -> np.ndarray:
    return sums[:-1] / max(sums[-1], 1.0)


def _class_counts(target: torch.Tensor, valid: torch.Tensor, k: int) -> np.ndarray:
    return torch.bincount(target[valid].reshape(-1), minlength=k)[:k].double().numpy()


MEAN_LOG_DEPTH = Prior(lambda t, v, k: _valid_mean_sums(torch.log(t.clamp_min(1e-6))[:, None], v), _mean)
MEAN_CHANNELS = Prior(lambda t, v, k: _valid_mean_sums(t, v), _mean)  # each channel of a (C, S, S) target
MEAN_VALUE = Prior(lambda t, v, k: _valid_mean_sums(t[:, None], v), _mean)
LOGIT_OF_MEAN = Prior(lambda t, v, k: _valid_mean_sums(t[:, None].float(), v), lambda s: logit(_mean(s)))
LOG_CLASS_FREQUENCY = Prior(_class_counts, lambda c: np.log((c + 1.0) / (c.sum() + len(c))))  # add-one


def _prior_bias(task: DenseTask, stream: DenseStream, out_channels: int) -> np.ndarray | None:
    if task.prior is None:
        return None
    sums = None
    for batch in stream.batches():
        part = task.prior.statistic(batch.target, batch.valid, out_channels)
        sums = part if sums is None else sums + part
    return task.prior.bias(sums).astype(np.float32)


class _PooledIoU:
    def __init__(self) -> None:
        self.inter = self.union = 0

    def update(self, pred, target, valid) -> None:
        inter, union = M.binary_counts(pred, target)
        self.inter, self.union = self.inter + inter, self.union + union

    def result(self) -> dict[str, float]:
        return {"iou_pooled": self.inter / self.union if self.union else 1.0}


def _pearson_columns(pred: np.ndarray, target: np.ndarray, valid: np.ndarray, num_outputs: int
                     ) -> dict[str, np.ndarray]:
    return S.pearson_columns(pred, target)  # every pixel: the regression maps mask nothing


def _depth_loss(logits, target, valid):
    log_gt = torch.log(target.clamp_min(1e-6))
    return (logits[:, 0] - log_gt).abs()[valid].mean()


def _numpy(x: torch.Tensor) -> np.ndarray:
    # the one place a prediction leaves its device: the activation ran there, the metrics run on NumPy
    return x.detach().cpu().numpy()


DEPTH = DenseTask(
    "depth", T.encode_depth, lambda m: 1, _depth_loss,
    lambda z: _numpy(torch.exp(z[:, 0])), lambda p, t, v, k: M.depth_per_image(p, t, v), prior=MEAN_LOG_DEPTH)
GENERIC = DenseTask(
    "foreground", T.encode_labels, lambda m: 1,
    lambda z, t, v: F.binary_cross_entropy_with_logits(z[:, 0], t.float()),
    lambda z: _numpy(z[:, 0] > 0), lambda p, t, v, k: M.binary_per_image(p, t), lambda m: _PooledIoU(),
    LOGIT_OF_MEAN)
SEMANTIC = DenseTask(
    "semantic", T.encode_labels, lambda m: len(m.classes),
    lambda z, t, v: F.cross_entropy(z, torch.where(v, t, -100), ignore_index=-100),
    lambda z: _numpy(z.argmax(dim=1)), lambda p, t, v, k: M.semantic_per_image(p, t, k, v),
    prior=LOG_CLASS_FREQUENCY, auxiliary=lambda p, t, v, k: S.class_count_columns(M.confusion_matrices(p, t, k, v)),
    statistics=S.SEMANTIC_STATISTICS)
EDGE = DenseTask(
    ("texture_edges", "edge"),  # the scenes' painted-texture edges; BSDS500's mean human boundaries
    T.encode_edge_magnitude, lambda m: 1, lambda z, t, v: F.mse_loss(z[:, 0], t),
    lambda z: _numpy(z[:, 0]), lambda p, t, v, k: M.regression_per_image(p, t), prior=MEAN_VALUE,
    auxiliary=_pearson_columns, statistics=S.EDGE_STATISTICS)
def _keypoint_columns(pred: np.ndarray, target: np.ndarray, valid: np.ndarray, num_outputs: int
                      ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The heatmap's regression columns and Pearson sums beside its keypoints' matches, the peaks searched once."""
    scores, matches = keypoint_columns(pred, target)
    return (M.regression_per_image(pred, target) | scores,
            _pearson_columns(pred, target, valid, num_outputs) | matches)


KEYPOINTS = DenseTask(
    "keypoints", T.encode_keypoints, lambda m: 1, lambda z, t, v: F.mse_loss(torch.sigmoid(z[:, 0]), t),
    lambda z: _numpy(torch.sigmoid(z[:, 0])),
    lambda p, t, v, k: M.regression_per_image(p, t) | keypoint_columns(p, t)[0], prior=LOGIT_OF_MEAN,
    statistics={**S.PEARSON_STATISTICS, **KEYPOINT_STATISTICS}, both=_keypoint_columns)
OCCLUSION = DenseTask(
    "occlusion_edges", T.encode_occlusion_log1p, lambda m: 1, lambda z, t, v: F.mse_loss(z[:, 0], t),
    lambda z: _numpy(z[:, 0]), lambda p, t, v, k: M.regression_per_image(p, t), prior=MEAN_VALUE,
    auxiliary=_pearson_columns, statistics=S.EDGE_STATISTICS)


def _target_name(task: DenseTask, manifest: Manifest) -> str:
    names = (task.target,) if isinstance(task.target, str) else task.target
    available = manifest.extra.get("targets", {}).get(manifest.items[0].path, {}) if manifest.items else {}
    for name in names:
        if name in available:
            return name
    raise KeyError(f"dataset {manifest.name} has no {' or '.join(map(repr, names))} target; it has: "
                   f"{', '.join(sorted(available)) or 'none'}")


def _target_loader(task: DenseTask, manifest: Manifest, size: int):
    target_name = _target_name(task, manifest)
    ignore = manifest.extra.get("ignore_index")  # VOC's 255: object borders nobody labelled

    def load(item):
        encoded, valid = task.encode(T.load_target(manifest, item, target_name), size)
        if ignore is not None and np.issubdtype(encoded.dtype, np.integer):
            valid = valid & (encoded != ignore)
            encoded = np.where(valid, encoded, 0)  # a placeholder the loss and metrics never read
        return encoded, valid

    return load, target_name


def run_dense(task: DenseTask, inputs: ProbeInputs) -> ProbeResult:
    p: dict[str, Any] = inputs.params
    manifest, size = inputs.manifest, int(p["target_size"])
    layer_channels = p.get("layer_channels")
    load, target_name = _target_loader(task, manifest, size)
    out_channels = task.out_channels(manifest)
    trained = train_dense_head(
        manifest.split(p["train_split"]), inputs.features, load,
        lambda in_channels, bias: build_head(p["head"], in_channels, out_channels, bias), task.loss,
        batch_size=int(p["batch_size"]), size=size, epochs=int(p["epochs"]), lr=float(p["lr"]),
        weight_decay=float(p["weight_decay"]), seed=inputs.seed, layer_channels=layer_channels, device=inputs.device,
        output_bias=lambda train: _prior_bias(task, train, out_channels))
    statistics, in_channels = trained.statistics, trained.in_channels
    result = _score(task, inputs, trained.head, statistics, out_channels, load,
                    prior_bias=trained.bias if task.warn is not None else None)
    result.metrics["train_loss"] = trained.train_loss
    tensors = {f"head.{k}": v.detach().cpu().numpy().copy() for k, v in trained.head.state_dict().items()}
    tensors |= {"statistics.mean": np.asarray(statistics[0]), "statistics.std": np.asarray(statistics[1])}
    config = {"kind": p["head"], "in_channels": in_channels, "out_channels": out_channels, "target": target_name,
              "target_size": size, "layer_channels": list(layer_channels) if layer_channels else None,
              "classes": list(manifest.classes)}
    return ProbeResult(result.metrics, result.sample_ids, result.samples, result.unit, ProbeHead(tensors, config),
                       auxiliary=result.auxiliary, statistics=result.statistics, warnings=result.warnings)


def score_dense_head(task: DenseTask, inputs: ProbeInputs, saved: ProbeHead) -> ProbeResult:
    """A saved head on the eval split, its features standardised with the statistics it was trained with.
    The training run's metrics, less train_loss (nothing is trained here)."""
    config, p = saved.config, inputs.params
    size = int(config["target_size"])
    if int(p.get("target_size", size)) != size:
        raise ValueError(f"target_size: the head predicts at {size}² pixels; asked for {p['target_size']}²")
    if task.out_channels(inputs.manifest) != config["out_channels"]:
        raise ValueError(f"the head has {config['out_channels']} outputs; dataset {inputs.manifest.name} needs "
                         f"{task.out_channels(inputs.manifest)}")
    if config["classes"] and list(inputs.manifest.classes) != list(config["classes"]):
        raise ValueError(f"classes: the head predicts {config['classes']}; dataset {inputs.manifest.name} has "
                         f"{inputs.manifest.classes}")
    head = build_head(config["kind"], config["in_channels"], config["out_channels"], None)
    head.load_state_dict({k.removeprefix("head."): torch.from_numpy(np.ascontiguousarray(v))
                          for k, v in saved.tensors.items() if k.startswith("head.")})
    head = head.to(torch.device(inputs.device))  # loaded on the CPU (the file's arrays), scored on the run's device
    statistics = (saved.tensors["statistics.mean"], saved.tensors["statistics.std"])
    load, _ = _target_loader(task, inputs.manifest, size)
    layer_channels = config["layer_channels"]
    return _score(task, inputs, head.eval(), statistics, config["out_channels"], load, size, layer_channels)


def _score(task: DenseTask, inputs: ProbeInputs, head, statistics, out_channels: int, load,
           size: int | None = None, layer_channels=None, prior_bias: np.ndarray | None = None) -> ProbeResult:
    """Metrics and per-image columns of `head` on the eval split (one batch at a time): logits and activation on
    the head's device, targets and metrics on the CPU. With `prior_bias`, the prior predicted everywhere is
    scored on the same images and `task.warn` adds its warnings to the result."""
    p, manifest = inputs.params, inputs.manifest
    size = int(p["target_size"]) if size is None else size
    layer_channels = p.get("layer_channels") if layer_channels is None else layer_channels
    evaluation = DenseStream(manifest.split(p["eval_split"]), inputs.features, int(p["batch_size"]), load,
                             statistics)
    accumulator = task.accumulator(manifest) if task.accumulator else None
    ids: list[str] = []
    parts: dict[str, list[np.ndarray]] = {}
    auxiliary_parts: dict[str, list[np.ndarray]] = {}
    blind: dict[str, list[np.ndarray]] = {}
    for batch in evaluation.batches():
        logits = predict_logits(head, batch.features, size=size, layer_channels=layer_channels)
        pred, target, valid = task.activate(logits), batch.target.numpy(), batch.valid.numpy()
        scores, auxiliary_columns = task.columns(pred, target, valid, out_channels)
        for name, column in scores.items():
            parts.setdefault(name, []).append(column)
        if prior_bias is not None:
            constant = torch.from_numpy(prior_bias)[None, :, None, None].expand(len(target), -1, size, size)
            for name, column in task.per_image(task.activate(constant), target, valid, out_channels).items():
                blind.setdefault(name, []).append(column)
        if accumulator is not None:
            accumulator.update(pred, target, valid)
        for name, column in auxiliary_columns.items():
            auxiliary_parts.setdefault(name, []).append(column)
        ids += [item.path for item in batch.items]
    columns = {name: np.concatenate(chunks).astype(np.float64) for name, chunks in parts.items()}
    # an image with no valid pixels (depth, normals) has no score: it is left out, not counted as 0
    scored = np.all([np.isfinite(c) for c in columns.values()], axis=0)
    if not scored.any():
        raise ValueError("no evaluation image has a valid target pixel")
    columns = {name: column[scored] for name, column in columns.items()}
    auxiliary = {name: np.concatenate(chunks).astype(np.float64)[scored] for name, chunks in auxiliary_parts.items()}
    ids = [i for i, keep in zip(ids, scored, strict=True) if keep]
    metrics = accumulator.result() if accumulator is not None else {}
    metrics |= column_means(columns)  # the column is the truth
    # a pooled metric is its statistic over the rows kept: what check_result and the site recompute
    metrics |= {name: float(resampled.evaluate(statistic, {**columns, **auxiliary})[0])
                for name, statistic in task.statistics.items()}
    warnings = []
    if prior_bias is not None and task.warn is not None:
        prior = {name: float(np.mean(np.concatenate(chunks)[scored])) for name, chunks in blind.items()}
        warnings = task.warn(metrics, prior)
    return ProbeResult(metrics, ids, columns, unit="image", auxiliary=auxiliary, statistics=dict(task.statistics),
                       warnings=warnings)


@dataclass(frozen=True)
class DenseArrays(ArrayForm):
    """`probe.evaluate` on arrays: (N, C, h, w) features and (N, H, W[, 3]) raw targets, saved as .npy under the
    task's `target` name where a dense probe reads targets; `classes`: the targets are class indices, named
    0..K-1 unless given."""

    target: str
    classes: bool = False

    def manifest(self, features, targets, classes, prepared):
        from harness.datasets.dense_targets import save_npy

        items, rows = rows_of(features, targets, labelled=False)
        entries = {}
        for split in sorted(targets):
            for index, target in enumerate(targets[split]):
                path = f"{split}/{index:06d}"
                entries[path] = {self.target: save_npy(prepared, f"{path}/{self.target}.npy", np.asarray(target))}
        if self.classes:
            classes = class_names(classes, max(int(np.max(np.asarray(t))) for t in targets.values()))
        return Manifest(ARRAYS_DATASET, str(prepared), items, classes or [], {"source": "arrays"},
                        {"targets": entries}), rows


def _fixed(task: DenseTask, params: dict[str, Any]) -> DenseTask:
    return task


def _run_chosen(choose: TaskChoice, inputs: ProbeInputs) -> ProbeResult:
    return run_dense(choose(inputs.params), inputs)


def _score_chosen(choose: TaskChoice, inputs: ProbeInputs, saved: ProbeHead) -> ProbeResult:
    return score_dense_head(choose(inputs.params), inputs, saved)


def register_dense_probe(name: str, level: str, protocol: str, headline: str, task: DenseTask | TaskChoice,
                         lower: tuple[str, ...] = (), classes: bool = False,
                         params: type[DenseParams] = DenseParams) -> ProbeSpec:
    """Register `task` (or a choice of task by the run's parameters, validated by `params`) as a probe run by
    `run_dense`; `lower`: metrics where lower is better. Tasks defined in their own modules (normals,
    orientation, intrinsic) register through this too, and their stages depend on that module."""
    choose = partial(_fixed, task) if isinstance(task, DenseTask) else task
    # on arrays, targets are written as the first target name the task reads; `classes`: they are class indices
    default = choose({})
    target = default.target if isinstance(default.target, str) else default.target[0]
    spec = ProbeSpec(
        name=name, level=level, protocol=protocol, feature_mode="dense", headline=headline,
        run=partial(_run_chosen, choose), params=params, lower_is_better=frozenset({"train_loss", *lower}),
        fit="squash", fewshot_unit="images", score_head=partial(_score_chosen, choose), uses_device=True,
        arrays=DenseArrays(target, classes), folder_layout="dense_folder",
        # the spec declares each statistic's base name; the result names it with its argument (keypoint_ratio:…)
        statistics={name: resampled.base_name(statistic) for name, statistic in default.statistics.items()})
    return register_probe(spec, module=sys._getframe(1).f_globals["__name__"])


DEPTH_PROBE = register_dense_probe("depth", "mid", "probe3d-depth/v2", "delta1", DEPTH, ("abs_rel", "rmse"))
GENERIC_SEGMENTATION_PROBE = register_dense_probe("generic_segmentation", "mid", "dense-binary-segmentation/v2",
                                                  "iou", GENERIC)
SEMANTIC_SEGMENTATION_PROBE = register_dense_probe("semantic_segmentation", "high", "dense-semantic-segmentation/v2",
                                                   "miou", SEMANTIC, classes=True)
EDGE_PROBE = register_dense_probe("edge", "low", "dense-edge-regression/v2", "pearson", EDGE, ("rmse", "mae"))
KEYPOINTS_PROBE = register_dense_probe("keypoints2d", "low", "dense-keypoint-heatmap/v2", "pearson", KEYPOINTS,
                                       ("rmse", "mae"))
OCCLUSION_PROBE = register_dense_probe("occlusion_edge", "mid", "dense-occlusion-edge-log1p/v2", "pearson",
                                       OCCLUSION, ("rmse", "mae"))
