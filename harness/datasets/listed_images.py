"""Classification datasets whose official files list each image's split and class (SUN397's partitions, CUB's
`images.txt` + `train_test_split.txt`, Stanford Cars' annotation .mat files): from that listing to manifest items.

A kind reads its list files and hands `index_listed_images` a `ListedImage` per listed image, in the list's own
order. Everything that can be checked without reading an image is checked first (every listed file exists, no
image is in two splits, `per_class` names only the kind's splits), so a bad folder is refused in one line
before the long part, hashing every image, starts. Images stay where they are: items are paths relative to
`root`, hashed, labelled with the class index (`manifest.classes` order).

`per_class: {split: N}` keeps the first N images of each class in that split, in the official list's order (a
split it does not name keeps all its images): a reproducible subsample that depends on the dataset's own image
ids, not on the bytes, so a re-encoded copy selects the same images.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.core.hashing import sha256_file
from harness.datasets.kinds import DatasetError
from harness.datasets.manifest import Item


@dataclass(frozen=True)
class ListedImage:
    split: str
    label: int  # index into the manifest's classes
    path: str  # relative to the dataset's root, POSIX separators


def check_per_class(name: str, per_class: dict[str, int] | None, splits: tuple[str, ...]) -> None:
    """Refuse a `per_class` that names a split the kind does not have, or a count below 1."""
    if per_class is None:
        return
    unknown = sorted(set(per_class) - set(splits))
    if unknown:
        raise DatasetError(f"dataset {name}: per_class names split(s) {', '.join(unknown)}; this dataset's splits "
                           f"are {', '.join(splits)} (e.g. per_class: {{{splits[0]}: 10}})")
    small = {split: n for split, n in per_class.items() if n < 1}
    if small:
        raise DatasetError(f"dataset {name}: per_class counts must be at least 1; got {small}")


def first_per_class(listing: list[ListedImage], per_class: dict[str, int] | None) -> list[ListedImage]:
    """The first `per_class[split]` images of each class in each named split, list order kept."""
    if not per_class:
        return list(listing)
    taken: dict[tuple[str, int], int] = {}
    kept = []
    for image in listing:
        limit = per_class.get(image.split)
        key = (image.split, image.label)
        if limit is not None and taken.get(key, 0) >= limit:
            continue
        taken[key] = taken.get(key, 0) + 1
        kept.append(image)
    return kept


def index_listed_images(name: str, base: Path, listing: list[ListedImage], per_class: dict[str, int] | None,
                        fix: str) -> list[Item]:
    """Items for the listed images (after `per_class`), hashed; refused before any hashing when a listed file is
    missing or an image is listed in two splits. `fix` says how to restore the files (the archive to extract)."""
    chosen = first_per_class(listing, per_class)
    owner: dict[str, str] = {}
    for image in chosen:
        if owner.setdefault(image.path, image.split) != image.split:
            raise DatasetError(f"dataset {name}: {image.path} is listed in both split {owner[image.path]!r} and "
                               f"{image.split!r}; the official lists are disjoint: {fix}")
    missing = [image.path for image in chosen if not (base / image.path).is_file()]
    if missing:
        raise DatasetError(f"dataset {name}: {len(missing)} listed image(s) not found under {base}, e.g. "
                           f"{missing[0]}: {fix}")
    order = {split: n for n, split in enumerate(sorted({image.split for image in chosen}))}
    chosen = sorted(chosen, key=lambda image: order[image.split])  # stable: list order within a split
    return [Item(image.path, sha256_file(base / image.path), image.split, image.label) for image in chosen]


def read_lines(name: str, path: Path, fix: str) -> list[str]:
    """A list file's non-blank lines, stripped; refused in one line when it is absent or not text."""
    if not path.is_file():
        raise DatasetError(f"dataset {name}: {path} not found: {fix}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DatasetError(f"dataset {name}: {path} is not a text list: {fix}") from None
    return [line.strip() for line in text.splitlines() if line.strip()]
