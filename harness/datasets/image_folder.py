"""An image folder of your own: `root/<split>/<class>/<img>`, or `root/<class>/<img>` split per class by content
hash (`per_class`, e.g. CIFAR-10's test JPEGs). The folder is indexed, not copied.

A file that is not an image, a truncated one, or pixels with no 8-bit reading (`harness.datasets.decode`) stop
the extract stage with an error naming the file. With `on_bad_image: skip`, every indexed image is decoded here
instead, and the bad ones are left out and counted in the manifest's params (so the record's dataset says how
many were skipped and which). A class with no usable image
would count as a class nobody can predict (lowering macro-F1 without a word), and in the `per_class` layout a
class with fewer images than there are splits leaves a split without it: such a class is refused, naming its
folder and files, or skipped and counted the same way. (In the split/class layout a class may be absent from a
split, a rare class; the classification probe refuses to evaluate a class it has no training image of.)

`split_fractions` splits a class-only layout by fraction instead of counts (`{train: 0.5, val: 0.5}`: each class's
images in content-hash order, the first half to train; every split gets at least one image of a class that has
enough). `limit_per_class` keeps the first N images of each class in each split (content-hash order, the one
`per_class` uses), for a quick run on a large folder.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal

from harness.core.hashing import sha256_file
from harness.datasets.decode import ImageDecodeError, decode_rgb
from harness.datasets.files import IMAGE_SUFFIXES, UNREAD_SUFFIXES
from harness.datasets.kinds import DATASET_KINDS, DatasetError
from harness.datasets.manifest import Item, Manifest

log = logging.getLogger(__name__)
LAYOUTS = ("root/<split>/<class>/<image> (no per_class: the splits are the folders)",
           "root/<class>/<image> with per_class: {split: images per class}")


@DATASET_KINDS.register("image_folder")
def prepare_image_folder(
    name: str, out_dir: Path, root: str, per_class: dict[str, int] | None = None, note: str = "",
    on_bad_image: Literal["error", "skip"] = "error", limit_per_class: int | None = None,
    split_fractions: dict[str, float] | None = None,
) -> Manifest:
    """Index a folder without copying it. With `per_class`, a class-only layout is split by content hash."""
    base = Path(root)
    if not base.is_dir():
        raise DatasetError(f"dataset {name}: folder {base} not found (set datasets.{name}.root)")
    if limit_per_class is not None and limit_per_class < 1:
        raise DatasetError(f"dataset {name}: limit_per_class must be at least 1; got {limit_per_class}")
    if per_class is not None and split_fractions is not None:
        raise DatasetError(f"dataset {name}: give per_class (counts) or split_fractions, not both")
    if split_fractions is not None and (not split_fractions or any(f <= 0 for f in split_fractions.values())):
        raise DatasetError(f"dataset {name}: split_fractions must be positive fractions, e.g. {{train: 0.5, val: 0.5}}")
    per_split = per_class or split_fractions
    problem = check_layout(name, root, per_class, split_fractions)
    if problem is not None:
        raise DatasetError(problem)
    if per_split is None:
        splits = [s.name for s in _folders(base)]
        classes = sorted({c.name for s in splits for c in _folders(base / s)})
        # a class may be absent from one split (a rare class with no val images): skip, don't crash
        listing = [(s, c, f) for s in splits for c in classes if (base / s / c).is_dir()
                   for f in _first(_images(base / s / c), limit_per_class)]
    else:
        splits = []
        classes = [p.name for p in _folders(base)]
        listing = []
        for class_name in classes:
            files = sorted(_images(base / class_name), key=lambda f: (sha256_file(f), f.name))
            counts = per_class or _fraction_counts(len(files), split_fractions)
            start = 0
            for split, count in sorted(counts.items()):
                taken = files[start: start + count]
                listing += [(split, class_name, f) for f in _first(taken, limit_per_class)]
                start += count
    scanned = [base / s / c for s in splits for c in classes if (base / s / c).is_dir()] if per_split is None else [
        base / c for c in classes]
    _unread(name, scanned, base)
    if not listing:
        raise DatasetError(f"dataset {name}: no images found in {base}{_layout_hint(base, per_split)}; "
                           f"layouts understood: {'; '.join(LAYOUTS)}")
    skipped: dict[str, str] = {}  # file (relative to root) → why it was left out
    skipped_classes: dict[str, int] = {}  # class → how many usable images it had (too few)
    if on_bad_image == "skip":  # otherwise extraction decodes every image and refuses a bad one, naming it
        listing = _decodable(name, base, listing, skipped)
    # per_class: every class in every split it names (else that split lacks the class); otherwise one image at all
    needed = sorted(per_split) if per_split else []
    listing, classes = _classes_with_enough_images(name, base, listing, classes, needed, on_bad_image,
                                                   skipped_classes)
    empty = sorted(set(per_split or {}) - {split for split, _, _ in listing})
    if empty:
        raise DatasetError(f"dataset {name}: split(s) {', '.join(empty)} of per_class get no image in {base}: "
                           "each class folder holds fewer images than the splits before them take")
    items = [
        Item(str(f.relative_to(base)), sha256_file(f), split, classes.index(c)) for split, c, f in listing
    ]
    params = {"layout": "split/class" if per_split is None else "class", "per_class": per_class, "note": note}
    # new options enter the params (and so the identity) only when used: existing datasets keep their identity
    if on_bad_image != "error":
        count = len(skipped) + sum(skipped_classes.values())  # every image left out, for whatever reason
        params |= {"on_bad_image": on_bad_image, "skipped": {"count": count, "files": skipped,
                                                             "classes": skipped_classes}}
    if limit_per_class is not None:
        params["limit_per_class"] = limit_per_class
    if split_fractions is not None:
        params["split_fractions"] = split_fractions
    return Manifest(name, root, items, classes, params)


def _decodable(name: str, base: Path, listing: list, skipped: dict[str, str]) -> list:
    """The listing less the files that do not decode, each recorded in `skipped` with the reason."""
    kept = []
    for split, class_name, path in listing:
        try:
            decode_rgb(path)
        except ImageDecodeError as error:
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


def _fraction_counts(total: int, fractions: dict[str, float]) -> dict[str, int]:
    """Images per split for one class: each split its rounded share, at least one while images remain, the
    last split (in name order) what is left."""
    names = sorted(fractions)
    scale = sum(fractions.values())
    counts, left = {}, total
    for name in names[:-1]:
        counts[name] = min(left, max(1, round(total * fractions[name] / scale)))
        left -= counts[name]
    counts[names[-1]] = left
    return counts


def _first(files: list[Path], limit: int | None) -> list[Path]:
    if limit is None:
        return files
    return sorted(files, key=lambda f: (sha256_file(f), f.name))[:limit]


def check_layout(name: str, root: str, per_class: dict[str, int] | None = None,
                 split_fractions: dict[str, float] | None = None, **_: Any) -> str | None:
    """Why the folder cannot give a dataset in the layout its spec says (no image where that layout puts them,
    most often the other layout), in one line naming the fix; None when it can, or when the folder is absent
    (the grid is then skipped as lacking its data). Reads folder listings only, no image: the CLI calls it
    before any stage runs (harness.pipeline.checks.layout_problems), and prepare before it indexes."""
    base = Path(root)
    if not base.is_dir():
        return None
    per_split = per_class or split_fractions
    try:
        where = [c for s in _folders(base) for c in _folders(s)] if per_split is None else _folders(base)
        if any(_images(folder) for folder in where):
            return None
    except DatasetError as error:
        return f"dataset {name}: {error}"
    return (f"dataset {name}: no images found in {base}{_layout_hint(base, per_split)}; "
            f"layouts understood: {'; '.join(LAYOUTS)}")


def folder_splits(root: str, per_class: dict[str, int] | None = None,
                  split_fractions: dict[str, float] | None = None, **_: Any) -> list[str] | None:
    """The splits a <split>/<class>/<image> folder gives (its split folders), from a folder listing; None for the
    class-only layout (its spec names the splits) or a folder that is not here."""
    base = Path(root)
    if per_class is not None or split_fractions is not None or not base.is_dir():
        return None
    try:
        return [s.name for s in _folders(base)] or None
    except (DatasetError, OSError):  # check_layout says what is wrong with the folder
        return None


def _layout_hint(base: Path, per_class: dict[str, int] | dict[str, float] | None) -> str:
    """Why a folder gave no images: most often the other layout than the spec says."""
    nested = any(_images(c) for s in _folders(base) for c in _folders(s))
    flat = any(_images(c) for c in _folders(base))
    if per_class is not None and nested:
        return " (it is laid out as <split>/<class>/<image>: drop per_class)"
    if per_class is None and flat:
        return " (it is laid out as <class>/<image>: add per_class: {train: N, val: M})"
    return ""


def _folders(folder: Path) -> list[Path]:
    return sorted(p for p in _entries(folder) if p.is_dir() and not p.name.startswith("."))


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in _entries(folder) if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def _entries(folder: Path) -> list[Path]:
    """A folder's entries, symbolic links followed (a linked class folder or image counts as if it were there);
    a link that leads nowhere is refused, naming it, rather than dropped: dropping it would lose a class or
    split and could make the folder read as the other layout."""
    entries = list(folder.iterdir())
    for path in entries:
        if path.is_symlink() and not path.exists():
            raise DatasetError(f"{path} is a symbolic link to {os.readlink(path)}, which does not exist: "
                               "fix or remove the link")
    return entries


def _unread(name: str, folders: list[Path], base: Path) -> None:
    """Say once which image files the folder holds that it does not read (GIF, TIFF), with a count and one
    example, so a dataset smaller than its folder is never a silent surprise."""
    unread = sorted(p for folder in folders for p in _entries(folder)
                    if p.is_file() and p.suffix.lower() in UNREAD_SUFFIXES)
    if unread:
        log.warning("dataset %s: left out %d GIF/TIFF file(s) image folders do not read (e.g. %s): convert them to "
                    "PNG to include them", name, len(unread), unread[0].relative_to(base).as_posix())
