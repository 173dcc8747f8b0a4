"""`voc2012_detection`: PASCAL VOC 2012 object detection, read from the devkit's layout.

`root` is the devkit's `VOCdevkit/VOC2012` folder:

    ImageSets/Main/<split>.txt   the official image lists, one id per line (train 5717, val 5823, trainval)
    JPEGImages/<id>.jpg
    Annotations/<id>.xml         <size> width/height, and per <object>: name, difficult, truncated,
                                 bndbox xmin/ymin/xmax/ymax (1-based, inclusive pixel indices)

Images stay in `root` (items are `JPEGImages/<id>.jpg`, label None). Each id's objects are converted
into an `annotations` target, `<split>/<id>/annotations.json` in the prepared folder (base "prepared",
see `dense_targets`), in the procedural scenes' JSON shape:

    {"image_size": [W, H], "boxes": [{"box": [x0, y0, x1, y1], "class_id": k, "difficult": bool,
                                      "truncated": bool, "instance": n, "area": (x1 - x0) * (y1 - y0)}]}

Boxes are pixel edges, 0-based, x1/y1 exclusive: x0 = xmin - 1, y0 = ymin - 1, x1 = xmax, y1 = ymax, so
the width x1 - x0 is the devkit's xmax - xmin + 1 (the convention `harness.probes.detection` uses for
both datasets). `class_id` indexes `VOC_DETECTION_CLASSES` (the devkit's order, no background), which is
`manifest.classes`; `extra["detection_class_ids"]` lists all 20. `instance` is the object's 1-based order
in the XML; `area` is the box's pixel area (VOC has no masks for most images). A <difficult> or
<truncated> tag that is absent reads as 0, as the devkit's PASreadrecord does. `limit_per_split` keeps the
first N ids per split, digit runs compared as numbers.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from PIL import Image

from harness.core.hashing import sha256_file
from harness.datasets.dense_targets import PREPARED, first_n
from harness.datasets.files import write_bytes
from harness.datasets.kinds import DATASET_KINDS
from harness.datasets.manifest import Item, Manifest

VOC_DETECTION_CLASSES = [
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable", "dog",
    "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor",
]


def _number(text: str) -> int | float:
    """A coordinate as written: integral values stay integers (a few VOC 2012 boxes are fractional)."""
    value = float(text)
    return int(value) if value.is_integer() else value


def _flag(node: ET.Element, tag: str) -> bool:
    child = node.find(tag)
    return child is not None and child.text is not None and int(child.text.strip()) == 1


def parse_annotation(path: Path, width: int, height: int) -> dict[str, Any]:
    """One devkit XML file → the `annotations` payload (module docstring); errors name the file."""
    try:
        tree = ET.parse(path)
    except ET.ParseError as error:
        raise ValueError(f"{path}: not a VOC annotation XML ({error})") from None
    size = tree.getroot().find("size")
    if size is not None and (int(size.findtext("width", "0")), int(size.findtext("height", "0"))) != (width, height):
        raise ValueError(f"{path}: <size> {size.findtext('width')}×{size.findtext('height')} disagrees with the "
                         f"image's {width}×{height}")
    boxes = []
    for instance, node in enumerate(tree.getroot().findall("object"), start=1):
        name = (node.findtext("name") or "").strip()
        if name not in VOC_DETECTION_CLASSES:
            raise ValueError(f"{path}: object {instance} has class {name!r}; valid: {', '.join(VOC_DETECTION_CLASSES)}")
        corners = node.find("bndbox")  # the object's own box, not its parts' (<part><bndbox>)
        if corners is None:
            raise ValueError(f"{path}: object {instance} ({name}) has no <bndbox>")
        try:
            xmin, ymin, xmax, ymax = (_number(corners.findtext(tag) or "") for tag in ("xmin", "ymin", "xmax", "ymax"))
        except ValueError:
            raise ValueError(f"{path}: object {instance} ({name}) needs numeric xmin, ymin, xmax, ymax") from None
        box = [xmin - 1, ymin - 1, xmax, ymax]  # 1-based inclusive → 0-based pixel edges
        boxes.append({"box": box, "class_id": VOC_DETECTION_CLASSES.index(name), "difficult": _flag(node, "difficult"),
                      "truncated": _flag(node, "truncated"), "instance": instance,
                      "area": (box[2] - box[0]) * (box[3] - box[1])})
    return {"image_size": [width, height], "boxes": boxes}


def save_json(out_dir: Path, rel: str, payload: dict[str, Any]) -> dict[str, str]:
    """Write `payload` as sorted, indented JSON into `out_dir / rel` atomically; return the target entry."""
    text = json.dumps(payload, sort_keys=True, indent=1) + "\n"
    return {"path": rel, "sha256": write_bytes(Path(out_dir) / rel, text.encode()), "base": PREPARED}


@DATASET_KINDS.register("voc2012_detection")
def prepare_voc2012_detection(
    name: str, out_dir: Path, root: str, splits: list[str] | tuple[str, ...] = ("train", "val"),
    limit_per_split: int | None = None, stems: str | None = None,
) -> Manifest:
    """Index the official Main split lists (or the `stems` folder's `<split>.txt`, for a VOC-style folder of
    your own) and write each image's `annotations` target."""
    base, out_dir = Path(root), Path(out_dir)
    lists = Path(stems) if stems else base / "ImageSets" / "Main"
    if not lists.is_dir():
        raise FileNotFoundError(f"dataset {name}: {lists} not found (set datasets.{name}.root to VOCdevkit/VOC2012)")
    owner: dict[str, str] = {}
    items, targets = [], {}
    for split in sorted(set(splits)):
        listing = lists / f"{split}.txt"
        if not listing.is_file():
            valid = sorted(p.stem for p in lists.glob("*.txt") if "_" not in p.stem)  # not the per-class lists
            raise KeyError(f"voc2012_detection has no split list {listing}; valid: {', '.join(valid)}")
        ids = [line.split()[0] for line in listing.read_text().splitlines() if line.strip()]
        for image_id in first_n(ids, limit_per_split):
            if image_id in owner:
                raise ValueError(f"image {image_id} is in both split {owner[image_id]!r} and {split!r}; "
                                 "choose disjoint splits (e.g. train and val, not trainval)")
            owner[image_id] = split
            rel = f"JPEGImages/{image_id}.jpg"
            with Image.open(base / rel) as image:
                width, height = image.size
            payload = parse_annotation(base / "Annotations" / f"{image_id}.xml", width, height)
            targets[rel] = {"annotations": save_json(out_dir, f"{split}/{image_id}/annotations.json", payload)}
            items.append(Item(rel, sha256_file(base / rel), split))
    params = {"splits": sorted(set(splits)), "limit_per_split": limit_per_split,
              "box_convention": "0-based pixel edges: x0 = xmin - 1, x1 = xmax",
              "source": "PASCAL VOC 2012 detection (Everingham et al., IJCV 2010); Flickr image terms"}
    if stems:  # only then: the identity of datasets read from ImageSets/Main stays as it was
        params["split_lists"] = "stems"
    extra = {"targets": targets, "detection_class_ids": list(range(len(VOC_DETECTION_CLASSES)))}
    return Manifest(name, str(root), items, list(VOC_DETECTION_CLASSES), params, extra)
