"""An image folder of your own: `root/<split>/<class>/<img>`, or `root/<class>/<img>` split per class by content
hash (`per_class`, e.g. CIFAR-10's test JPEGs). The folder is indexed, not copied."""

from __future__ import annotations

from pathlib import Path

from harness.datasets.files import IMAGE_SUFFIXES
from harness.datasets.kinds import DATASET_KINDS, DatasetError
from harness.datasets.manifest import Item, Manifest
from harness.hashing import sha256_file

LAYOUTS = ("root/<split>/<class>/<image> (no per_class: the splits are the folders)",
           "root/<class>/<image> with per_class: {split: images per class}")


@DATASET_KINDS.register("image_folder")
def prepare_image_folder(
    name: str, out_dir: Path, root: str, per_class: dict[str, int] | None = None, note: str = ""
) -> Manifest:
    """Index a folder without copying it. With `per_class`, a class-only layout is split by content hash."""
    base = Path(root)
    if not base.is_dir():
        raise DatasetError(f"dataset {name}: folder {base} not found (set datasets.{name}.root)")
    if per_class is None:
        splits = [s.name for s in _folders(base)]
        classes = sorted({c.name for s in splits for c in _folders(base / s)})
        # a class may be absent from one split (a rare class with no val images): skip, don't crash
        listing = [(s, c, f) for s in splits for c in classes if (base / s / c).is_dir() for f in _images(base / s / c)]
    else:
        classes = [p.name for p in _folders(base)]
        listing = []
        for class_name in classes:
            files = sorted(_images(base / class_name), key=lambda f: (sha256_file(f), f.name))
            start = 0
            for split, count in sorted(per_class.items()):
                listing += [(split, class_name, f) for f in files[start: start + count]]
                start += count
    if not listing:
        raise DatasetError(f"dataset {name}: no images found in {base}{_layout_hint(base, per_class)}; "
                           f"layouts understood: {'; '.join(LAYOUTS)}")
    empty = sorted(set(per_class or {}) - {split for split, _, _ in listing})
    if empty:
        raise DatasetError(f"dataset {name}: split(s) {', '.join(empty)} of per_class get no image in {base}: "
                           "each class folder holds fewer images than the splits before them take")
    items = [
        Item(str(f.relative_to(base)), sha256_file(f), split, classes.index(c)) for split, c, f in listing
    ]
    params = {"layout": "split/class" if per_class is None else "class", "per_class": per_class, "note": note}
    return Manifest(name, root, items, classes, params)


def _layout_hint(base: Path, per_class: dict[str, int] | None) -> str:
    """Why a folder gave no images: most often the other layout than the spec says."""
    nested = any(_images(c) for s in _folders(base) for c in _folders(s))
    flat = any(_images(c) for c in _folders(base))
    if per_class is not None and nested:
        return " (it is laid out as <split>/<class>/<image>: drop per_class)"
    if per_class is None and flat:
        return " (it is laid out as <class>/<image>: add per_class: {train: N, val: M})"
    return ""


def _folders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
