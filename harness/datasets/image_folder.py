"""An image folder of your own: `root/<split>/<class>/<img>`, or `root/<class>/<img>` split per class by content
hash (`per_class`, e.g. CIFAR-10's test JPEGs). The folder is indexed, not copied.

Every indexed image is decoded once here (`harness.datasets.decode`), so a bad file is found before any
backbone runs: a file that is not an image, a truncated one, or pixels with no 8-bit reading stop the
preparation with an error naming the file, or, with `on_bad_image: skip`, are left out and counted in the
manifest's params (so the record's dataset says how many were skipped and which). A class with no usable image
would count as a class nobody can predict (lowering macro-F1 without a word), and in the `per_class` layout a
class with fewer images than there are splits leaves a split without it: such a class is refused, naming its
folder and files, or skipped and counted the same way. (In the split/class layout a class may be absent from a
split, a rare class; the classification probe refuses to evaluate a class it has no training image of.)

`limit_per_class` keeps the first N images of each class in each split (by content hash, the order `per_class`
uses), for a quick run on a large folder.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

from harness.datasets.decode import ImageDecodeError, decode_rgb
from harness.datasets.files import IMAGE_SUFFIXES
from harness.datasets.kinds import DATASET_KINDS, DatasetError
from harness.datasets.manifest import Item, Manifest
from harness.hashing import sha256_file

log = logging.getLogger(__name__)
LAYOUTS = ("root/<split>/<class>/<image> (no per_class: the splits are the folders)",
           "root/<class>/<image> with per_class: {split: images per class}")


@DATASET_KINDS.register("image_folder")
def prepare_image_folder(
    name: str, out_dir: Path, root: str, per_class: dict[str, int] | None = None, note: str = "",
    on_bad_image: Literal["error", "skip"] = "error", limit_per_class: int | None = None,
) -> Manifest:
    """Index a folder without copying it. With `per_class`, a class-only layout is split by content hash."""
    base = Path(root)
    if not base.is_dir():
        raise DatasetError(f"dataset {name}: folder {base} not found (set datasets.{name}.root)")
    if limit_per_class is not None and limit_per_class < 1:
        raise DatasetError(f"dataset {name}: limit_per_class must be at least 1; got {limit_per_class}")
    if per_class is None:
        splits = [s.name for s in _folders(base)]
        classes = sorted({c.name for s in splits for c in _folders(base / s)})
        # a class may be absent from one split (a rare class with no val images): skip, don't crash
        listing = [(s, c, f) for s in splits for c in classes if (base / s / c).is_dir()
                   for f in _first(_images(base / s / c), limit_per_class)]
    else:
        classes = [p.name for p in _folders(base)]
        listing = []
        for class_name in classes:
            files = sorted(_images(base / class_name), key=lambda f: (sha256_file(f), f.name))
            start = 0
            for split, count in sorted(per_class.items()):
                taken = files[start: start + count]
                listing += [(split, class_name, f) for f in _first(taken, limit_per_class)]
                start += count
    if not listing:
        raise DatasetError(f"dataset {name}: no images found in {base}{_layout_hint(base, per_class)}; "
                           f"layouts understood: {'; '.join(LAYOUTS)}")
    skipped: dict[str, str] = {}  # file (relative to root) → why it was left out
    skipped_classes: dict[str, int] = {}  # class → how many usable images it had (too few)
    listing = _decodable(name, base, listing, on_bad_image, skipped)
    # per_class: every class in every split it names (else that split lacks the class); otherwise one image at all
    needed = sorted(per_class) if per_class else []
    listing, classes = _classes_with_enough_images(name, base, listing, classes, needed, on_bad_image,
                                                   skipped_classes)
    empty = sorted(set(per_class or {}) - {split for split, _, _ in listing})
    if empty:
        raise DatasetError(f"dataset {name}: split(s) {', '.join(empty)} of per_class get no image in {base}: "
                           "each class folder holds fewer images than the splits before them take")
    items = [
        Item(str(f.relative_to(base)), sha256_file(f), split, classes.index(c)) for split, c, f in listing
    ]
    params = {"layout": "split/class" if per_class is None else "class", "per_class": per_class, "note": note}
    # new options enter the params (and so the identity) only when used: existing datasets keep their identity
    if on_bad_image != "error":
        count = len(skipped) + sum(skipped_classes.values())  # every image left out, for whatever reason
        params |= {"on_bad_image": on_bad_image, "skipped": {"count": count, "files": skipped,
                                                             "classes": skipped_classes}}
    if limit_per_class is not None:
        params["limit_per_class"] = limit_per_class
    return Manifest(name, root, items, classes, params)


def _decodable(name: str, base: Path, listing: list, on_bad_image: str, skipped: dict[str, str]) -> list:
    kept = []
    for split, class_name, path in listing:
        try:
            decode_rgb(path)
        except ImageDecodeError as error:
            if on_bad_image == "error":
                raise DatasetError(f"dataset {name}: {error} (fix or remove the file, or set "
                                   f"datasets.{name}.on_bad_image: skip to leave such files out, counted)") from None
            skipped[path.relative_to(base).as_posix()] = str(error).split(": ", 1)[-1]
            continue
        kept.append((split, class_name, path))
    if skipped:
        log.warning("dataset %s: skipped %d undecodable image(s): %s", name, len(skipped), ", ".join(sorted(skipped)))
    return kept


def _classes_with_enough_images(name: str, base: Path, listing: list, classes: list[str], needed: list[str],
                                on_bad_image: str, skipped: dict[str, int]) -> tuple[list, list[str]]:
    """The listing less the classes with no image, or none in one of the `needed` splits (refused, or recorded
    in `skipped`: class → its usable images)."""
    files = {c: [f for _, cls, f in listing if cls == c] for c in classes}
    splits = {c: {split for split, cls, _ in listing if cls == c} for c in classes}
    small = {c: sorted(set(needed) - splits[c]) for c in classes if not files[c] or set(needed) - splits[c]}
    if not small:
        return listing, classes
    if on_bad_image == "error":
        problems = []
        for c, missing in sorted(small.items()):
            listed = ", ".join(f.relative_to(base).as_posix() for f in files[c])
            problems.append(f"class {c!r} has {len(files[c])} usable image(s)" + (f" ({listed})" if listed else "")
                            + (f", none for split(s) {', '.join(missing)}" if missing else ""))
        raise DatasetError(f"dataset {name}: {'; '.join(problems)} in {base}: add images, remove the class folder, "
                           f"or set datasets.{name}.on_bad_image: skip")
    for c in small:
        skipped[c] = len(files[c])
    log.warning("dataset %s: skipped %d class(es) without enough images: %s", name, len(small),
                ", ".join(sorted(small)))
    return [row for row in listing if row[1] not in small], [c for c in classes if c not in small]


def _first(files: list[Path], limit: int | None) -> list[Path]:
    if limit is None:
        return files
    return sorted(files, key=lambda f: (sha256_file(f), f.name))[:limit]


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
