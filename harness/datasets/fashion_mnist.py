"""Fashion-MNIST from Debian's `dataset-fashion-mnist` (Zalando's IDX files): the embedded default's images."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from harness.datasets.files import write_png
from harness.datasets.kinds import DATASET_KINDS
from harness.datasets.manifest import Item, Manifest

FASHION_MNIST_CLASSES = [
    "t-shirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle_boot",
]


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
                items.append(Item(rel, write_png(out_dir / rel, images[index]), split, label))
    params = {"source": "debian:dataset-fashion-mnist", "per_class": per_class, "selection": "first-n-per-class"}
    return Manifest(name, str(out_dir), items, FASHION_MNIST_CLASSES, params)
