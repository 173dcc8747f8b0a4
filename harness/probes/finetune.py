"""Fine-tuning the last N blocks for classification (task `finetune_classification`, protocol
`finetune-last-n/v1`): opt-in, and a different measurement from a frozen probe.

Its own task and protocol, so its runs never share a board with a frozen probe's (and are never averaged with
them). The frozen prefix is cached: the extract stage stores the dense map of layer `-(N+1)` (params
`layers: [-(N+1)]`, checked against `finetune_blocks: N`), and each run recomputes only the N blocks it
trains, from a copy of the backbone's own (`Backbone.finetune_suffix`; the backbone is rebuilt from the
record's identity, and refused if it differs from the one that made the features). "Blocks" are the units
`layers` indexes (stages of a CIFAR ResNet).

Schedule (all in the record's protocol_params): AdamW, `block_lr` for the trained blocks and `lr` for a new
linear head on their pooled output, `weight_decay` on both, `epochs` over shuffled batches of `batch_size`,
the learning rate `schedule` constant or cosine-annealed to 0 over all steps; batch-norm statistics frozen
(running means and variances of the pretrained blocks, affine parameters trained): small batches of cached
maps would make batch statistics noise. No augmentation (the prefix is cached, so no pixels are seen), no early
stopping. A seeded initialisation and, on the CPU, one torch thread, as every trained probe here. Scored as
`classification` is: top1, top5 (per-image columns), macro_f1 (from the auxiliary label and predicted columns),
train_top1.

Device: the model trains and predicts on the run's device (`ProbeInputs.device`; `uses_device`). It is built on
the CPU under the seed and then moved, so it starts from the same bits everywhere; the shuffling order is drawn
on the CPU by the seeded generator (the same order on every device); each batch is gathered on the CPU and moved;
logits come back with `.cpu()` before NumPy. `finetune_step` (forward, loss, backward, step) reads nothing back
to the host, so tests drive it on the `meta` device.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from harness.backbones import create_backbone
from harness.probes.base import ProbeHead, ProbeInputs, ProbeParams, ProbeResult, ProbeSpec, register_probe
from harness.probes.classification import check_trainable, score_logits, topk_accuracy
from harness.probes.dense.streaming import to_device
from harness.probes.dense.train import cpu_threads, head_device


class FinetuneParams(ProbeParams):
    finetune_blocks: PositiveInt
    layers: list[int]  # the frozen prefix's output: [-(finetune_blocks + 1)]
    train_split: str = Field(min_length=1)
    eval_split: str = Field(min_length=1)
    epochs: PositiveInt
    lr: PositiveFloat  # the new head's
    block_lr: PositiveFloat  # the trained blocks'
    weight_decay: NonNegativeFloat
    batch_size: PositiveInt
    schedule: Literal["constant", "cosine"]

    @model_validator(mode="after")
    def _prefix_matches_blocks(self) -> FinetuneParams:
        if self.layers != [-(self.finetune_blocks + 1)]:
            raise ValueError(f"layers must be [{-(self.finetune_blocks + 1)}] (the output of the frozen prefix, "
                             f"before the last {self.finetune_blocks} block(s)); got {self.layers}")
        return self


class _Model(torch.nn.Module):
    def __init__(self, suffix: torch.nn.Module, width: int, classes: int) -> None:
        super().__init__()
        self.suffix = suffix
        self.head = torch.nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.suffix(x))


def _frozen_norms(model: torch.nn.Module) -> torch.nn.Module:
    """Train mode, but every batch norm uses (and keeps) its running statistics."""
    model.train()
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.eval()
    return model


def _suffix(inputs: ProbeInputs, blocks: int) -> torch.nn.Module:
    spec = inputs.backbone
    if spec is None:
        raise ValueError("fine-tuning needs the backbone that made the features: run it through a stage or "
                         "harness.run")
    backbone = create_backbone(spec["name"], checkpoint=spec["checkpoint"], precision=spec["precision"],
                               seed=spec["seed"])
    if backbone.identity != spec["identity"]:
        raise ValueError(f"the rebuilt {spec['name']} has identity {backbone.identity}, not {spec['identity']} of the "
                         "features: refusing to train blocks of another backbone")
    return backbone.finetune_suffix(blocks)


def _model(inputs: ProbeInputs, classes: int, sample: np.ndarray) -> _Model:
    suffix = _suffix(inputs, int(inputs.params["finetune_blocks"]))
    with torch.no_grad():
        width = suffix.eval()(torch.from_numpy(sample[None])).shape[1]
    return _Model(suffix, width, classes)


def run_finetune(inputs: ProbeInputs) -> ProbeResult:
    p = inputs.params
    train, test = inputs.manifest.split(p["train_split"]), inputs.manifest.split(p["eval_split"])
    check_trainable(inputs.manifest, p["train_split"], train, test)
    x_train = inputs.stack(train).astype(np.float32)
    y_train = np.array([i.label for i in train], dtype=np.int64)
    classes = len(inputs.manifest.classes)
    device = torch.device(inputs.device)
    with cpu_threads(device):  # on the CPU the result must not depend on the machine's core count
        torch.manual_seed(inputs.seed)
        # initialised on the CPU under the seed, then moved: the same starting bits on every device
        model = _model(inputs, classes, x_train[0]).to(device)
        _train(model, x_train, y_train, p, inputs.seed)
        model.eval()
        with torch.no_grad():
            logits_train = model(to_device(torch.from_numpy(x_train), device)).cpu().numpy()
            logits_test = _logits(model, inputs, test)
    y_test = np.array([i.label for i in test], dtype=np.int64)
    result = score_logits(logits_test, y_test, [i.path for i in test], classes)
    result.metrics["train_top1"] = topk_accuracy(logits_train, y_train, 1)
    tensors = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
    head = ProbeHead(tensors, {"kind": "finetune-last-n", "blocks": int(p["finetune_blocks"]),
                               "classes": list(inputs.manifest.classes)})
    return ProbeResult(result.metrics, result.sample_ids, result.samples, unit="image", head=head,
                       auxiliary=result.auxiliary, statistics=result.statistics)


def finetune_step(model: _Model, optimiser: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One AdamW step on a batch already on the model's device; its loss, detached, on that device (nothing is read
    back to the host)."""
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimiser.zero_grad()
    loss.backward()
    optimiser.step()
    return loss.detach()


