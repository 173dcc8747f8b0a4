"""Linear probe on frozen pooled features (protocol `linear-probe-adamw/v3`).

Features are standardised with the training split's mean and std, then a single linear layer is
trained with mini-batch AdamW and cross-entropy for a fixed number of epochs (no early stopping,
no validation-based selection, so the number is a function of the record's hyperparameters alone).
v3 trains in NumPy (`harness.probes.linear_head`), so the stage never imports torch; v2 trained the same
recipe in torch, with torch's generator for the initial weights and the data order.
Reported: top-1, top-5, class-balanced macro-F1 (BioBench's headline for long-tailed data), and the
training split's top-1 so that underfitting is visible beside the evaluation numbers.

Per-sample scores (unit "image", id = the eval item's path): `top1` and `top5`, 1.0 where the item is
correct. macro-F1 and train top-1 do not decompose over eval images and have no column.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from harness.probes.base import (
    PooledParams,
    ProbeHead,
    ProbeInputs,
    ProbeResult,
    ProbeSpec,
    floored_std,
    register_probe,
)
from harness.probes.linear_head import LinearHead, train_linear_head


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


class ClassificationParams(PooledParams):
    train_split: str = Field(min_length=1)
    eval_split: str = Field(min_length=1)
    epochs: PositiveInt
    lr: PositiveFloat
    weight_decay: NonNegativeFloat
    batch_size: PositiveInt


def run_classification(inputs: ProbeInputs) -> ProbeResult:
    p = inputs.params
    train = inputs.manifest.split(p["train_split"])
    test = inputs.manifest.split(p["eval_split"])
    x_train = inputs.stack(train).astype(np.float32)
    x_test = inputs.stack(test).astype(np.float32)
    y_train = np.array([i.label for i in train], dtype=np.int64)
    y_test = np.array([i.label for i in test], dtype=np.int64)
    check_trainable(inputs.manifest, p["train_split"], train, test)
    mean, std = x_train.mean(axis=0), floored_std(x_train.std(axis=0))
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    num_classes = len(inputs.manifest.classes)
    head = train_linear_head(
        x_train, y_train, num_classes, epochs=p["epochs"], lr=p["lr"], weight_decay=p["weight_decay"],
        batch_size=p["batch_size"], seed=inputs.seed,
    )
    samples, metrics = score_logits(head.logits(x_test), y_test, num_classes)
    metrics["train_top1"] = topk_accuracy(head.logits(x_train), y_train, 1)
    head_data = ProbeHead({"weight": head.weight.copy(), "bias": head.bias.copy(), "mean": mean, "std": std},
                          {"kind": "linear", "classes": list(inputs.manifest.classes)})
    return ProbeResult(metrics, [item.path for item in test], samples, unit="image", head=head_data)


def score_logits(logits: np.ndarray, labels: np.ndarray, num_classes: int) -> tuple[dict[str, np.ndarray], dict]:
    predictions = np.argmax(logits, axis=1)
    samples = {"top1": topk_correct(logits, labels, 1), "top5": topk_correct(logits, labels, 5)}
    metrics = {name: float(column.mean()) for name, column in samples.items()}
    metrics["macro_f1"] = macro_f1(labels, predictions, num_classes)
    return samples, metrics


def macro_f1(labels: np.ndarray, predictions: np.ndarray, num_classes: int) -> float:
    """Unweighted mean over all `num_classes` of each class's F1 = 2·TP / (support + predicted), 0 for a class
    neither present nor predicted: sklearn's f1_score(average="macro", labels=range(K), zero_division=0),
    restated because importing sklearn costs about a second of a cached stage (tests/test_probes.py compares)."""
    true_positive = np.bincount(labels[labels == predictions], minlength=num_classes).astype(np.float64)
    support = np.bincount(labels, minlength=num_classes).astype(np.float64)
    predicted = np.bincount(predictions, minlength=num_classes).astype(np.float64)
    denominator = support + predicted
    f1 = np.divide(2 * true_positive, denominator, out=np.zeros(num_classes), where=denominator > 0)
    return float(np.average(f1))


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
    samples, metrics = score_logits(logits, y_test, len(classes))
    return ProbeResult(metrics, [item.path for item in test], samples, unit="image")


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
))
