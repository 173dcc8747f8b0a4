"""An anomaly detection folder in the MVTec AD layout (dataset kind `anomaly_folder`): users' own data, and the
path every anomaly dataset is read through (`procedural_defects` writes this layout, then reads it here).

    root/train/good/<image>                       defect-free training images (nothing else under train/)
    root/test/good/<image>                        defect-free test images
    root/test/<defect_type>/<image>               defective test images, one folder per defect type
    root/ground_truth/<defect_type>/<stem>_mask.png   optional: each defective image's mask (> 0 = defect)

Items: split `train` (the good training images, label 0) and `test` (good and defective, label = the defect type's
index in `classes`, which are `good` and then the defect types in natural order). Masks are optional as a whole:
with `ground_truth/`, every defective image needs its mask, of the image's size, stored as the target `mask`
((H, W) uint8, 1 = defect) in the prepared folder (`dense_targets`, base "prepared"), so any PNG mode reads the
same; a good image's mask is all zeros and has no file. Without `ground_truth/` the pixel metrics are absent,
and the manifest's params say why (`pixel_metrics`).

A bad layout is refused in one line naming the fix before any image is read (`check_layout`, which
`harness.runs.own_data` also calls before a backbone loads). Defect type names become metric names
(`auroc_<type>`): letters, digits and underscores. `limit_per_class` keeps the first N images (natural order) of
each folder: train/good, test/good and each defect type.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from harness.core.hashing import sha256_file
from harness.datasets.dense_targets import natural_key, read_array, save_npy
from harness.datasets.files import IMAGE_SUFFIXES
from harness.datasets.kinds import DATASET_KINDS, DatasetError
from harness.datasets.manifest import Item, Manifest

GOOD = "good"
MASK = "mask"  # the target name the anomaly probes read (`manifest.extra["targets"][path]["mask"]`)
MASK_SUFFIX = "_mask.png"
LAYOUT = ("train/good/<image>, test/good/<image>, test/<defect_type>/<image>, optionally "
          "ground_truth/<defect_type>/<stem>_mask.png")
_TYPE_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def _images(folder: Path) -> list[Path]:
    files = [p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
    return sorted(files, key=lambda p: natural_key(p.name))


def _folders(folder: Path) -> list[Path]:
    return sorted((p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")),
                  key=lambda p: natural_key(p.name))


def defect_types(root: Path) -> list[str]:
    """The defect type folders under test/, in natural order (good excluded)."""
    return [p.name for p in _folders(root / "test") if p.name != GOOD]


def check_layout(root: Path, name: str = "data") -> None:
    """Refuse a folder that is not in the layout, in one line naming the fix; reads folder listings only."""
    root = Path(root)
    where = f"dataset {name} ({root})"
    if not root.is_dir():
        raise DatasetError(f"{where} is not a folder (an anomaly folder holds {LAYOUT})")
    for needed in ("train/good", "test"):
        if not (root / needed).is_dir():
            raise DatasetError(f"{where} has no {needed}/ (an anomaly folder holds {LAYOUT})")
    extra = [p.name for p in _folders(root / "train") if p.name != GOOD]
    if extra:
        raise DatasetError(f"{where}: train/ holds only good/ (defect-free images); move {', '.join(extra)} out "
                           "of it, defective images go in test/<defect_type>/")
    if not _images(root / "train" / GOOD):
        raise DatasetError(f"{where}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in train/good/")
    types = defect_types(root)
    if not (root / "test" / GOOD).is_dir() or not _images(root / "test" / GOOD):
        raise DatasetError(f"{where}: no images in test/good/: image AUROC needs defect-free test images")
    if not types or not any(_images(root / "test" / t) for t in types):
        raise DatasetError(f"{where}: no defective images: put them in test/<defect_type>/ (e.g. test/scratch/)")
    bad = [t for t in types if not _TYPE_NAME.match(t)]
    if bad:
        raise DatasetError(f"{where}: defect type folder(s) {', '.join(map(repr, bad))} in test/: rename them "
                           "with letters, digits and underscores only (they become metric names, auroc_<type>)")
    if (root / "ground_truth").is_dir():
        missing = [t for t in types if _images(root / "test" / t) and not (root / "ground_truth" / t).is_dir()]
        if missing:
            raise DatasetError(f"{where}: ground_truth/ has no folder for defect type(s) {', '.join(missing)}: add "
                               "ground_truth/<defect_type>/<stem>_mask.png for each, or remove ground_truth/ to go "
                               "without pixel metrics")


def _mask(root: Path, out_dir: Path, kind: str, image: Path, name: str) -> dict[str, str]:
    path = root / "ground_truth" / kind / f"{image.stem}{MASK_SUFFIX}"
    if not path.is_file():
        raise DatasetError(f"dataset {name}: {path} not found: every image in test/{kind}/ needs its mask when "
                           "ground_truth/ exists")
    mask = read_array(path)
    if mask.ndim == 3:  # RGB(A) masks: a defect pixel is non-zero in any channel
        mask = mask.max(axis=-1)
    with Image.open(image) as opened:
        width, height = opened.size
    if mask.shape != (height, width):
        raise DatasetError(f"dataset {name}: {path} is {mask.shape[1]}×{mask.shape[0]} px but its image is "
                           f"{width}×{height}: a mask must be its image's size")
    return save_npy(out_dir, f"masks/{kind}/{image.stem}.npy", (mask > 0).astype(np.uint8))


def read_anomaly_folder(name: str, root: Path, out_dir: Path, limit_per_class: int | None = None
                        ) -> tuple[list[Item], list[str], dict[str, Any], dict[str, Any]]:
    """(items, classes, params, extra) of a folder in the layout; masks converted into `out_dir`."""
    root, out_dir = Path(root), Path(out_dir)
    check_layout(root, name)
    types = [t for t in defect_types(root) if _images(root / "test" / t)]
    classes = [GOOD, *types]
    has_masks = (root / "ground_truth").is_dir()

    def first(images: list[Path]) -> list[Path]:
        return images if limit_per_class is None else images[: int(limit_per_class)]

    items, targets = [], {}
    for image in first(_images(root / "train" / GOOD)):
        items.append(Item(image.relative_to(root).as_posix(), sha256_file(image), "train", 0))
    for label, kind in enumerate(classes):
        for image in first(_images(root / "test" / kind)):
            rel = image.relative_to(root).as_posix()
            items.append(Item(rel, sha256_file(image), "test", label))
            if has_masks and label > 0:
                targets[rel] = {MASK: _mask(root, out_dir, kind, image, name)}
    params: dict[str, Any] = {"layout": "mvtec_ad", "limit_per_class": limit_per_class, "defect_types": types,
                              "masks": has_masks}
    if not has_masks:
        params["pixel_metrics"] = "absent: the folder has no ground_truth/ masks"
    return items, classes, params, {"targets": targets}


@DATASET_KINDS.register("anomaly_folder")
def prepare_anomaly_folder(name: str, out_dir: Path, root: str, limit_per_class: int | None = None) -> Manifest:
    if limit_per_class is not None and limit_per_class < 1:
        raise DatasetError(f"dataset {name}: limit_per_class must be at least 1; got {limit_per_class}")
    items, classes, params, extra = read_anomaly_folder(name, Path(root), Path(out_dir), limit_per_class)
    return Manifest(name, root, items, classes, params, extra)
