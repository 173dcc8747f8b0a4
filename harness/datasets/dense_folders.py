"""Dense-target datasets read from their distributed folder layouts: VOC 2012, NYUv2 folders, Taskonomy.

Images stay in `root` (never copied; items are paths relative to `root`, label None). Converted targets
go into the prepared folder; targets used as distributed stay in `root` (the path convention is in
`dense_targets`). `limit_per_split` keeps the first N ids per split, digit runs compared as numbers.

`voc2012`: the VOC 2012 devkit, `root` being the folder that holds `VOC2012/` (VOCdevkit):

    VOC2012/ImageSets/Segmentation/<split>.txt   one id per line (train 1464, val 1449, trainval)
    VOC2012/JPEGImages/<id>.jpg
    VOC2012/SegmentationClass/<id>.png           palette ("P") PNG: stored index = class (0..20, order of
                                                 VOC_CLASSES), 255 = void (object borders, don't-care)

Target `semantic` is that PNG, unconverted (base "root"): read it with `np.asarray(Image.open(p))`,
never `.convert()`, which would turn indices into palette colours. `extra["ignore_index"]` is 255.

`nyuv2_folder`: NYU Depth v2 labelled frames exported to per-split folders (the 795/654 split, 640×480,
as in the ESANet-style export with GeoNet-style normals added), `root` holding:

    <split>/rgb/<id>.png (or .jpg)
    <split>/depth/<id>.png       uint16 millimetres, 0 = invalid   (or <id>.npy: float metres, ≤0/NaN = invalid)
    <split>/normals/<id>.png     uint8 RGB, n = rgb / 127.5 - 1, (0, 0, 0) = invalid; the whole folder is
                                 optional (no `normals` target without it), no axis flipped

written to `<split>/<id>/depth.npy` ((H, W) float32 metres, 0 = invalid) and `normals.npy` ((H, W, 3)
float32 unit vectors, 0 = invalid). `splits` defaults to every `<split>/` that has an `rgb/`.

`taskonomy`: the Taskonomy / Omnidata domain layout, `root` holding one folder per building:

    <building>/rgb/point_<i>_view_<j>_domain_rgb.png
    <building>/depth_zbuffer/point_<i>_view_<j>_domain_depth_zbuffer.png   uint16, units of 1/512 m,
                                                                           65535 = invalid (sky, holes)
    <building>/normal/point_<i>_view_<j>_domain_normal.png                 uint8 RGB, n = rgb / 127.5 - 1
    <building>/mask_valid/point_<i>_view_<j>_domain_mask_valid.png         uint8 (L; or the first channel),
                                                                           0 = invalid, > 0 = valid;
                                                                           optional (folder absent: depth
                                                                           alone decides validity)
    <building>/edge_texture/point_<i>_view_<j>_domain_edge_texture.png     uint16: 2-D (Canny) edges of the RGB
    <building>/edge_occlusion/point_<i>_view_<j>_domain_edge_occlusion.png uint16: Sobel of √depth (3-D edges)
    <building>/keypoints2d/point_<i>_view_<j>_domain_keypoints2d.png       uint16: SURF-style Hessian response

`splits` maps a split to its buildings (`{train: [allensville, ...], val: [...]}`). `tasks` names the probes
whose targets to write (default `[depth, surface_normal]`); only their domains are read, and a building
missing one of those domain folders is refused before anything is read:

| task | domain(s) | target | written as |
|---|---|---|---|
| depth | depth_zbuffer (+ mask_valid) | depth | (H, W) float32 metres, z-buffer depth |
| surface_normal | normal, depth_zbuffer (+ mask_valid) | normals | (H, W, 3) float32 unit vectors |
| edge | edge_texture | texture_edges | (H, W) float32 raw / 65535 |
| occlusion_edge | edge_occlusion | occlusion_edges | (H, W) float32 raw / 65535 |
| keypoints2d | keypoints2d | keypoints | (H, W, 1) float32 raw / 65535 (one keypoint kind) |

For depth and normals a pixel is valid when mask_valid > 0 and depth ≠ 65535; invalid pixels are 0 in both.
Normals stay in Taskonomy's own camera frame as encoded (no axis flipped). The low-level maps have no invalid
pixels. Each target is written to `<split>/<building>/point_<i>_view_<j>/<target>.npy`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from harness.core.hashing import sha256_file
from harness.datasets.dense_targets import ROOT, decode_normals, first_n, read_array, save_npy
from harness.datasets.kinds import DATASET_KINDS
from harness.datasets.manifest import Item, Manifest

VOC_CLASSES = [
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor",
]
VOC_IGNORE_INDEX = 255
NYU_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
TASKONOMY_DEPTH_UNIT = 512.0  # raw / 512 = metres
TASKONOMY_INVALID_DEPTH = 65535
# The annotator writes each low-level domain as `skimage.img_as_uint(x)` of a float map in [0, 1] (EPFL-VILAB/omnidata,
# omnidata_annotator/scripts/create_edge_2d_images.py, create_edge_3d_images.py, create_keypoints_2d_images.py) and
# the official loader reads it back as raw / (2**16 - 1) (omnidata_tools/torch/dataloader/transforms.py,
# `transform_16bit_single_channel`; its `clamp_to: (0, 0.25)` rescale of edge_texture is commented out there). We
# do the same: the [0, 1] map the generator computed, no clamp, no rescale.
TASKONOMY_UINT16_SCALE = 65535.0
# task (probe name) → the domain folders it reads; depth_zbuffer also decides where normals are valid
TASKONOMY_TASK_DOMAINS = {
    "depth": ("depth_zbuffer",), "surface_normal": ("normal", "depth_zbuffer"), "edge": ("edge_texture",),
    "occlusion_edge": ("edge_occlusion",), "keypoints2d": ("keypoints2d",),
}
# low-level task → (its domain, the target name its dense probe reads: `harness.probes.dense.probes` EDGE, OCCLUSION,
# KEYPOINTS)
TASKONOMY_LOW_LEVEL_TARGETS = {"edge": ("edge_texture", "texture_edges"),
                               "occlusion_edge": ("edge_occlusion", "occlusion_edges"),
                               "keypoints2d": ("keypoints2d", "keypoints")}
TASKONOMY_TARGET_SOURCES = {
    "depth": "rendered from the building's mesh: Taskonomy's depth_zbuffer domain",
    "normals": "rendered from the building's mesh: Taskonomy's normal domain, decoded rgb/127.5 - 1",
    "texture_edges": "computed from the RGB: Taskonomy's edge_texture domain (Canny edges of the luminance), "
                     "uint16/65535",
    "occlusion_edges": "computed from the rendered depth: Taskonomy's edge_occlusion domain (Sobel magnitude of "
                       "the square root of z-buffer depth), uint16/65535",
    "keypoints": "computed from the RGB: Taskonomy's keypoints2d domain (SURF's determinant-of-Hessian response "
                 "before non-max suppression), uint16/65535",
}


@DATASET_KINDS.register("voc2012")
def prepare_voc2012(
    name: str, out_dir: Path, root: str, splits: list[str] | tuple[str, ...] = ("train", "val"),
    limit_per_split: int | None = None,
) -> Manifest:
    """Index the official segmentation split lists; the target is each id's SegmentationClass PNG."""
    voc = Path(root) / "VOC2012"
    lists = voc / "ImageSets" / "Segmentation"
    if not lists.is_dir():
        raise FileNotFoundError(f"dataset {name}: {lists} not found (set datasets.{name}.root to the VOCdevkit)")
    items, targets = [], {}
    for split in sorted(set(splits)):
        listing = lists / f"{split}.txt"
        if not listing.is_file():
            valid = sorted(p.stem for p in lists.glob("*.txt"))
            raise KeyError(f"voc2012 has no split list {listing.name}; valid: {', '.join(valid)}")
        ids = [line.split()[0] for line in listing.read_text().splitlines() if line.strip()]
        for image_id in first_n(ids, limit_per_split):
            rel, label_rel = f"VOC2012/JPEGImages/{image_id}.jpg", f"VOC2012/SegmentationClass/{image_id}.png"
            with Image.open(Path(root) / label_rel) as label:
                if label.mode != "P":
                    raise ValueError(f"{label_rel}: expected a palette (P) PNG of class indices; got {label.mode}")
            targets[rel] = {"semantic": {"path": label_rel, "sha256": sha256_file(Path(root) / label_rel),
                                         "base": ROOT}}
            items.append(Item(rel, sha256_file(Path(root) / rel), split))
    params = {"splits": sorted(set(splits)), "limit_per_split": limit_per_split,
              "source": "PASCAL VOC 2012 segmentation (Everingham et al., IJCV 2010); Flickr image terms"}
    extra = {"targets": targets, "ignore_index": VOC_IGNORE_INDEX}
    return Manifest(name, root, items, list(VOC_CLASSES), params, extra)


