"""`ade20k`: ADE20K scene parsing, the 150-class benchmark of the MIT Scene Parsing Challenge 2016 (Zhou et al.,
"Scene Parsing through ADE20K Dataset", CVPR 2017), as a dense semantic-segmentation dataset.

`root` is the `ADEChallengeData2016/` folder that ADEChallengeData2016.zip extracts to (the layout the
challenge's devkit README, CSAILVision/sceneparsing, defines):

    images/training/ADE_train_<8 digits>.jpg        20,210 images
    images/validation/ADE_val_<8 digits>.jpg        2,000 images
    annotations/training/ADE_train_<8 digits>.png   8-bit (L) maps: 0 = "other objects" (not evaluated),
    annotations/validation/ADE_val_<8 digits>.png   1..150 = the classes of objectInfo150
    objectInfo150.txt                               tab-separated Idx, Ratio, Train, Val, Name (optional)

Splits: `train` (images/training) and `val` (images/validation); the challenge's test images have no public
annotations. `limit_per_split` keeps the first N images per split, by number.

Target `semantic` (base "prepared", `dense_targets`): each map converted to `<split>/<stem>/semantic.png`, an
8-bit PNG with class k at k - 1 (0..149, `manifest.classes` order) and "other" at 255 =
`extra["ignore_index"]`, which the dense probes neither train on nor score: the challenge's own rule ("we
ignore pixels labeled with 0"), and the same shift as the common `reduce_zero_label` loaders.

Class names: the Name column of `objectInfo150.txt` (in the challenge zip) or, failing that, of
`objectInfo150.csv` (the comma-separated copy in CSAIL's semantic-segmentation-pytorch, names joined by ";"),
as written; with neither, the classes are named by their ADE index, "1".."150". `params["class_names"]` says
which file named them (the names are part of the identity, so the three give three identities).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from harness.core.hashing import sha256_file
from harness.datasets.dense_targets import PREPARED, first_n
from harness.datasets.files import write_png
from harness.datasets.kinds import DATASET_KINDS, DatasetError
from harness.datasets.manifest import Item, Manifest

ADE_NUM_CLASSES = 150
ADE_IGNORE_INDEX = 255
ADE_FOLDERS = {"train": "training", "val": "validation"}  # manifest split → the release's folder
CLASS_FILES = ("objectInfo150.txt", "objectInfo150.csv")
FIX = "extract ADEChallengeData2016.zip and point datasets.{name}.root at its ADEChallengeData2016/ folder"


def check_layout(name: str, root: str, splits: list[str] | tuple[str, ...] = ("train", "val"),
                 **_: Any) -> str | None:
    """What the folder lacks for the challenge layout, in one line naming the fix; None when complete or absent."""
    base = Path(root)
    if not base.is_dir():
        return None
    unknown = sorted(set(splits) - set(ADE_FOLDERS))
    if unknown or not splits:
        return f"dataset {name}: splits must be among train, val (images/training, images/validation); got {splits}"
    if (base / "ADEChallengeData2016" / "images").is_dir():
        return (f"dataset {name}: {base} holds ADEChallengeData2016/: set datasets.{name}.root to "
                f"{base / 'ADEChallengeData2016'}")
    needed = [base / kind / ADE_FOLDERS[split] for split in sorted(set(splits)) for kind in ("images", "annotations")]
    absent = [str(path) for path in needed if not path.is_dir()]
    if absent:
        return f"dataset {name}: {', '.join(absent)} not found: {FIX.format(name=name)}"
    return None


def read_class_names(name: str, base: Path) -> tuple[list[str], str]:
    """The 150 class names in index order and the file that named them (module docstring), or the indices."""
    for file in CLASS_FILES:
        path = base / file
        if not path.is_file():
            continue
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t" if file.endswith(".txt") else ","))
        try:
            # the release's .txt has stray spaces ("22 \t", "bed "): fields are stripped
            named = {int(row["Idx"].strip()): row["Name"].strip() for row in rows}
        except (KeyError, ValueError, AttributeError):
            raise DatasetError(f"dataset {name}: {path} needs columns Idx and Name, one row per class (as in the "
                               f"challenge release): restore it or delete it to name classes by index") from None
        if sorted(named) != list(range(1, ADE_NUM_CLASSES + 1)):
            raise DatasetError(f"dataset {name}: {path} must list classes 1..{ADE_NUM_CLASSES} once each; it lists "
                               f"{len(named)}: restore it or delete it to name classes by index")
        return [named[k] for k in range(1, ADE_NUM_CLASSES + 1)], file
    return [str(k) for k in range(1, ADE_NUM_CLASSES + 1)], "indices"


def convert_annotation(name: str, path: Path, image_size: tuple[int, int]) -> np.ndarray:
    """One challenge map → (H, W) uint8 with class k at k - 1 and "other" (0) at ADE_IGNORE_INDEX."""
    with Image.open(path) as label:
        if label.mode not in ("L", "P"):
            raise DatasetError(f"dataset {name}: {path} is mode {label.mode}; the challenge's maps are 8-bit class "
                               "indices (L): re-extract ADEChallengeData2016.zip")
        if label.size != image_size:
            raise DatasetError(f"dataset {name}: {path} is {label.size[0]}×{label.size[1]}, its image "
                               f"{image_size[0]}×{image_size[1]}: re-extract ADEChallengeData2016.zip")
        raw = np.asarray(label)
    if int(raw.max(initial=0)) > ADE_NUM_CLASSES:
        raise DatasetError(f"dataset {name}: {path} holds class {int(raw.max())}; the challenge has "
                           f"0..{ADE_NUM_CLASSES}: re-extract ADEChallengeData2016.zip (the full ADE20K release's "
                           "maps are another format)")
    shifted = raw.astype(np.int16) - 1
    return np.where(raw == 0, ADE_IGNORE_INDEX, shifted).astype(np.uint8)


@DATASET_KINDS.register("ade20k")
def prepare_ade20k(
    name: str, out_dir: Path, root: str, splits: list[str] | tuple[str, ...] = ("train", "val"),
    limit_per_split: int | None = None,
) -> Manifest:
    """Index the challenge's images and write each one's converted `semantic` target (module docstring)."""
    base, out_dir = Path(root), Path(out_dir)
    if not base.is_dir():
        raise DatasetError(f"dataset {name}: folder {base} not found (set datasets.{name}.root to "
                           "ADEChallengeData2016/)")
    problem = check_layout(name, root, splits)
    if problem:
        raise DatasetError(problem)
    classes, named_by = read_class_names(name, base)
    chosen = {}
    for split in sorted(set(splits)):  # a missing map is refused before any map is converted
        folder = ADE_FOLDERS[split]
        stems = [p.stem for p in (base / "images" / folder).iterdir() if p.suffix == ".jpg"]  # the release's suffix
        stems = first_n(stems, limit_per_split)
        unlabelled = [s for s in stems if not (base / "annotations" / folder / f"{s}.png").is_file()]
        if unlabelled:
            raise DatasetError(f"dataset {name}: {len(unlabelled)} image(s) in images/{folder} have no "
                               f"annotations/{folder}/<stem>.png, e.g. {unlabelled[0]}: {FIX.format(name=name)}")
        chosen[split] = stems
    items, targets = [], {}
    for split, stems in chosen.items():
        folder = ADE_FOLDERS[split]
        for stem in stems:
            rel = f"images/{folder}/{stem}.jpg"
            with Image.open(base / rel) as image:
                size = image.size
            semantic = convert_annotation(name, base / "annotations" / folder / f"{stem}.png", size)
            target_rel = f"{split}/{stem}/semantic.png"
            targets[rel] = {"semantic": {"path": target_rel, "sha256": write_png(out_dir / target_rel, semantic),
                                         "base": PREPARED}}
            items.append(Item(rel, sha256_file(base / rel), split))
    params = {"splits": sorted(set(splits)), "limit_per_split": limit_per_split, "class_names": named_by,
              "label_encoding": "class k at k - 1, 0 (other) at 255",
              "source": "ADE20K SceneParsing / ADEChallengeData2016 (Zhou et al., CVPR 2017), 150 classes"}
    return Manifest(name, root, items, classes, params, {"targets": targets, "ignore_index": ADE_IGNORE_INDEX})
