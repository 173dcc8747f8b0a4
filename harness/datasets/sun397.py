"""`sun397`: SUN397 scene classification (Xiao et al., "SUN Database: Large-scale Scene Recognition from Abbey to
Zoo", CVPR 2010), on one of its ten official train/test partitions.

`root` holds what the two official archives extract to, side by side (the layout mmpretrain's SUN397 documents;
the partition files' format is the one Partitions.zip distributes, see the SUN database's download page):

    SUN397/<letter>/<class>/sun_<id>.jpg       SUN397.tar.gz: 108,754 images in 397 classes; a class name may
    SUN397/<letter>/<class>/<sub>/sun_<id>.jpg   have two levels (`/a/apartment_building/outdoor`)
    Partitions/ClassName.txt                   Partitions.zip: the 397 classes, one a line (`/a/abbey`)
    Partitions/Training_<NN>.txt               NN = 01..10: partition NN's training images, 50 a class, one
    Partitions/Testing_<NN>.txt                  a line as a path under SUN397/ (`/a/abbey/sun_aaalbzqrimafwbiv.jpg`)

Splits: `train` (Training_NN) and `test` (Testing_NN), NN = `partition` (1 by default, as most linear-probe
papers report). Classes in ClassName.txt's order, named without the letter folder (`abbey`,
`apartment_building/outdoor`); an image's class is the folder its line names. Items are `SUN397/<line>`, hashed
in place. `per_class` subsamples each split deterministically (`listed_images`): SUN's file names are random
letter strings, so the first N of a class in list order are an arbitrary but fixed sample.

A few SUN397 files named .jpg hold other formats (mmpretrain skips them because OpenCV cannot read them); the
harness decodes by content (`harness.datasets.decode`), so they are kept, and one that does not decode stops
extraction naming the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.datasets.kinds import DATASET_KINDS, DatasetError
from harness.datasets.listed_images import ListedImage, check_per_class, index_listed_images, read_lines
from harness.datasets.manifest import Manifest

SUN397_SPLITS = ("test", "train")
PARTITIONS = range(1, 11)
LIST_NAMES = {"train": "Training", "test": "Testing"}
CLASS_LINE = re.compile(r"^/[^/\s]/[^/\s]+(/[^/\s]+)*$")  # /a/abbey, /a/apartment_building/outdoor
FIX = "extract SUN397.tar.gz and Partitions.zip into datasets.{name}.root (it holds SUN397/ and Partitions/)"


def _lists(root: Path, partition: int) -> dict[str, Path]:
    folder = root / "Partitions"
    return {"classes": folder / "ClassName.txt",
            **{split: folder / f"{LIST_NAMES[split]}_{partition:02d}.txt" for split in SUN397_SPLITS}}


def check_layout(name: str, root: str, partition: int = 1, **_: Any) -> str | None:
    """What the folder lacks for SUN397's layout, in one line naming the fix; None when complete or absent
    (an absent folder makes the grid "not here"). Folder listings only: run before any stage."""
    base = Path(root)
    if not base.is_dir():
        return None
    if partition not in PARTITIONS:
        return f"dataset {name}: partition must be 1..10 (Training_01.txt .. Training_10.txt); got {partition}"
    fix = FIX.format(name=name)
    if not (base / "SUN397").is_dir():
        inside = " (this folder looks like SUN397/ itself: point root at its parent)" if (base / "a").is_dir() else ""
        return f"dataset {name}: {base / 'SUN397'} not found{inside}: {fix}"
    absent = [str(path) for path in _lists(base, partition).values() if not path.is_file()]
    if absent:
        nested = (base / "SUN397" / "Partitions").is_dir()
        moved = " (found SUN397/Partitions: move it beside SUN397/)" if nested else ""
        return f"dataset {name}: {', '.join(absent)} not found{moved}: {fix}"
    return None


def read_class_names(name: str, path: Path, fix: str) -> list[str]:
    """ClassName.txt's classes as listed (`/a/abbey`), refused in one line when a line is not a class path."""
    lines = read_lines(name, path, fix)
    for number, line in enumerate(lines, start=1):
        if not CLASS_LINE.match(line):
            raise DatasetError(f"dataset {name}: {path} line {number}: expected a class path like /a/abbey, got "
                               f"{line!r}: {fix}")
    if len(set(lines)) != len(lines):
        raise DatasetError(f"dataset {name}: {path} lists a class twice: {fix}")
    return lines


def read_partition(name: str, path: Path, split: str, class_index: dict[str, int], fix: str) -> list[ListedImage]:
    """One Training_/Testing_ list: each line an image under SUN397/, its class the folder it is in."""
    listing = []
    for number, line in enumerate(read_lines(name, path, fix), start=1):
        folder, _, file = line.rpartition("/")
        if not line.startswith("/") or not file or folder not in class_index:
            raise DatasetError(f"dataset {name}: {path} line {number}: {line!r} is not an image of a class in "
                               f"ClassName.txt (expected /a/abbey/sun_<id>.jpg): {fix}")
        listing.append(ListedImage(split, class_index[folder], f"SUN397{line}"))
    return listing


@DATASET_KINDS.register("sun397")
def prepare_sun397(
    name: str, out_dir: Path, root: str, partition: int = 1, per_class: dict[str, int] | None = None,
) -> Manifest:
    """Index partition `partition`'s official train and test lists (module docstring)."""
    base, fix = Path(root), FIX.format(name=name)
    if not base.is_dir():
        raise DatasetError(f"dataset {name}: folder {base} not found (set datasets.{name}.root to the folder "
                           "holding SUN397/ and Partitions/)")
    problem = check_layout(name, root, partition)
    if problem:
        raise DatasetError(problem)
    check_per_class(name, per_class, SUN397_SPLITS)
    lists = _lists(base, partition)
    class_paths = read_class_names(name, lists["classes"], fix)
    class_index = {path: index for index, path in enumerate(class_paths)}
    listing = [image for split in ("train", "test")
               for image in read_partition(name, lists[split], split, class_index, fix)]
    items = index_listed_images(name, base, listing, per_class, fix)
    classes = [path[3:] for path in class_paths]  # /a/abbey → abbey: the letter folder only groups them
    params = {"partition": partition, "per_class": per_class,
              "source": "SUN397 (Xiao et al., CVPR 2010), official partition lists (Partitions.zip)"}
    return Manifest(name, root, items, classes, params)
