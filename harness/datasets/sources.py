"""How each dataset kind is prepared into a manifest: a registry of `prepare` functions.

`fashion_mnist` and `homography_photos` are the embedded default: they need nothing but what Debian
and PyPI install. `image_folder` points at a folder laid out as `root/<split>/<class>/<img>` or
`root/<class>/<img>` (then split per class by content hash, e.g. CIFAR-10's test JPEGs).
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from harness.datasets.manifest import Item, Manifest
from harness.hashing import sha256_bytes, sha256_file
from harness.registry import Registry

DATASET_KINDS: Registry[Manifest] = Registry("dataset kind")
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp"}

FASHION_MNIST_CLASSES = [
    "t-shirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle_boot",
]


def _write_png(path: Path, array: np.ndarray) -> str:
    """Write a PNG atomically; Pillow's PNG encoder is deterministic, so equal pixels give equal bytes."""
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG", compress_level=6)
    data = buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return sha256_bytes(data)


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


@DATASET_KINDS.register("fashion_mnist")
def prepare_fashion_mnist(name: str, out_dir: Path, source: str, per_class: dict[str, int]) -> Manifest:
    """A fixed stratified subset: the first N images of each class, in file order.

    `train` comes from Fashion-MNIST's training file and `val` from its test file, so they never share an
    image. Source: Debian's `dataset-fashion-mnist` (Zalando's IDX files).
    """
    files = {"train": "train", "val": "t10k"}
    items = []
    for split, count in sorted(per_class.items()):
        prefix = files.get(split)
        if prefix is None:
            raise KeyError(f"fashion_mnist splits are {', '.join(files)}; got {split!r}")
        images = _read_idx(Path(source) / f"{prefix}-images-idx3-ubyte.gz")
        labels = _read_idx(Path(source) / f"{prefix}-labels-idx1-ubyte.gz")
        for label, class_name in enumerate(FASHION_MNIST_CLASSES):
            for index in np.flatnonzero(labels == label)[:count]:
                rel = f"{split}/{class_name}/{prefix}-{index:05d}.png"
                items.append(Item(rel, _write_png(out_dir / rel, images[index]), split, label))
    params = {"source": "debian:dataset-fashion-mnist", "per_class": per_class, "selection": "first-n-per-class"}
    return Manifest(name, str(out_dir), items, FASHION_MNIST_CLASSES, params)


@DATASET_KINDS.register("image_folder")
def prepare_image_folder(
    name: str, out_dir: Path, root: str, per_class: dict[str, int] | None = None, note: str = ""
) -> Manifest:
    """Index a folder without copying it. With `per_class`, a class-only layout is split by content hash."""
    base = Path(root)
    if not base.is_dir():
        raise FileNotFoundError(f"dataset {name}: folder {base} not found (set datasets.{name}.root)")
    if per_class is None:
        splits = sorted(p.name for p in base.iterdir() if p.is_dir())
        classes = sorted({c.name for s in splits for c in (base / s).iterdir() if c.is_dir()})
        # a class may be absent from one split (a rare class with no val images): skip, don't crash
        listing = [(s, c, f) for s in splits for c in classes if (base / s / c).is_dir() for f in _images(base / s / c)]
    else:
        classes = sorted(p.name for p in base.iterdir() if p.is_dir())
        listing = []
        for class_name in classes:
            files = sorted(_images(base / class_name), key=lambda f: (sha256_file(f), f.name))
            start = 0
            for split, count in sorted(per_class.items()):
                listing += [(split, class_name, f) for f in files[start: start + count]]
                start += count
    items = [
        Item(str(f.relative_to(base)), sha256_file(f), split, classes.index(c)) for split, c, f in listing
    ]
    params = {"layout": "split/class" if per_class is None else "class", "per_class": per_class, "note": note}
    return Manifest(name, root, items, classes, params)


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def prepare_dataset(name: str, spec: dict[str, Any], out_dir: Path) -> Manifest:
    spec = dict(spec)
    kind = spec.pop("kind")
    spec.pop("tasks", None)
    manifest = DATASET_KINDS.get(kind)(name, out_dir, **spec)
    manifest.save(out_dir / "manifest.json")
    return manifest
