"""Train on one dataset, evaluate on another: `train_eval_pair` prepares both and joins them into one manifest.

The probes read one manifest with a training and an evaluation split; this kind takes `train_split` of the
`train` dataset as split "train" and `eval_split` of the `eval` dataset as split "eval". Labels are joined by
class name (the evaluation classes must all be training classes: a probe cannot be scored on a class it never
saw). Items and targets are re-rooted at the folder both datasets share, and targets prepared by either
dataset stay in its prepared sub-folder ("train/", "eval/"), so nothing is copied. The identity is that of
the joined content, with both datasets' identities in the params.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.datasets.dense_targets import PREPARED, ROOT
from harness.datasets.kinds import DATASET_KINDS, DatasetError, validate_dataset_spec
from harness.datasets.manifest import Item, Manifest

SPLITS = {"train": "train", "eval": "eval"}  # the joined manifest's split of each side


@DATASET_KINDS.register("train_eval_pair")
def prepare_train_eval_pair(
    name: str, out_dir: Path, train: dict[str, Any], eval: dict[str, Any], train_split: str, eval_split: str,
) -> Manifest:
    sides = {}
    for side, spec, split in (("train", train, train_split), ("eval", eval, eval_split)):
        body = validate_dataset_spec(f"{name}.{side}", spec)
        manifest = DATASET_KINDS.get(spec["kind"])(name, Path(out_dir) / side, **body)
        items = [i for i in manifest.items if i.split == split]
        if not items:
            valid = sorted({i.split for i in manifest.items})
            raise DatasetError(f"dataset {name}: the {side} dataset has no split {split!r}; it has {', '.join(valid)}")
        sides[side] = (manifest, items, split)
    train_manifest, eval_manifest = sides["train"][0], sides["eval"][0]
    roots = {side: Path(m.root).resolve() for side, (m, _, _) in sides.items()}
    common = Path(os.path.commonpath([str(r) for r in roots.values()]))
    classes = list(train_manifest.classes)
    unseen = sorted(set(eval_manifest.classes) - set(classes))
    if unseen and {i.label for i in sides["eval"][1]} - {None}:
        raise DatasetError(f"dataset {name}: evaluation class(es) {', '.join(unseen)} are not among the training "
                           f"classes ({', '.join(classes)}): a probe cannot be scored on a class it never saw")
    items, targets, extra = [], {}, {}
    seen: set[str] = set()
    for side, (manifest, chosen, _) in sides.items():
        offset = Path(os.path.relpath(roots[side], common))
        for item in chosen:
            path = (offset / item.path).as_posix()
            if path in seen:
                raise DatasetError(f"dataset {name}: {path} is in both the training and the evaluation data")
            seen.add(path)
            label = None if item.label is None else classes.index(manifest.classes[item.label])
            items.append(Item(path, item.sha256, SPLITS[side], label))
            for target_name, entry in manifest.extra.get("targets", {}).get(item.path, {}).items():
                base = entry.get("base", ROOT)
                moved = f"{side}/{entry['path']}" if base == PREPARED else (offset / entry["path"]).as_posix()
                targets.setdefault(path, {})[target_name] = {**entry, "path": moved, "base": base}
        for key, value in manifest.extra.items():
            if key == "targets":
                continue
            if key in extra and extra[key] != value:
                raise DatasetError(f"dataset {name}: the two datasets disagree on {key!r}; join datasets of one kind")
            extra[key] = value
    if targets:
        extra["targets"] = targets
    params = {side: {"name": m.name, "identity": m.identity, "split": split, "params": m.params}
              for side, (m, _, split) in sides.items()}
    return Manifest(name, str(common), items, classes, params, extra)
