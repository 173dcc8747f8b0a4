"""Your own data as a dataset spec: what `data=PATH` (CLI) and `harness.run(..., dataset=PATH)` resolve to.

A dataset argument is one of:
- a name from params.yaml (`fashion_mnist`);
- a spec dict with a `kind` (and optionally a `name`), used as given;
- a folder, in the layout the task's probe declares (`ProbeSpec.folder_layout`):
  - labelled tasks (classification, retrieval, finetune_classification): an `image_folder`:
    `<split>/<class>/<image>` as it is, or `<class>/<image>` split per class in content-hash order, half to
    train and half to val;
  - similarity: a NIGHTS-style 2AFC folder (`data.csv`, `ref/`, `distort/`);
  - dense tasks: a `dense_folder` (`images/`, one folder per target, split lists `<split>.txt` in `stems`);
  - detection: a VOC-style folder (`JPEGImages/`, `Annotations/`, split lists in `stems`);
  - anomaly detection: an MVTec AD-style folder (`train/good/`, `test/good/`, `test/<defect_type>/`, optionally
    `ground_truth/<defect_type>/<stem>_mask.png`).

`limit` keeps the first N of each class in each split (labelled folders; for anomaly folders, of train/good, test/good
and each defect type), N triplets per split (similarity), or N stems per split list (dense and detection): the unit
a task's data counts in.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.core.config import ConfigError, Params

HALVES = {"train": 0.5, "val": 0.5}  # the split of a <class>/<image> folder
# What each `ProbeSpec.folder_layout` expects of a folder (`data=DIR`): the refusals below and `help TASK` say it.
LAYOUTS = {
    "class_folders": "class folders: <split>/<class>/<image>, or <class>/<image> (split in halves per class)",
    "nights": "a NIGHTS-style 2AFC folder: data.csv, ref/, distort/",
    "voc_detection": "a VOC-style folder: JPEGImages/<id>.jpg, Annotations/<id>.xml, ImageSets/Main/<split>.txt",
    "dense_folder": "a dense folder: images/, one folder per target, split lists <split>.txt in splits/ or stems=DIR",
    "anomaly_folder": "an MVTec AD-style folder: train/good/, test/good/, test/<defect_type>/, optionally "
                      "ground_truth/<defect_type>/<stem>_mask.png",
}


def dataset_spec(dataset: str | Path | dict[str, Any], task: str, project: Params | None, *, limit: int | None = None,
                 stems: str | Path | None = None) -> tuple[str, dict[str, Any]]:
    """(name, spec) of a dataset argument (see the module docstring)."""
    if limit is not None and limit < 1:
        raise ConfigError(f"limit={limit}: give a positive number")
    if isinstance(dataset, dict):
        spec = dict(dataset)
        name = str(spec.pop("name", spec.get("kind", "data")))
        return _distinct(name, limit, None), spec if limit is None else _limited_spec(name, spec, limit)
    text = str(dataset)
    if project is not None and text in project.datasets and not Path(text).is_dir():
        spec = dict(project.datasets[text])
        return _distinct(text, limit, None), spec if limit is None else _limited_spec(text, spec, limit)
    folder = Path(text)
    if not folder.is_dir():
        known = ", ".join(project.datasets) if project else "none (no params.yaml here)"
        raise ConfigError(f"dataset {text!r} is neither a folder nor a dataset in params.yaml ({known})")
    name = _name_of(folder)
    spec = folder_spec(folder, task, stems)
    return _distinct(name, limit, stems), spec if limit is None else _limited_spec(name, spec, limit)


def _distinct(name: str, limit: int | None, stems: str | Path | None) -> str:
    """The dataset's name with what selects a subset of it (`_limit10`, `_stems<hash of the lists>`): a run on 10
    images per class and one on the whole folder are two runs, with two records, never one file overwritten."""
    if limit is not None:
        name += f"_limit{limit}"
    if stems is not None:
        from harness.core.hashing import hash_json

        lists = Path(stems)
        files = sorted(lists.rglob("*.txt")) if lists.is_dir() else [lists]
        name += "_stems" + hash_json({f.name: f.read_text() for f in files if f.is_file()}, length=6)
    return name


def folder_spec(folder: Path, task: str, stems: str | Path | None = None) -> dict[str, Any]:
    from harness.probes import get_probe

    layout = get_probe(task).folder_layout  # each probe declares the layout its data comes in
    if layout == "class_folders":
        if stems is not None:
            raise ConfigError(f"stems= is for dense and detection data; {task} reads class folders")
        return image_folder_spec(folder)
    if layout == "nights":
        return {"kind": "nights", "root": str(folder), "splits": _split_names(folder, "data.csv")}
    if layout == "voc_detection":
        _require_layout(folder, ["JPEGImages", "Annotations"], Path(stems) if stems else folder / "ImageSets" / "Main",
                        LAYOUTS[layout])
        return {"kind": "voc2012_detection", "root": str(folder), **_stems(folder, stems)}
    if layout == "dense_folder":
        _require_layout(folder, ["images"], Path(stems) if stems else folder / "splits", LAYOUTS[layout])
        return {"kind": "dense_folder", "root": str(folder), **_stems(folder, stems)}
    if layout == "anomaly_folder":
        from harness.datasets.anomaly_folder import check_layout
        from harness.datasets.kinds import DatasetError

        if stems is not None:
            raise ConfigError(f"stems= is for dense and detection data; {task} reads {LAYOUTS[layout]}")
        try:  # refused here, before a backbone loads, rather than as a failed run from the prepare stage
            check_layout(folder, _name_of(folder))
        except DatasetError as error:
            raise ConfigError(str(error)) from None
        return {"kind": "anomaly_folder", "root": str(folder)}
    raise ConfigError(f"task {task} reads a dataset made for it (e.g. correspondence's warped photos); name one "
                      "from params.yaml instead of a folder")


def image_folder_spec(folder: Path) -> dict[str, Any]:
    """`<split>/<class>/<image>` as it is; `<class>/<image>` split in halves per class."""
    from harness.datasets.files import IMAGE_SUFFIXES

    subfolders = _visible_folders(folder)
    nested = any(q.is_dir() for p in subfolders for q in p.iterdir())
    # refused here, before a backbone loads, rather than as a failed run from the prepare stage
    classes = [q for p in subfolders for q in _visible_folders(p)] if nested else subfolders
    if not any(f.suffix.lower() in IMAGE_SUFFIXES for c in classes for f in c.iterdir() if f.is_file()):
        layout = "<split>/<class>/" if nested else "<class>/"
        raise ConfigError(f"data={folder}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in its {layout} folders; "
                          "a labelled folder is <split>/<class>/<image> or <class>/<image>")
    spec: dict[str, Any] = {"kind": "image_folder", "root": str(folder)}
    return spec if nested else {**spec, "split_fractions": dict(HALVES)}


def _require_layout(folder: Path, subfolders: list[str], lists: Path, layout: str) -> None:
    """The folders a layout cannot do without, and at least one split list: checked before anything runs (the
    prepare stage checks the rest, file by file)."""
    missing = [f"{name}/" for name in subfolders if not (folder / name).is_dir()]
    if not lists.is_dir() or not any(lists.glob("*.txt")):
        missing.append(f"split lists ({lists}/<split>.txt)")
    if missing:
        raise ConfigError(f"data={folder}: no {', '.join(missing)}; the task reads {layout}")


def _visible_folders(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]


def _stems(folder: Path, stems: str | Path | None) -> dict[str, Any]:
    return {} if stems is None else {"stems": str(stems)}


def _split_names(folder: Path, csv_name: str) -> list[str]:
    import csv

    path = folder / csv_name
    if not path.is_file():
        raise ConfigError(f"{folder}: a 2AFC folder holds {csv_name} (NIGHTS layout: id, ref, left, right, votes, "
                          "split)")
    with open(path, newline="") as handle:
        return sorted({row.get("split", "test") for row in csv.DictReader(handle)})


def _limited_spec(name: str, spec: dict[str, Any], limit: int) -> dict[str, Any]:
    """The spec with its kind's limit parameter set: per class (image folders) or per split (the rest)."""
    from harness.datasets.kinds import _spec_model

    fields = _spec_model(spec["kind"]).model_fields
    for key in ("limit_per_class", "limit_per_split"):
        if key in fields:
            return {**spec, key: limit}
    raise ConfigError(f"dataset {name} (kind {spec['kind']}) takes no limit")


def _name_of(folder: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", folder.resolve().name) or "data"
    return name if name[0].isalpha() else f"data_{name}"