def _train(model: _Model, x: np.ndarray, y: np.ndarray, p: dict, seed: int) -> None:
    """Train `model` in place, on the device it is on, on (x, y) given as NumPy arrays; refuse a diverged one."""
    finetune_epochs(model, x, y, p, seed)
    # as the linear head (harness.probes.linear_head): NaN weights give argmax class 0, finite chance-level metrics
    if not all(torch.isfinite(param).all() for param in model.parameters()):
        raise ValueError(f"the fine-tuned model diverged (non-finite weights after training at lr={p['lr']:g}, "
                         f"block_lr={p['block_lr']:g}): lower probes.<task>.lr or block_lr")


def finetune_epochs(model: _Model, x: np.ndarray, y: np.ndarray, p: dict, seed: int) -> None:
    """`p["epochs"]` epochs of AdamW on shuffled batches, on the model's device; reads nothing back to the host
    (so it runs on the `meta` device too)."""
    device = head_device(model)
    optimiser = torch.optim.AdamW([{"params": model.suffix.parameters(), "lr": p["block_lr"]},
                                   {"params": model.head.parameters(), "lr": p["lr"]}],
                                  weight_decay=p["weight_decay"])
    steps_per_epoch = math.ceil(len(y) / p["batch_size"])
    total = p["epochs"] * steps_per_epoch
    base = [group["lr"] for group in optimiser.param_groups]
    # a CPU generator whatever the device: the order (and with it every number) must not depend on where it trains
    generator = torch.Generator().manual_seed(seed)
    features, labels = torch.from_numpy(x), torch.from_numpy(y)  # stay on the CPU; a batch at a time moves
    step = 0
    for _ in range(p["epochs"]):
        _frozen_norms(model)
        order = torch.randperm(len(labels), generator=generator)
        for start in range(0, len(labels), p["batch_size"]):
            if p["schedule"] == "cosine":
                for group, lr in zip(optimiser.param_groups, base, strict=True):
                    group["lr"] = 0.5 * lr * (1.0 + math.cos(math.pi * step / total))
            batch = order[start: start + p["batch_size"]]
            finetune_step(model, optimiser, to_device(features[batch], device), to_device(labels[batch], device))
            step += 1


def _logits(model: _Model, inputs: ProbeInputs, items: list) -> np.ndarray:
    """`model`'s logits for `items`, a batch at a time on the model's device, as one NumPy array."""
    batch, device = int(inputs.params["batch_size"]), head_device(model)
    parts = [model(to_device(torch.from_numpy(inputs.stack(items[i: i + batch]).astype(np.float32)), device))
             .cpu().numpy() for i in range(0, len(items), batch)]
    return np.concatenate(parts)


def score_finetuned(inputs: ProbeInputs, saved: ProbeHead) -> ProbeResult:
    """A saved fine-tuned suffix + head on the eval split (its blocks rebuilt from the backbone, then loaded)."""
    p = inputs.params
    test = inputs.manifest.split(p["eval_split"])
    classes = list(saved.config["classes"])
    if list(inputs.manifest.classes) != classes:
        raise ValueError(f"classes: the head predicts {classes}; dataset {inputs.manifest.name} has "
                         f"{inputs.manifest.classes}")
    device = torch.device(inputs.device)
    with cpu_threads(device):
        model = _model(inputs, len(classes), inputs.stack(test[:1]).astype(np.float32)[0])
        model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in saved.tensors.items()})
        model = model.to(device)  # loaded on the CPU (the file's arrays), scored on the run's device
        with torch.no_grad():
            logits = _logits(model.eval(), inputs, test)
    return score_logits(logits, np.array([i.label for i in test], dtype=np.int64), [i.path for i in test],
                        len(classes))


FINETUNE = register_probe(ProbeSpec(
    name="finetune_classification",
    level="high",
    protocol="finetune-last-n/v1",
    feature_mode="dense",
    headline="top1",
    run=run_finetune,
    params=FinetuneParams,
    fewshot_unit="images_per_class",
    score_head=score_finetuned,
    uses_device=True,
    statistics={"macro_f1": "macro_f1"},
    folder_layout="class_folders",
))