def nyu_depth_metres(path: Path) -> np.ndarray:
    """(H, W) float32 metres, 0 = invalid, from a uint16 millimetre PNG or a float-metre .npy."""
    raw = read_array(path)
    if path.suffix == ".npy":
        depth = raw.astype(np.float32)
        return np.where(np.isfinite(depth) & (depth > 0), depth, np.float32(0.0)).astype(np.float32)
    if raw.dtype != np.uint16 and raw.dtype != np.int32:  # Pillow reads 16-bit PNGs as I;16 (uint16) or I
        raise ValueError(f"{path}: NYU depth PNGs are 16-bit millimetres; got {raw.dtype}")
    return (raw.astype(np.float32) / np.float32(1000.0)).astype(np.float32)


@DATASET_KINDS.register("nyuv2_folder")
def prepare_nyuv2_folder(
    name: str, out_dir: Path, root: str, splits: list[str] | tuple[str, ...] | None = None,
    limit_per_split: int | None = None,
) -> Manifest:
    """Index `<split>/rgb/` and write each frame's depth (metres) and normals (unit) targets."""
    base, out_dir = Path(root), Path(out_dir)
    if not base.is_dir():
        raise FileNotFoundError(f"dataset {name}: folder {base} not found (set datasets.{name}.root)")
    available = sorted(p.name for p in base.iterdir() if (p / "rgb").is_dir())
    chosen = sorted(set(splits)) if splits is not None else available
    missing = sorted(set(chosen) - set(available))
    if missing or not chosen:
        raise KeyError(f"nyuv2_folder splits {missing or chosen} not found; valid: {', '.join(available)}")
    items, targets = [], {}
    for split in chosen:
        images = {p.stem: p for p in (base / split / "rgb").iterdir() if p.suffix.lower() in NYU_IMAGE_SUFFIXES}
        for image_id in first_n(list(images), limit_per_split):
            rel = images[image_id].relative_to(base).as_posix()
            depth_path = _one_of(base / split / "depth", image_id, (".png", ".npy"))
            entry = {"depth": save_npy(out_dir, f"{split}/{image_id}/depth.npy", nyu_depth_metres(depth_path))}
            if (base / split / "normals").is_dir():
                normals = decode_normals(read_array(_one_of(base / split / "normals", image_id, (".png",))))
                entry["normals"] = save_npy(out_dir, f"{split}/{image_id}/normals.npy", normals)
            targets[rel] = entry
            items.append(Item(rel, sha256_file(images[image_id]), split))
    params = {"splits": chosen, "limit_per_split": limit_per_split, "depth_encoding": "uint16-mm-png|float-m-npy",
              "normals_encoding": "rgb/127.5-1", "source": "NYU Depth v2 (Silberman et al., ECCV 2012)"}
    sources = {"depth": "measured: the Kinect depth in <split>/depth/ (NYU Depth v2), millimetres",
               "normals": "the dataset folder's <split>/normals/ maps (e.g. GeoNet's, Qi et al. 2018, fitted to the "
                          "depth), decoded rgb/127.5 - 1, no axis flipped"}
    return Manifest(name, root, items, [], params, {
        "targets": targets, "target_sources": {k: v for k, v in sources.items()
                                               if any(k in entry for entry in targets.values())}})


