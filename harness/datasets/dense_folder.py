"""A dense-target folder of your own, with official split lists: what `data=PATH` gives a dense task.

    root/images/<stem>.<jpg|jpeg|png>     the images
    root/<target>/<stem>.<png|npy>        one folder per target the folder has (any of those below)
    stems/<split>.txt                     one stem a line: the official split lists (`stems`, default
                                          root/splits/); blank lines and `#` comments are skipped

Targets, converted into the prepared folder the way the dense probes read them (`dense_targets`):

| folder | file | becomes |
|---|---|---|
| depth | uint16 PNG millimetres (0 = invalid), or .npy float metres | (H, W) float32 metres, 0 = invalid |
| normals | RGB PNG, n = rgb / 127.5 − 1 ((0,0,0) = invalid), or .npy unit vectors | (H, W, 3) float32 |
| semantic | L or P PNG of class indices (255 = void) | used as stored |
| foreground | L PNG, > 0 = object | (H, W) uint8 0/1 |
| edge | L PNG, 0–255 = boundary strength, or .npy in [0, 1] | (H, W) float32 in [0, 1] |

`limit_per_split` keeps the first N stems of each split list (in list order: an official list's own order).
A stem with no image, or a target folder lacking a stem, is an error naming the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.core.hashing import sha256_file
from harness.datasets.dense_targets import ROOT, decode_normals, read_array, save_npy
from harness.datasets.kinds import DATASET_KINDS, DatasetError
from harness.datasets.manifest import Item, Manifest

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
TARGETS = ("depth", "normals", "semantic", "foreground", "edge")
VOID = 255


@DATASET_KINDS.register("dense_folder")
def prepare_dense_folder(
    name: str, out_dir: Path, root: str, stems: str | None = None, splits: list[str] | None = None,
    limit_per_split: int | None = None, classes: list[str] | None = None,
) -> Manifest:
    base, out_dir = Path(root), Path(out_dir)
    lists = Path(stems) if stems else base / "splits"
    if not (base / "images").is_dir():
        raise DatasetError(f"dataset {name}: {base / 'images'} not found (a dense folder holds images/ and one "
                           f"folder per target: {', '.join(TARGETS)})")
    if not lists.is_dir():
        raise DatasetError(f"dataset {name}: split lists folder {lists} not found (give stems=DIR holding "
                           "<split>.txt files, one stem a line)")
    available = sorted(p.stem for p in lists.glob("*.txt"))
    chosen = sorted(set(splits)) if splits else available
    missing = sorted(set(chosen) - set(available))
    if missing or not chosen:
        raise DatasetError(f"dataset {name}: no split list {', '.join(missing) or '(none)'} in {lists}; "
                           f"it has {', '.join(available) or 'none'}")
    present = [t for t in TARGETS if (base / t).is_dir()]
    if not present:
        raise DatasetError(f"dataset {name}: {base} has no target folder; expected one of {', '.join(TARGETS)}")
    items, targets, owner = [], {}, {}
    for split in chosen:
        listed = [line.split("#")[0].strip() for line in (lists / f"{split}.txt").read_text().splitlines()]
        listed = [stem for stem in listed if stem]
        for stem in listed if limit_per_split is None else listed[: int(limit_per_split)]:
            if stem in owner:
                raise DatasetError(f"dataset {name}: stem {stem} is in split lists {owner[stem]} and {split}")
            owner[stem] = split
            image = _one_of(base / "images", stem, IMAGE_SUFFIXES, name)
            rel = image.relative_to(base).as_posix()
            targets[rel] = {t: _target(base, out_dir, t, split, stem, name) for t in present}
            items.append(Item(rel, sha256_file(image), split))
    if "semantic" in present and classes is None:
        top = max(int(np.max(np.where(a == VOID, 0, a))) for a in
                  (read_array(base / targets[i.path]["semantic"]["path"]) for i in items))
        classes = [str(c) for c in range(top + 1)]
    params = {"splits": chosen, "limit_per_split": limit_per_split, "targets": present,
              "split_lists": "stems" if stems else "root/splits"}
    extra = {"targets": targets, **({"ignore_index": VOID} if "semantic" in present else {}),
             "target_sources": {t: f"your folder's {t}/ files, as given" for t in present}}
    return Manifest(name, root, items, list(classes or []), params, extra)


def _target(base: Path, out_dir: Path, kind: str, split: str, stem: str, name: str) -> dict[str, str]:
    path = _one_of(base / kind, stem, (".png", ".npy"), name)
    raw = read_array(path)
    rel = f"{split}/{stem}/{kind}.npy"
    if kind == "semantic":
        if path.suffix != ".png" or raw.ndim != 2:
            raise DatasetError(f"dataset {name}: {path}: semantic targets are L or P PNGs of class indices")
        return {"path": path.relative_to(base).as_posix(), "sha256": sha256_file(path), "base": ROOT}
    if kind == "depth":
        if path.suffix == ".png" and raw.dtype not in (np.uint16, np.int32):
            raise DatasetError(f"dataset {name}: {path}: depth PNGs are 16-bit millimetres; got {raw.dtype}")
        metres = raw.astype(np.float32) / np.float32(1000.0) if path.suffix == ".png" else raw.astype(np.float32)
        return save_npy(out_dir, rel, np.where(np.isfinite(metres) & (metres > 0), metres, 0).astype(np.float32))
    if kind == "normals":
        unit = decode_normals(raw) if path.suffix == ".png" else raw.astype(np.float32)
        return save_npy(out_dir, rel, unit)
    if kind == "foreground":
        return save_npy(out_dir, rel, (raw > 0).astype(np.uint8))
    scale = np.float32(255.0) if path.suffix == ".png" else np.float32(1.0)
    return save_npy(out_dir, rel, (raw.astype(np.float32) / scale).astype(np.float32))


def _one_of(folder: Path, stem: str, suffixes: tuple[str, ...], name: str) -> Path:
    for suffix in suffixes:
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    raise DatasetError(f"dataset {name}: {folder}/{stem}{{{','.join(suffixes)}}} not found (listed in the split "
                       "lists)")
