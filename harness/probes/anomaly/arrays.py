"""The anomaly probes on in-memory arrays (`probe.evaluate`, `harness.probes.arrays`): dense features of the
training and evaluation splits, each evaluation image's defect type and optionally its mask, made into what an
anomaly folder's manifest gives the probe (`harness.datasets.anomaly_folder`), so the numbers are the ones a run on
that folder gives for the same features.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from harness.datasets.anomaly_folder import GOOD, MASK
from harness.datasets.dense_targets import natural_key, save_npy
from harness.datasets.manifest import Manifest
from harness.probes.anomaly.detector import GOOD as GOOD_LABEL  # its class index; GOOD: its name
from harness.probes.anomaly.detector import AnomalyParams
from harness.probes.arrays import ARRAYS_DATASET, ArrayForm, rows_of
from harness.probes.statistics.anomaly import DEFECT_TYPE

TARGET_KEYS = (DEFECT_TYPE, MASK)  # a split's targets as a mapping: its defect types and their masks
_TYPE_NAME = re.compile(r"^[A-Za-z0-9_]+$")  # as an anomaly folder's defect type folders: they name metrics
Targets = tuple[dict[str, np.ndarray], dict[str, np.ndarray | None], list[str]]


class AnomalyArrays(ArrayForm):
    """`probe.evaluate` on arrays: features (N, C, h, w) dense maps of exactly the two splits the probe's
    parameters name (`train_split`, `eval_split`: "train" and "test" unless given). Targets, per split: `None`
    (every image defect-free: what the training split holds), its images' defect types (N,) ("good" for a
    defect-free image, else the type's name; or int labels, 0 = good, named by `classes`, whose first is "good"),
    or {"defect_type": (N,) those types, "mask": (N, H, W) their masks} (> 0 = defect; a good image's is empty).
    Without masks the pixel metrics are absent, as on a dataset without masks. Types named by str are numbered as
    an anomaly folder numbers its folders: good, then the types in natural order.

    Refused before any work, in one line naming the fix: other splits than those two, features that are not
    (N, C, h, w) or differ in C, a defective image in the training split, targets or masks whose shape does not
    match the rows, a mask marking defect pixels on a good image, and labels `classes` does not name."""

    def check(self, features, targets, classes, params):
        p = AnomalyParams(**params)
        splits = {p.train_split, p.eval_split}
        if set(features) != splits:
            raise ValueError(f"anomaly arrays hold the splits {p.train_split!r} (defect-free training images) and "
                             f"{p.eval_split!r} (test images), no other; got {sorted(features)}: rename them, or "
                             "pass train_split= and eval_split=")
        labels, masks, _ = defect_targets(features, targets, classes)
        channels = {split: np.shape(features[split])[1] for split in sorted(features)}
        if len(set(channels.values())) > 1:
            raise ValueError(f"the splits' features must share one channel count C (the same layers); got {channels}")
        defective = np.flatnonzero(labels[p.train_split] != GOOD_LABEL)
        if len(defective):
            raise ValueError(f"targets[{p.train_split!r}] must be None or all {GOOD!r} (0): the training split holds "
                             f"defect-free images only ({len(defective)} defective row{'s' * (len(defective) > 1)}, "
                             f"e.g. row {int(defective[0])}); move them to {p.eval_split!r}")
        for split, split_masks in masks.items():
            if split_masks is None:
                continue
            marks = (split_masks > 0).reshape(len(split_masks), -1).any(axis=1)
            marked = np.flatnonzero(marks & (labels[split] == GOOD_LABEL))
            if len(marked):
                raise ValueError(f"targets[{split!r}][{MASK!r}]: row {int(marked[0])} is a good image but its mask "
                                 "marks defect pixels: give it an empty mask, or its defect type")

    def manifest(self, features, targets, classes, prepared):
        labels, masks, classes = defect_targets(features, targets, classes)
        items, rows = rows_of(features, labels, labelled=True)
        entries = {}
        for split in sorted(masks):
            if masks[split] is None:
                continue
            for index in np.flatnonzero(labels[split] != GOOD_LABEL):  # a good image has no mask file, as in a folder
                path = f"{split}/{index:06d}"
                mask = (np.asarray(masks[split][index]) > 0).astype(np.uint8)
                entries[path] = {MASK: save_npy(prepared, f"masks/{path}.npy", mask)}
        return Manifest(ARRAYS_DATASET, str(prepared), items, classes, {"source": "arrays"},
                        {"targets": entries}), rows


def defect_targets(features: Mapping[str, np.ndarray], targets: Mapping[str, Any], classes: list[str] | None
                   ) -> Targets:
    """Each split's int labels (0 = good) and masks (None: not given), and the class names (`AnomalyArrays`)."""
    types, masks, rows = {}, {}, {}
    for split in sorted(features):
        shape = np.shape(features[split])
        if len(shape) != 4:
            raise ValueError(f"features[{split!r}] must be (N, C, h, w) dense maps, one per image; got shape {shape}")
        rows[split] = shape[0]
        types[split], masks[split] = _parts(split, targets[split], shape[0])
    named = {split: values for split, values in types.items() if values is not None and values.dtype.kind in "USO"}
    labels = {split: _integers(split, values, rows[split]) for split, values in types.items() if split not in named}
    if named:  # by name; a split given by number beside them must be all good
        classes = _named_classes(named, classes)
        index = {name: label for label, name in enumerate(classes)}
        for split, split_labels in labels.items():
            if split_labels.any():
                raise ValueError(f"targets[{split!r}]: give defect types by name (str) in every split, or int labels "
                                 "in every split")
        labels |= {split: np.array([index[name] for name in values.tolist()], dtype=np.int64)
                   for split, values in named.items()}
        return labels, masks, classes
    top = max((int(split_labels.max(initial=0)) for split_labels in labels.values()), default=0)
    if classes is None:
        classes = [GOOD, *(str(label) for label in range(1, top + 1))]
    _check_classes(classes)
    if top >= len(classes):
        raise ValueError(f"label {top} has no class among the {len(classes)} given: name every label in classes=")
    return labels, masks, list(classes)


def _parts(split: str, target: Any, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """A split's defect types (None: all good) and masks (None: not given), their shapes checked."""
    if target is None:
        return None, None
    if isinstance(target, Mapping):
        if set(target) - set(TARGET_KEYS) or DEFECT_TYPE not in target:
            raise ValueError(f"targets[{split!r}] as a mapping holds {DEFECT_TYPE!r} (N,) and optionally {MASK!r} "
                             f"(N, H, W); got keys {sorted(target)}")
        types, masks = np.asarray(target[DEFECT_TYPE]), target.get(MASK)
    else:
        types, masks = np.asarray(target), None
    if types.shape != (n,):
        raise ValueError(f"targets[{split!r}]: {n} feature rows need ({n},) defect types, one per image; got shape "
                         f"{types.shape}")
    if masks is not None:
        masks = np.asarray(masks)
        if masks.ndim != 3 or len(masks) != n:
            raise ValueError(f"targets[{split!r}][{MASK!r}] must be (N, H, W) masks, one per image: ({n}, H, W); got "
                             f"shape {masks.shape}")
    return types, masks


def _named_classes(named: dict[str, np.ndarray], classes: list[str] | None) -> list[str]:
    names: set[str] = set()
    for split, values in named.items():
        wrong = [value for value in values.tolist() if not isinstance(value, str)]
        if wrong:
            raise ValueError(f"targets[{split!r}]: defect types are all names (str) or all int labels; got "
                             f"{wrong[0]!r} among names")
        names.update(values.tolist())
    if classes is None:
        classes = [GOOD, *sorted(names - {GOOD}, key=natural_key)]
    _check_classes(classes)
    unknown = sorted(names - set(classes), key=natural_key)
    if unknown:
        raise ValueError(f"defect type(s) {', '.join(map(repr, unknown))} not in classes=: add them, or leave "
                         "classes out")
    return list(classes)


def _integers(split: str, values: np.ndarray | None, n: int) -> np.ndarray:
    """Int labels (0 = good) of a split given by number; None: n good images."""
    if values is None:
        return np.zeros(n, dtype=np.int64)
    exact = values.dtype.kind in "biu" or (
        values.dtype.kind == "f" and bool(np.all(np.isfinite(values) & (values == np.floor(values)))))
    if not exact or (values.size and values.min() < 0):
        raise ValueError(f"targets[{split!r}]: defect types are names (str, {GOOD!r} for a defect-free image) or int "
                         f"labels ≥ 0 (0 = good); got {values.dtype} values")
    return values.astype(np.int64)


def _check_classes(classes: list[str]) -> None:
    if not classes or classes[0] != GOOD:
        raise ValueError(f"classes must start with {GOOD!r}: label 0 is the defect-free class, as in an anomaly "
                         f"folder's manifest; got {list(classes)[:3]}")
    bad = [name for name in classes[1:] if not isinstance(name, str) or not _TYPE_NAME.match(name)]
    if bad:
        raise ValueError(f"defect type name(s) {', '.join(map(repr, bad))}: use letters, digits and underscores only "
                         "(they become metric names, auroc_<type>)")


ANOMALY_ARRAYS = AnomalyArrays()
