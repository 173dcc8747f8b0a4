"""BSDS500 (Berkeley Segmentation Data Set and Benchmarks 500) as a dense-target dataset.

Layout read (the BIDS/BSDS500 release, `BSR/BSDS500/data/`), `root` being the folder that holds:

    images/<split>/<id>.jpg            split in train (200) / val (100) / test (200); other files
                                       (the release's Thumbs.db) are ignored
    groundTruth/<split>/<id>.mat       MATLAB v5: variable `groundTruth`, a 1×A cell array (A ≈ 5 human
                                       annotators), each cell a 1×1 struct with `Segmentation` (H×W
                                       uint16 region labels, 1..R) and `Boundaries` (H×W uint8, 0/1)

Images stay in `root` (not copied; items are `images/<split>/<id>.jpg`, relative to `root`). Targets are
written into the prepared folder, `<split>/<id>/` (see `dense_targets` for the path convention):

| target | file | content |
|---|---|---|
| edge | edges.npy | (H, W) float32 mean of the annotators' Boundaries: the soft human agreement, 0..1 |
| boundaries | boundaries.npy | (A, H, W) uint8 0/1, every annotator's Boundaries (for ODS/OIS) |
| segmentation | segmentation.npy | (A, H, W) uint16, every annotator's Segmentation |
| foreground | foreground.png | (H, W) uint8 0/1 figure–ground, derived: 1 where most annotators put the |
| | | pixel outside their largest region |

BSDS500 has no figure–ground labels; `foreground` is this harness's derivation for the binary generic
segmentation probe (the largest region of an annotation is usually the sky, ground or water the
objects stand on). Ties (an even split of annotators) count as background.

Ids are sorted with digit runs compared as numbers (all BSDS ids are numbers); `limit_per_split` keeps
the first N. Terms: research use under the Berkeley terms; cite Arbelaez, Maire, Fowlkes, Malik,
"Contour Detection and Hierarchical Image Segmentation", IEEE TPAMI 33(5), 2011.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.io

from harness.core.hashing import sha256_file
from harness.datasets.dense_targets import PREPARED, first_n, save_npy
from harness.datasets.files import write_png
from harness.datasets.kinds import DATASET_KINDS
from harness.datasets.manifest import Item, Manifest

BSDS_SPLITS = ("train", "val", "test")
BSDS_SOURCE = (
    "BSDS500 (Berkeley Segmentation Data Set and Benchmarks 500, BIDS/BSDS500 mirror); research use under "
    "the Berkeley terms; cite Arbelaez, Maire, Fowlkes, Malik, 'Contour Detection and Hierarchical Image "
    "Segmentation', IEEE TPAMI 33(5), 2011"
)


def read_bsds_ground_truth(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(segmentations (A, H, W) uint16, boundaries (A, H, W) uint8) from one groundTruth .mat file.

    Read without `squeeze_me`, so one annotator and five look alike: `groundTruth` is a (1, A) object
    array of (1, 1) record arrays whose fields hold (1, 1) object arrays around the H×W matrix.
    """
    cells = np.asarray(scipy.io.loadmat(str(path), squeeze_me=False, struct_as_record=True)["groundTruth"])
    segmentations, boundaries = [], []
    for cell in cells.ravel():
        record = np.asarray(cell).ravel()[0]
        segmentations.append(_matrix(record["Segmentation"]).astype(np.uint16))
        boundaries.append((_matrix(record["Boundaries"]) != 0).astype(np.uint8))
    if not segmentations:
        raise ValueError(f"{path}: groundTruth has no annotators")
    shapes = {s.shape for s in segmentations + boundaries}
    if len(shapes) != 1:
        raise ValueError(f"{path}: annotators disagree on the image size: {sorted(shapes)}")
    return np.stack(segmentations), np.stack(boundaries)


def figure_ground(segmentations: np.ndarray) -> np.ndarray:
    """(H, W) uint8: 1 where a strict majority of annotators place the pixel outside their largest region.

    The largest region is the label with the most pixels (ties: the smallest label, so it is deterministic).
    """
    outside = np.zeros(segmentations.shape[1:], dtype=np.int32)
    for labels in segmentations:
        counts = np.bincount(labels.ravel())
        outside += labels != int(np.argmax(counts))
    return (2 * outside > len(segmentations)).astype(np.uint8)


def _matrix(value: object) -> np.ndarray:
    """Unwrap MATLAB's (1, 1) object-array nesting down to the 2-D numeric matrix."""
    array = np.asarray(value)
    while array.dtype == object:
        array = np.asarray(array.ravel()[0])
    if array.ndim != 2:
        raise ValueError(f"expected a 2-D matrix; got shape {array.shape}")
    return array


@DATASET_KINDS.register("bsds500")
def prepare_bsds500(
    name: str, out_dir: Path, root: str, splits: list[str] | tuple[str, ...] = ("val",),
    limit_per_split: int | None = None,
) -> Manifest:
    """Index the images in `root` and write each image's edge, boundary and segmentation targets."""
    base, out_dir = Path(root), Path(out_dir)
    if not (base / "images").is_dir():
        raise FileNotFoundError(f"dataset {name}: {base}/images not found (set datasets.{name}.root)")
    unknown = sorted(set(splits) - set(BSDS_SPLITS))
    if unknown or not splits:
        raise ValueError(f"bsds500 splits are {', '.join(BSDS_SPLITS)}; got {list(splits)}")
    items, targets, annotators = [], {}, {}
    for split in sorted(set(splits), key=BSDS_SPLITS.index):
        ids = first_n([p.stem for p in (base / "images" / split).iterdir() if p.suffix.lower() == ".jpg"],
                      limit_per_split)
        for image_id in ids:
            rel = f"images/{split}/{image_id}.jpg"
            segmentation, boundaries = read_bsds_ground_truth(base / "groundTruth" / split / f"{image_id}.mat")
            edges = boundaries.astype(np.float32).mean(axis=0, dtype=np.float32)
            folder = f"{split}/{image_id}"
            foreground = {"path": f"{folder}/foreground.png", "base": PREPARED,
                          "sha256": write_png(out_dir / f"{folder}/foreground.png", figure_ground(segmentation))}
            targets[rel] = {
                "edge": save_npy(out_dir, f"{folder}/edges.npy", edges),
                "boundaries": save_npy(out_dir, f"{folder}/boundaries.npy", boundaries),
                "segmentation": save_npy(out_dir, f"{folder}/segmentation.npy", segmentation),
                "foreground": foreground,
            }
            annotators[rel] = int(boundaries.shape[0])
            items.append(Item(rel, sha256_file(base / rel), split))
    params = {"splits": sorted(set(splits), key=BSDS_SPLITS.index), "limit_per_split": limit_per_split,
              "selection": "first-n-ids-natural-order", "source": BSDS_SOURCE}
    extra = {"targets": targets, "annotators": annotators}
    return Manifest(name, root, items, [], params, extra)
