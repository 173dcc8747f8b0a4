"""Ground-truth boxes and detections of one image, and reading them from a dataset's `annotations` target.

Box convention (both datasets, every module of this package): `[x0, y0, x1, y1]` in **pixel edges**,
0-based, x1/y1 exclusive, in the original image. A box covering pixels 3..5 (0-based) is [3, y0, 6, y1]:
its width is x1 - x0 = 3. The procedural scenes write their tight boxes this way (`object_boxes`); the
`voc2012_detection` loader converts VOC's 1-based inclusive corners as x0 = xmin - 1, x1 = xmax.

`annotations` JSON (the procedural scenes' shape, which `voc2012_detection` also writes):
`{"image_size": S | [W, H], "boxes": [{"box": [x0, y0, x1, y1], "class_id": id, "difficult": bool?, ...}]}`;
`difficult` is absent in the scenes (no object is difficult). `class_id` is the dataset's own id; the
detection class of an id is given by `detection_class_ids` (see `detection_classes`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.datasets.manifest import Item, Manifest
from harness.datasets.scene_targets import SEMANTIC_CLASSES
from harness.probes.dense.targets import target_path

# The procedural scenes' objects: semantic ids 2, 3, 4 (box, sphere, cylinder) are detection classes 0, 1,
# 2; background (0) and the ground plane (1) are not objects.
SCENE_DETECTION_CLASS_IDS = (2, 3, 4)


@dataclass(frozen=True)
class GroundTruth:
    """One image's objects, in detection-class indices (0..K-1)."""

    width: int
    height: int
    boxes: np.ndarray  # (N, 4) float64 pixel edges
    labels: np.ndarray  # (N,) int64
    difficult: np.ndarray  # (N,) bool: VOC's "difficult" (ignored by both evaluators)


@dataclass(frozen=True)
class Detections:
    """One image's detections, highest score first."""

    boxes: np.ndarray  # (M, 4) float64 pixel edges
    scores: np.ndarray  # (M,) float64
    labels: np.ndarray  # (M,) int64


def check_boxes(boxes: np.ndarray, what: str) -> None:
    """Refuse boxes the scorers cannot score honestly: not (N, 4), not finite, or inverted (x1 < x0 or
    y1 < y0). The references disagree on an inverted box: pycocotools gives it a negative area, outside
    area range "all", so an unmatched one is ignored, while a plain transcription of either scorer counts it
    a false positive (up to 0.006 mAP apart on seeded cases). Neither reading is the box's meaning, so no
    number is produced. An empty box (x1 == x0) is well formed: every evaluator scores it IoU 0."""
    boxes = np.asarray(boxes, dtype=np.float64)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"{what}: boxes must be (N, 4) [x0, y0, x1, y1]; got shape {boxes.shape}")
    bad = ~np.isfinite(boxes).all(axis=1) | (boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1])
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{what}: {int(bad.sum())} malformed box(es), e.g. #{first} = {boxes[first].tolist()}; "
                         "a box is [x0, y0, x1, y1] in pixel edges with finite x0 <= x1 and y0 <= y1")


def check_images(ground_truth: Sequence[GroundTruth], detections: Sequence[Detections]) -> None:
    """The scorers' door: one detection list per image, every box well formed (see `check_boxes`)."""
    if len(ground_truth) != len(detections):
        raise ValueError(f"{len(ground_truth)} ground-truth images but {len(detections)} detection lists")
    for index, (truth, found) in enumerate(zip(ground_truth, detections, strict=True)):
        check_boxes(truth.boxes, f"image {index}, ground truth")
        check_boxes(found.boxes, f"image {index}, detections")


def detection_classes(manifest: Manifest) -> list[tuple[int, str]]:
    """(annotation class_id, class name) of each detection class, in detection-class order.

    A manifest names them in `extra["detection_class_ids"]` (ids into `manifest.classes`); the procedural
    scenes, which predate detection, are recognised by their class list and use `SCENE_DETECTION_CLASS_IDS`.
    """
    ids = manifest.extra.get("detection_class_ids")
    if ids is None and list(manifest.classes) == list(SEMANTIC_CLASSES):
        ids = SCENE_DETECTION_CLASS_IDS
    if ids is None:
        raise ValueError(f"dataset {manifest.name} names no detection classes: its manifest has no "
                         "extra['detection_class_ids'] and it is not a procedural_scenes dataset")
    return [(int(i), manifest.classes[int(i)]) for i in ids]


def read_ground_truth(path: Path, class_index: dict[int, int]) -> GroundTruth:
    """Parse one `annotations` JSON; `class_index` maps a dataset class_id to its detection class."""
    payload = json.loads(Path(path).read_text())
    if "image_size" not in payload or "boxes" not in payload:
        raise ValueError(f"{path}: an annotations file needs 'image_size' and 'boxes'")
    size = payload["image_size"]
    width, height = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    boxes, labels, difficult = [], [], []
    for entry in payload["boxes"]:
        if entry["class_id"] not in class_index:
            raise ValueError(f"{path}: class_id {entry['class_id']} is not a detection class; valid: "
                             f"{', '.join(str(k) for k in sorted(class_index))}")
        boxes.append([float(v) for v in entry["box"]])
        labels.append(class_index[entry["class_id"]])
        difficult.append(bool(entry.get("difficult", False)))
    return GroundTruth(width, height, np.asarray(boxes, dtype=np.float64).reshape(-1, 4),
                       np.asarray(labels, dtype=np.int64), np.asarray(difficult, dtype=bool))


def ground_truth_reader(manifest: Manifest):
    """A memoised `Item -> GroundTruth` for `manifest` (targets read once, however many epochs)."""
    class_index = {class_id: k for k, (class_id, _) in enumerate(detection_classes(manifest))}
    memo: dict[str, GroundTruth] = {}

    def read(item: Item) -> GroundTruth:
        if item.path not in memo:
            memo[item.path] = read_ground_truth(target_path(manifest, item, "annotations"), class_index)
        return memo[item.path]

    return read
