"""`stanford_cars`: Stanford Cars (Krause et al., "3D Object Representations for Fine-Grained Categorization",
3dRR workshop at ICCV 2013), 196 make/model/year classes, on its official train/test split.

`root` holds the original release's files (the layout torchvision's StanfordCars reads; the .mat contents are
the ones the devkit's README.txt defines):

    devkit/cars_meta.mat                  car_devkit.tgz: `class_names`, a 1×196 cell array of names
    devkit/cars_train_annos.mat           `annotations`, a 1×8144 struct array: bbox_x1, bbox_y1, bbox_x2,
                                          bbox_y2, class (1..196), fname (a file in cars_train/)
    cars_test_annos_withlabels.mat        the same for the 8,041 test images, with their class (released after
                                          the challenge; devkit/cars_test_annos.mat has no class and is not read);
                                          also found in devkit/
    cars_train/<fname>, cars_test/<fname> cars_train.tgz, cars_test.tgz: 00001.jpg ...

Splits: `train` and `test`. Classes in cars_meta.mat's order (label = class - 1). Items are
`cars_train/<fname>` and `cars_test/<fname>`, hashed in place, in annotation order; `per_class` keeps the first
N of each class per split in that order. The boxes are not read: the standard protocol classifies the whole
image.

Only this original layout is read. Since the Stanford site went offline, copies circulate in other shapes: the
Kaggle mirror nests the images (`cars_train/cars_train/`) and its file names do not all match the devkit's
.mat files, so a nested folder is refused naming the fix rather than guessed at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import scipy.io

from harness.datasets.kinds import DATASET_KINDS, DatasetError
from harness.datasets.listed_images import ListedImage, check_per_class, index_listed_images
from harness.datasets.manifest import Manifest

CARS_SPLITS = ("test", "train")
TEST_ANNOTATIONS = "cars_test_annos_withlabels.mat"
FIX = ("point datasets.{name}.root at the folder holding devkit/ (car_devkit.tgz), cars_train/, cars_test/ and "
       "cars_test_annos_withlabels.mat")


def _test_annotations(base: Path) -> Path:
    """cars_test_annos_withlabels.mat beside devkit/ (torchvision's place) or inside it."""
    inside = base / "devkit" / TEST_ANNOTATIONS
    return inside if not (base / TEST_ANNOTATIONS).is_file() and inside.is_file() else base / TEST_ANNOTATIONS


def check_layout(name: str, root: str, **_: Any) -> str | None:
    """What the folder lacks for the devkit layout, in one line naming the fix; None when complete or absent."""
    base = Path(root)
    if not base.is_dir():
        return None
    fix = FIX.format(name=name)
    for split in ("cars_train", "cars_test"):
        if (base / split / split).is_dir():
            return (f"dataset {name}: {base / split / split} is nested (the Kaggle mirror's layout): move its "
                    f"images up into {base / split}; its file names must match the devkit's .mat files")
    needed = [base / "devkit" / "cars_meta.mat", base / "devkit" / "cars_train_annos.mat", _test_annotations(base),
              base / "cars_train", base / "cars_test"]
    absent = [str(path) for path in needed if not path.exists()]
    if not absent:
        return None
    unlabelled = " (devkit/cars_test_annos.mat has no labels)" if (base / "devkit" / "cars_test_annos.mat").is_file() \
        and not _test_annotations(base).is_file() else ""
    return f"dataset {name}: {', '.join(absent)} not found{unlabelled}: {fix}"


def load_mat_variable(name: str, path: Path, variable: str, fix: str) -> np.ndarray:
    """One variable of a MATLAB v5 file as a 1-D array (squeezed, as the devkit's 1×N arrays read best)."""
    try:
        data = scipy.io.loadmat(str(path), squeeze_me=True, struct_as_record=True)
    except (ValueError, TypeError, OSError, NotImplementedError, scipy.io.matlab.MatReadError) as error:
        raise DatasetError(f"dataset {name}: {path} is not a readable MATLAB file ({error}): {fix}") from None
    if variable not in data:
        found = ", ".join(k for k in data if not k.startswith("__")) or "none"
        raise DatasetError(f"dataset {name}: {path} has no variable {variable!r} (it has {found}): {fix}")
    return np.atleast_1d(data[variable])


def read_annotations(name: str, path: Path, split: str, folder: str, num_classes: int, fix: str) -> list[ListedImage]:
    """An annotation struct array → one listed image per element: `folder/<fname>`, label `class - 1`."""
    annotations = load_mat_variable(name, path, "annotations", fix)
    fields = annotations.dtype.names or ()
    if "fname" not in fields or "class" not in fields:
        unlabelled = " (the unlabelled test list: use cars_test_annos_withlabels.mat)" if "fname" in fields else ""
        raise DatasetError(f"dataset {name}: {path}: annotations need fields fname and class; it has "
                           f"{', '.join(fields) or 'none'}{unlabelled}: {fix}")
    listing = []
    for number, record in enumerate(annotations, start=1):
        try:
            label = int(np.asarray(record["class"]).item())
        except (TypeError, ValueError):
            label = 0
        if not 1 <= label <= num_classes:
            raise DatasetError(f"dataset {name}: {path}: annotation {number} ({record['fname']}) has class "
                               f"{record['class']!r}; valid: 1..{num_classes}: {fix}")
        listing.append(ListedImage(split, label - 1, f"{folder}/{record['fname']}"))
    return listing


@DATASET_KINDS.register("stanford_cars")
def prepare_stanford_cars(name: str, out_dir: Path, root: str, per_class: dict[str, int] | None = None) -> Manifest:
    """Index the devkit's train annotations and the labelled test annotations (module docstring)."""
    base, fix = Path(root), FIX.format(name=name)
    if not base.is_dir():
        raise DatasetError(f"dataset {name}: folder {base} not found (set datasets.{name}.root to your Stanford Cars "
                           "folder)")
    problem = check_layout(name, root)
    if problem:
        raise DatasetError(problem)
    check_per_class(name, per_class, CARS_SPLITS)
    classes = [str(c).strip() for c in load_mat_variable(name, base / "devkit" / "cars_meta.mat", "class_names", fix)]
    listing = (read_annotations(name, base / "devkit" / "cars_train_annos.mat", "train", "cars_train", len(classes),
                                fix)
               + read_annotations(name, _test_annotations(base), "test", "cars_test", len(classes), fix))
    items = index_listed_images(name, base, listing, per_class, fix)
    params = {"per_class": per_class,
              "source": "Stanford Cars (Krause et al., 3dRR 2013), devkit train annotations and "
                        "cars_test_annos_withlabels.mat"}
    return Manifest(name, root, items, classes, params)