def _one_of(folder: Path, stem: str, suffixes: tuple[str, ...]) -> Path:
    for suffix in suffixes:
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    raise FileNotFoundError(f"{folder}/{stem}{{{','.join(suffixes)}}} not found")


def taskonomy_depth(depth_raw: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Decode one Taskonomy z-buffer: (depth float32 metres with 0 where invalid, valid)."""
    if depth_raw.ndim == 3:
        depth_raw = depth_raw[..., 0]
    valid = depth_raw.astype(np.int64) != TASKONOMY_INVALID_DEPTH
    if mask is not None:
        valid &= (mask[..., 0] if mask.ndim == 3 else mask) > 0
    depth = np.where(valid, depth_raw.astype(np.float32) / np.float32(TASKONOMY_DEPTH_UNIT), np.float32(0.0))
    return depth.astype(np.float32), valid


def taskonomy_unit_map(path: Path) -> np.ndarray:
    """A 16-bit single-channel domain (edge_texture, edge_occlusion, keypoints2d) as (H, W) float32 in [0, 1]."""
    raw = read_array(path)
    if raw.ndim != 2 or raw.dtype not in (np.uint16, np.int32):  # Pillow reads 16-bit PNGs as I;16 or I
        raise ValueError(f"{path}: expected a 16-bit single-channel PNG; got {raw.dtype} of shape {raw.shape}")
    return (raw.astype(np.float32) / np.float32(TASKONOMY_UINT16_SCALE)).astype(np.float32)


def _taskonomy_view_targets(base: Path, out_dir: Path, split: str, view: str, tasks: list[str]) -> dict:
    building, point_view = view.split("/")

    def domain_file(domain: str) -> Path:
        return base / building / domain / f"{point_view}_domain_{domain}.png"

    entry = {}
    if "depth" in tasks or "surface_normal" in tasks:
        mask = read_array(domain_file("mask_valid")) if (base / building / "mask_valid").is_dir() else None
        depth, valid = taskonomy_depth(read_array(domain_file("depth_zbuffer")), mask)
        if "depth" in tasks:
            entry["depth"] = save_npy(out_dir, f"{split}/{view}/depth.npy", depth)
        if "surface_normal" in tasks:
            entry["normals"] = save_npy(out_dir, f"{split}/{view}/normals.npy",
                                        decode_normals(read_array(domain_file("normal")), valid))
    for task, (domain, target) in TASKONOMY_LOW_LEVEL_TARGETS.items():
        if task in tasks:
            values = taskonomy_unit_map(domain_file(domain))
            if target == "keypoints":  # the keypoints probe reads (H, W, kinds) and takes the max over kinds
                values = values[..., None]
            entry[target] = save_npy(out_dir, f"{split}/{view}/{target}.npy", values)
    return entry


@DATASET_KINDS.register("taskonomy")
def prepare_taskonomy(
    name: str, out_dir: Path, root: str, splits: dict[str, list[str]], limit_per_split: int | None = None,
    tasks: list[str] | tuple[str, ...] = ("depth", "surface_normal"),
) -> Manifest:
    """Index each split's buildings' rgb views and write the targets of `tasks` (see the module docstring)."""
    base, out_dir = Path(root), Path(out_dir)
    if not base.is_dir():
        raise FileNotFoundError(f"dataset {name}: folder {base} not found (set datasets.{name}.root)")
    chosen = sorted(set(tasks))
    unknown = [t for t in chosen if t not in TASKONOMY_TASK_DOMAINS]
    if unknown or not chosen:
        raise ValueError(f"datasets.{name}.tasks: {'unknown ' + ', '.join(unknown) if unknown else 'empty'}; "
                         f"valid: {', '.join(TASKONOMY_TASK_DOMAINS)}")
    owner: dict[str, str] = {}
    for split, buildings in splits.items():
        for building in buildings:
            if building in owner:
                raise ValueError(f"building {building!r} is in both {owner[building]!r} and {split!r}")
            owner[building] = split
    domains = sorted({d for t in chosen for d in TASKONOMY_TASK_DOMAINS[t]})
    for building in sorted(owner):  # every folder the tasks need, before anything is read
        for domain in ["rgb", *domains]:
            if not (base / building / domain).is_dir():
                needed = [t for t in chosen if domain in TASKONOMY_TASK_DOMAINS[t]] or ["the images"]
                raise FileNotFoundError(f"dataset {name}: {base / building / domain} not found "
                                        f"(needed for {', '.join(needed)})")
    items, targets = [], {}
    suffix = "_domain_rgb.png"
    for split in sorted(splits):
        views = []
        for building in sorted(set(splits[split])):
            views += [f"{building}/{p.name[: -len(suffix)]}" for p in (base / building / "rgb").iterdir()
                      if p.name.endswith(suffix)]
        for view in first_n(views, limit_per_split):
            building, point_view = view.split("/")
            rel = f"{building}/rgb/{point_view}{suffix}"
            targets[rel] = _taskonomy_view_targets(base, out_dir, split, view, chosen)
            items.append(Item(rel, sha256_file(base / rel), split))
    params = {"splits": {s: sorted(set(b)) for s, b in sorted(splits.items())}, "limit_per_split": limit_per_split,
              "tasks": chosen, "depth_encoding": "uint16/512 m, 65535 invalid", "normals_encoding": "rgb/127.5-1",
              "low_level_encoding": "uint16/65535",
              "source": "Taskonomy (Zamir et al., CVPR 2018), Taskonomy/Omnidata domain layout"}
    written = {target for entry in targets.values() for target in entry}
    sources = {k: v for k, v in TASKONOMY_TARGET_SOURCES.items() if k in written}
    return Manifest(name, root, items, [], params, {"targets": targets, "target_sources": sources})
