"""Linear, kNN and a small MLP on the same frozen pooled features (protocol `head-family-sweep/v1`).

Which head to put on a frozen backbone is a choice the probe's number silently depends on; this protocol makes
it visible. The three heads see the same standardised features (training split's mean and floored std):

- **linear**: `linear-probe-adamw/v3`'s head and recipe exactly (same seed: the same top-1 as the
  classification board for the same parameters);
- **kNN**: the majority class of the k nearest training images (`harness.probes.neighbours`, the neighbours
  `knn-class-overlap/v1` reads);
- **MLP**: one hidden layer of `hidden` ReLU units, trained with the linear head's recipe and parameters
  (`harness.probes.mlp_head`).

Per image (unit "image"): `linear_top1`, `knn_top1`, `mlp_top1` (1.0 where that head is right) and
`mlp_minus_linear` (their difference: −1, 0 or 1; its mean is the MLP's gain over the linear head, with an
interval from the paired images). The headline is the MLP's top-1. Train top-1 of the two trained heads is
recorded (no column) so that a gap from over- or underfitting shows.
"""

from __future__ import annotations

import numpy as np
from pydantic import PositiveInt

from harness.probes.arrays import LABELLED_ARRAYS
from harness.probes.base import ProbeInputs, ProbeResult, ProbeSpec, column_means, register_probe
from harness.probes.classification import LinearRecipeParams, check_trainable, standardise, topk_correct
from harness.probes.linear_head import train_linear_head
from harness.probes.mlp_head import train_mlp_head
from harness.probes.neighbours import nearest, standardised, vote


class HeadFamilyParams(LinearRecipeParams):
    k: PositiveInt
    hidden: PositiveInt


def run_head_family(inputs: ProbeInputs) -> ProbeResult:
    p = inputs.params
    train, test = inputs.manifest.split(p["train_split"]), inputs.manifest.split(p["eval_split"])
    check_trainable(inputs.manifest, p["train_split"], train, test)
    y_train = np.array([i.label for i in train], dtype=np.int64)
    y_test = np.array([i.label for i in test], dtype=np.int64)
    num_classes = len(inputs.manifest.classes)
    features_train, features_test = inputs.stack(train), inputs.stack(test)
    x_train, x_test = standardised(features_train, features_test)  # the overlap probe's float64 space, for kNN
    # the trained heads see the classification probe's float32 standardisation, as its linear head does
    x_train32, x_test32, _, _ = standardise(features_train, features_test)
    recipe = {"epochs": p["epochs"], "lr": p["lr"], "weight_decay": p["weight_decay"],
              "batch_size": p["batch_size"], "seed": inputs.seed}
    linear = train_linear_head(x_train32, y_train, num_classes, **recipe)
    mlp = train_mlp_head(x_train32, y_train, num_classes, hidden=p["hidden"], **recipe)
    knn = vote(y_train[nearest(x_train, x_test, p["k"])], num_classes)
    columns = {"linear_top1": topk_correct(linear.logits(x_test32), y_test, 1),
               "knn_top1": (knn == y_test).astype(np.float64),
               "mlp_top1": topk_correct(mlp.logits(x_test32), y_test, 1)}
    columns["mlp_minus_linear"] = columns["mlp_top1"] - columns["linear_top1"]
    metrics = column_means(columns)
    metrics["linear_train_top1"] = float(topk_correct(linear.logits(x_train32), y_train, 1).mean())
    metrics["mlp_train_top1"] = float(topk_correct(mlp.logits(x_train32), y_train, 1).mean())
    return ProbeResult(metrics, [item.path for item in test], columns, unit="image")


HEAD_FAMILY = register_probe(ProbeSpec(
    name="head_family",
    level="high",
    protocol="head-family-sweep/v1",
    feature_mode="pooled",
    headline="mlp_top1",
    run=run_head_family,
    params=HeadFamilyParams,
    fewshot_unit="images_per_class",
    arrays=LABELLED_ARRAYS,
    folder_layout="class_folders",
))
