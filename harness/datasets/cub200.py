"""`cub200_2011`: Caltech-UCSD Birds-200-2011 (Wah et al., Caltech technical report CNS-TR-2011-001), 200
bird species, on its official train/test split.

`root` is the `CUB_200_2011/` folder that CUB_200_2011.tgz extracts to; the list files are the ones its README
defines, whitespace-separated, one image (or class) a line:

    images.txt                  <image_id> <image_name>         image_name = <class folder>/<file>.jpg
    image_class_labels.txt      <image_id> <class_id>           class_id 1..200
    train_test_split.txt        <image_id> <is_training_image>  1 = train (5,994 images), 0 = test (5,794)
    classes.txt                 <class_id> <class_name>         001.Black_footed_Albatross ... 200.Common_Yellowthroat
    images/<class_name>/<file>.jpg

Splits: `train` and `test`, as train_test_split.txt says. Classes in class-id order, named without the
number prefix (`Black_footed_Albatross`); labels from image_class_labels.txt, and an image whose folder is not
its labelled class's is refused (the lists and the folders disagree: a damaged copy). Items are
`images/<image_name>`, hashed in place, in image-id order; `per_class` keeps the first N of each class per
split in that order. Bounding boxes, parts and attributes are not read (whole-image classification).
Research use under the dataset's terms.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.datasets.kinds import DATASET_KINDS, DatasetError
from harness.datasets.listed_images import ListedImage, check_per_class, index_listed_images, read_lines
from harness.datasets.manifest import Manifest

CUB_SPLITS = ("test", "train")
LIST_FILES = ("images.txt", "image_class_labels.txt", "train_test_split.txt", "classes.txt")
FIX = "extract CUB_200_2011.tgz and point datasets.{name}.root at its CUB_200_2011/ folder"


def check_layout(name: str, root: str, **_: Any) -> str | None:
    """What the folder lacks for CUB's layout, in one line naming the fix; None when complete or absent."""
    base = Path(root)
    if not base.is_dir():
        return None
    absent = [f for f in (*LIST_FILES, "images") if not (base / f).exists()]
    if not absent:
        return None
    if (base / "CUB_200_2011" / "images.txt").is_file():
        return f"dataset {name}: {base} holds CUB_200_2011/: set datasets.{name}.root to {base / 'CUB_200_2011'}"
    return f"dataset {name}: {', '.join(absent)} not found in {base}: {FIX.format(name=name)}"


def read_pairs(name: str, path: Path, fix: str, second_int: bool = True) -> dict[int, Any]:
    """One CUB list as {first field (an id): second field}; a line that is not `<id> <value>` is refused."""
    pairs: dict[int, Any] = {}
    for number, line in enumerate(read_lines(name, path, fix), start=1):
        fields = line.split()
        try:
            if len(fields) != 2:
                raise ValueError
            key, value = int(fields[0]), (int(fields[1]) if second_int else fields[1])
        except ValueError:
            what = "<id> <integer>" if second_int else "<id> <name>"
            raise DatasetError(f"dataset {name}: {path} line {number}: expected {what!r}, got {line!r}: "
                               f"{fix}") from None
        if key in pairs:
            raise DatasetError(f"dataset {name}: {path} line {number}: id {key} is listed twice: {fix}")
        pairs[key] = value
    return pairs


@DATASET_KINDS.register("cub200_2011")
def prepare_cub200_2011(name: str, out_dir: Path, root: str, per_class: dict[str, int] | None = None) -> Manifest:
    """Index CUB's official lists (module docstring) without copying an image."""
    base, fix = Path(root), FIX.format(name=name)
    if not base.is_dir():
        raise DatasetError(f"dataset {name}: folder {base} not found (set datasets.{name}.root to CUB_200_2011/)")
    problem = check_layout(name, root)
    if problem:
        raise DatasetError(problem)
    check_per_class(name, per_class, CUB_SPLITS)
    images = read_pairs(name, base / "images.txt", fix, second_int=False)
    labels = read_pairs(name, base / "image_class_labels.txt", fix)
    training = read_pairs(name, base / "train_test_split.txt", fix)
    class_names = read_pairs(name, base / "classes.txt", fix, second_int=False)
    if sorted(class_names) != list(range(1, len(class_names) + 1)):
        raise DatasetError(f"dataset {name}: {base / 'classes.txt'} must number its classes 1..{len(class_names)}: "
                           f"{fix}")
    for listed, path in ((labels, "image_class_labels.txt"), (training, "train_test_split.txt")):
        if set(listed) != set(images):
            odd = sorted(set(listed) ^ set(images))
            raise DatasetError(f"dataset {name}: {path} and images.txt list different image ids (e.g. {odd[0]}): "
                               f"{fix}")
    listing = []
    for image_id in sorted(images):
        image_name, class_id, flag = images[image_id], labels[image_id], training[image_id]
        if class_id not in class_names or flag not in (0, 1):
            raise DatasetError(f"dataset {name}: image {image_id} ({image_name}) has class {class_id} and "
                               f"is_training_image {flag}; valid: class 1..{len(class_names)}, flag 0 or 1: {fix}")
        if image_name.split("/")[0] != class_names[class_id]:
            raise DatasetError(f"dataset {name}: image {image_id} ({image_name}) is labelled "
                               f"{class_names[class_id]} but is not in that class's folder: {fix}")
        listing.append(ListedImage("train" if flag == 1 else "test", class_id - 1, f"images/{image_name}"))
    items = index_listed_images(name, base, listing, per_class, fix)
    # 001.Black_footed_Albatross → Black_footed_Albatross: the number is the class id, already the label's order
    classes = [re.sub(r"^\d+\.", "", class_names[k]) for k in sorted(class_names)]
    params = {"per_class": per_class,
              "source": "CUB-200-2011 (Wah et al., Caltech CNS-TR-2011-001), official train_test_split.txt"}
    return Manifest(name, root, items, classes, params)
