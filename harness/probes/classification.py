"""Linear probe on frozen pooled features (protocol `linear-probe-adamw/v3`).

Features are standardised with the training split's mean and std, then a single linear layer is
trained with mini-batch AdamW and cross-entropy for a fixed number of epochs (no early stopping,
no validation-based selection, so the number is a function of the record's hyperparameters alone).
v3 trains in NumPy (`harness.probes.linear_head`), so the stage never imports torch; v2 trained the same
recipe in torch, with torch's generator for the initial weights and the data order.
Reported: top-1, top-5, class-balanced macro-F1 (BioBench's headline for long-tailed data), and the
training split's top-1 so that underfitting is visible beside the evaluation numbers. The headline is top-1
unless the grid's parameters say `headline: macro_f1` (for class-imbalanced data).

Per-sample scores (unit "image", id = the eval item's path): `top1` and `top5`, 1.0 where the item is
correct. macro-F1 does not decompose over eval images: the file carries each image's `label` and `predicted`
class index as auxiliary columns, from which `harness.probes.statistics.classification.macro_f1` computes it
(here and in the site's bootstrap). Train top-1 has neither.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from harness.probes import resampled
from harness.probes.arrays import LABELLED_ARRAYS
from harness.probes.base import (
    PooledParams,
    ProbeHead,
    ProbeInputs,
    ProbeResult,
    ProbeSpec,
    column_means,
    floored_std,
    register_probe,
)
from harness.probes.linear_head import LinearHead, train_linear_head
from harness.probes.statistics.classification import LABEL, PREDICTED, macro_f1_name


def topk_correct(logits: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """(N,) float64: 1.0 where the label is among the k highest logits."""
    k = min(k, logits.shape[1])
    # stable argsort: ties broken by class index, the same on every machine
    top = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    return (top == labels[:, None]).any(axis=1).astype(np.float64)


def topk_accuracy(logits: np.ndarray, labels: np.ndarray, k: int) -> float:
    return float(topk_correct(logits, labels, k).mean())


def check_trainable(manifest, train_split: str, train: list, test: list) -> None:
    """Refuse to score a class the probe never saw: its eval images would count as wrong without saying why."""
    unseen = sorted({i.label for i in test} - {i.label for i in train})
    if unseen:
        first = {label: next(i.path for i in test if i.label == label) for label in unseen}
        named = "; ".join(f"class {manifest.classes[label]!r} (e.g. {first[label]})" for label in unseen)
        raise ValueError(f"dataset {manifest.name}: {named} has no image in split {train_split!r}: the probe cannot "
                         "learn it; add training images of it or remove it")


class LinearRecipeParams(PooledParams):
    """The linear head's training recipe on pooled features: what every probe that trains it declares."""

    train_split: str = Field(min_length=1)
    eval_split: str = Field(min_length=1)
    epochs: PositiveInt
    lr: PositiveFloat
    weight_decay: NonNegativeFloat
    batch_size: PositiveInt


def standardise(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Both splits in float32, minus the training split's mean and over its floored std; and that mean and std."""
    x_train, x_test = x_train.astype(np.float32), x_test.astype(np.float32)
    mean, std = x_train.mean(axis=0), floored_std(x_train.std(axis=0))
    return (x_train - mean) / std, (x_test - mean) / std, mean, std


class ClassificationParams(LinearRecipeParams):
    # What the board ranks by: top-1, or class-balanced macro-F1 for class-imbalanced data (BioBench's default),
    # where top-1 rewards predicting the frequent classes. Part of the protocol: the two never share a board.
    headline: Literal["top1", "macro_f1"] = "top1"


def run_classification(inputs: ProbeInputs) -> ProbeResult:
    p = inputs.params
    train = inputs.manifest.split(p["train_split"])
    test = inputs.manifest.split(p["eval_split"])
    y_train = np.array([i.label for i in train], dtype=np.int64)
    y_test = np.array([i.label for i in test], dtype=np.int64)
    check_trainable(inputs.manifest, p["train_split"], train, test)
    x_train, x_test, mean, std = standardise(inputs.stack(train), inputs.stack(test))
    num_classes = len(inputs.manifest.classes)
    head = train_linear_head(
        x_train, y_train, num_classes, epochs=p["epochs"], lr=p["lr"], weight_decay=p["weight_decay"],
        batch_size=p["batch_size"], seed=inputs.seed,
    )
    result = score_logits(head.logits(x_test), y_test, [item.path for item in test], num_classes)
    result.metrics["train_top1"] = topk_accuracy(head.logits(x_train), y_train, 1)
    head_data = ProbeHead({"weight": head.weight.copy(), "bias": head.bias.copy(), "mean": mean, "std": std},
                          {"kind": "linear", "classes": list(inputs.manifest.classes)})
    return ProbeResult(result.metrics, result.sample_ids, result.samples, unit="image", head=head_data,
                       auxiliary=result.auxiliary, statistics=result.statistics)


def score_logits(logits: np.ndarray, labels: np.ndarray, sample_ids: list[str], num_classes: int) -> ProbeResult:
    """top-1/top-5 per image, and macro-F1 over the dataset's classes from the images' labels and predictions
    (auxiliary columns)."""
    samples = {"top1": topk_correct(logits, labels, 1), "top5": topk_correct(logits, labels, 5)}
    auxiliary = {LABEL: labels.astype(np.float64),
                 PREDICTED: np.argmax(logits, axis=1).astype(np.float64)}
    metrics = column_means(samples)
    statistics = {"macro_f1": macro_f1_name(num_classes)}
    metrics["macro_f1"] = float(resampled.evaluate(statistics["macro_f1"], auxiliary)[0])
    return ProbeResult(metrics, sample_ids, samples, unit="image", auxiliary=auxiliary, statistics=statistics)


def score_classification_head(inputs: ProbeInputs, saved: ProbeHead) -> ProbeResult:
    """A saved head on the eval split, standardised with the statistics it was trained with; labels matched to
    its classes by name. The metrics of its training run, less train_top1 (nothing is trained here)."""
    p = inputs.params
    test = inputs.manifest.split(p["eval_split"])
    classes = list(saved.config["classes"])
    unknown = sorted({inputs.manifest.classes[i.label] for i in test} - set(classes))
    if unknown:
        raise ValueError(f"the head has no class {', '.join(map(repr, unknown))}; its classes: {', '.join(classes)}")
    y_test = np.array([classes.index(inputs.manifest.classes[i.label]) for i in test], dtype=np.int64)
    x_test = (inputs.stack(test).astype(np.float32) - saved.tensors["mean"]) / saved.tensors["std"]
    head = LinearHead(np.ascontiguousarray(saved.tensors["weight"], dtype=np.float32),
                      np.ascontiguousarray(saved.tensors["bias"], dtype=np.float32))
    logits = head.logits(x_test)  # exactly as the training run computes its eval logits, so the numbers are its own
    return score_logits(logits, y_test, [item.path for item in test], len(classes))


CLASSIFICATION = register_probe(ProbeSpec(
    name="classification",
    level="high",
    protocol="linear-probe-adamw/v3",
    feature_mode="pooled",
    headline="top1",
    run=run_classification,
    params=ClassificationParams,
    fewshot_unit="images_per_class",
    score_head=score_classification_head,
    statistics={"macro_f1": "macro_f1"},
    arrays=LABELLED_ARRAYS,
    headline_param="headline",
    folder_layout="class_folders",
))
