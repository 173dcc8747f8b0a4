"""Datasets: deterministic preparation, content-derived identities, and homography geometry."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.core.hashing import sha256_file
from harness.datasets.fashion_mnist import FASHION_MNIST_CLASSES, _read_idx
from harness.datasets.homography import (
    apply_homography,
    homography_from_points,
    prepare_homography_photos,
    random_homography,
    warp_photo,
)
from harness.datasets.image_folder import prepare_image_folder
from harness.datasets.kinds import DatasetError, prepare_dataset
from harness.datasets.manifest import MANIFEST_NAME, Item, Manifest

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
needs_fashion_mnist = pytest.mark.skipif(not FASHION_MNIST.is_dir(), reason=f"{FASHION_MNIST} absent")


def _png_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.png"))}


# -- fashion_mnist ---------------------------------------------------------------------------------

FMNIST_SPEC = {"kind": "fashion_mnist", "source": str(FASHION_MNIST), "per_class": {"train": 2, "val": 1}}


@needs_fashion_mnist
def test_fashion_mnist_prepare(tmp_path):
    out = tmp_path / "fm"
    manifest = prepare_dataset("fashion_mnist", FMNIST_SPEC, out)
    assert len(manifest.items) == 30
    assert manifest.classes == FASHION_MNIST_CLASSES
    train, val = manifest.split("train"), manifest.split("val")
    assert len(train) == 20 and len(val) == 10
    for split, per_class in ((train, 2), (val, 1)):
        labels = [item.label for item in split]
        assert sorted(labels) == sorted(list(range(10)) * per_class)
    assert not {i.sha256 for i in train} & {i.sha256 for i in val}  # different source files, no overlap
    images = {"train": _read_idx(FASHION_MNIST / "train-images-idx3-ubyte.gz"),
              "val": _read_idx(FASHION_MNIST / "t10k-images-idx3-ubyte.gz")}
    labels = {"train": _read_idx(FASHION_MNIST / "train-labels-idx1-ubyte.gz"),
              "val": _read_idx(FASHION_MNIST / "t10k-labels-idx1-ubyte.gz")}
    for item in manifest.items:
        path = manifest.resolve(item)
        assert sha256_file(path) == item.sha256
        assert item.path.startswith(f"{item.split}/{FASHION_MNIST_CLASSES[item.label]}/")
        index = int(path.stem.split("-")[1])
        assert labels[item.split][index] == item.label  # the label is the file's own label
        with Image.open(path) as image:
            np.testing.assert_array_equal(np.asarray(image), images[item.split][index])
    # "first N per class": class 0's first training image is the first 0 in the label file
    first_tshirt = min(int(Path(i.path).stem.split("-")[1]) for i in train if i.label == 0)
    assert first_tshirt == int(np.flatnonzero(labels["train"] == 0)[0])
    # the manifest was saved beside the images and loads back to the same thing
    saved = Manifest.load(out / MANIFEST_NAME)
    assert saved == manifest and saved.identity == manifest.identity


@needs_fashion_mnist
def test_fashion_mnist_prepare_is_deterministic(tmp_path):
    first = prepare_dataset("fashion_mnist", FMNIST_SPEC, tmp_path / "a")
    second = prepare_dataset("fashion_mnist", FMNIST_SPEC, tmp_path / "b")
    assert first.identity == second.identity
    assert _png_bytes(tmp_path / "a") == _png_bytes(tmp_path / "b")
    more = prepare_dataset("fashion_mnist", {**FMNIST_SPEC, "per_class": {"train": 3, "val": 1}}, tmp_path / "c")
    assert more.identity != first.identity


@needs_fashion_mnist
def test_fashion_mnist_unknown_split_is_refused(tmp_path):
    with pytest.raises(KeyError, match="train, val"):
        prepare_dataset("fashion_mnist", {**FMNIST_SPEC, "per_class": {"test": 1}}, tmp_path)


# -- homography_photos -------------------------------------------------------------------------------

PHOTOS = {"photos": ["skimage:astronaut", "sklearn:china.jpg"], "size": 64, "warps_per_photo": 1,
          "max_shift": 0.12, "seed": 0}


def test_homography_photos_prepare(tmp_path):
    manifest = prepare_homography_photos("hp", tmp_path / "a", **PHOTOS)
    assert len(manifest.items) == 4 and {i.split for i in manifest.items} == {"test"}
    assert manifest.classes == ["astronaut", "china.jpg"]
    pairs = manifest.extra["pairs"]
    assert len(pairs) == 2
    by_path = {item.path: item for item in manifest.items}
    for photo_index, pair in enumerate(pairs):
        assert by_path[pair["source"]].label == by_path[pair["target"]].label == photo_index
        homography = np.asarray(pair["homography"])
        assert homography.shape == (3, 3) and homography[2, 2] == 1.0
        # every corner moves by at most max_shift × size
        corners = np.array([[0, 0], [64, 0], [64, 64], [0, 64]], dtype=float)
        assert np.abs(apply_homography(homography, corners) - corners).max() <= 0.12 * 64 + 1e-9
        for rel in (pair["source"], pair["target"]):
            with Image.open(manifest.resolve(by_path[rel])) as image:
                assert image.size == (64, 64) and image.mode == "RGB"
            assert sha256_file(manifest.resolve(by_path[rel])) == by_path[rel].sha256
    # the JSON-stored homographies survive a save/load
    manifest.save(tmp_path / "m.json")
    assert Manifest.load(tmp_path / "m.json").extra == manifest.extra


def test_homography_photos_are_deterministic(tmp_path):
    first = prepare_homography_photos("hp", tmp_path / "a", **PHOTOS)
    second = prepare_homography_photos("hp", tmp_path / "b", **PHOTOS)
    assert first.identity == second.identity
    assert first.extra == second.extra
    assert _png_bytes(tmp_path / "a") == _png_bytes(tmp_path / "b")
    reseeded = prepare_homography_photos("hp", tmp_path / "c", **{**PHOTOS, "seed": 1})
    assert reseeded.identity != first.identity


def test_warp_photo_moves_pixels_along_the_homography():
    """A pixel at p in the source appears at H·p in the warp (not at H⁻¹·p)."""
    size = 96
    ys, xs = np.mgrid[0:size, 0:size]
    photo = np.stack([xs * 2, ys * 2, np.full_like(xs, 100)], axis=-1).astype(np.uint8)  # linear ramps
    homography = random_homography(np.random.default_rng(3), size, 0.1)
    warped = warp_photo(photo, homography).astype(float)
    axis = np.linspace(24, 72, 9)
    points = np.stack(np.meshgrid(axis, axis), axis=-1).reshape(-1, 2)

    def error(h: np.ndarray) -> float:
        target = np.rint(apply_homography(h, points)).astype(int)
        assert ((target >= 0) & (target < size)).all()
        source = np.rint(points).astype(int)
        return float(np.abs(warped[target[:, 1], target[:, 0], :2] - photo[source[:, 1], source[:, 0], :2]).max())

    assert error(homography) <= 4.0  # ≤ 1 px of rounding on a 2-levels-per-pixel ramp
    assert error(np.linalg.inv(homography)) > 4 * error(homography) + 4.0


def test_homography_from_points_maps_the_points():
    rng = np.random.default_rng(0)
    source = np.array([[0, 0], [100, 0], [100, 80], [0, 80]], dtype=float)
    target = source + rng.uniform(-15, 15, size=(4, 2))
    homography = homography_from_points(source, target)
    np.testing.assert_allclose(apply_homography(homography, source), target, atol=1e-9)
    # batched points keep their leading shape, and the inverse maps back
    batch = rng.uniform(0, 100, size=(2, 5, 2))
    mapped = apply_homography(homography, batch)
    assert mapped.shape == batch.shape
    np.testing.assert_allclose(apply_homography(np.linalg.inv(homography), mapped), batch, atol=1e-8)
    # an affine map comes out exactly affine (last row 0, 0, 1)
    affine = homography_from_points(source, source * 2 + 3)
    np.testing.assert_allclose(affine, [[2, 0, 3], [0, 2, 3], [0, 0, 1]], atol=1e-12)


# -- image_folder -------------------------------------------------------------------------------------

CLASSES = ["bird", "cat", "dog"]


def _write_image(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, size=(6, 6, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def _class_folder(root: Path, per_class: int = 4) -> Path:
    for c, name in enumerate(CLASSES):
        for i in range(per_class):
            _write_image(root / name / f"img{i}.png", seed=10 * c + i)
    (root / "SOURCE.md").write_text("not an image, not a class\n")
    (root / "cat" / "notes.txt").write_text("not an image\n")
    return root


def test_image_folder_class_layout_per_class_split(tmp_path):
    root = _class_folder(tmp_path / "src")
    manifest = prepare_image_folder("folder", tmp_path / "out", str(root), per_class={"train": 2, "val": 1})
    assert manifest.classes == CLASSES
    assert len(manifest.items) == 9
    train, val = manifest.split("train"), manifest.split("val")
    assert len(train) == 6 and len(val) == 3
    assert not {i.path for i in train} & {i.path for i in val}
    for item in manifest.items:
        assert item.path.split("/")[0] == CLASSES[item.label]
        assert sha256_file(manifest.resolve(item)) == item.sha256
    for label in range(3):
        assert sum(i.label == label for i in train) == 2 and sum(i.label == label for i in val) == 1
    again = prepare_image_folder("folder", tmp_path / "out", str(root), per_class={"train": 2, "val": 1})
    assert again.items == manifest.items and again.identity == manifest.identity


def test_image_folder_split_does_not_depend_on_file_names(tmp_path):
    root = _class_folder(tmp_path / "src")
    before = prepare_image_folder("folder", tmp_path / "out", str(root), per_class={"train": 2, "val": 1})
    for path in sorted(root.glob("*/img*.png")):  # rename every file; contents unchanged
        path.rename(path.with_name(f"renamed-{path.stem[::-1]}{path.suffix}"))
    after = prepare_image_folder("folder", tmp_path / "out", str(root), per_class={"train": 2, "val": 1})
    assert after.identity == before.identity
    assert sorted((i.sha256, i.split) for i in after.items) == sorted((i.sha256, i.split) for i in before.items)


def test_image_folder_identity_survives_a_move_but_not_a_pixel(tmp_path):
    root = _class_folder(tmp_path / "src")
    spec = {"per_class": {"train": 2, "val": 1}}
    original = prepare_image_folder("folder", tmp_path / "out", str(root), **spec)
    moved_root = tmp_path / "elsewhere" / "renamed"
    moved_root.parent.mkdir()
    shutil.move(str(root), str(moved_root))
    moved = prepare_image_folder("folder", tmp_path / "out", str(moved_root), **spec)
    assert moved.root != original.root
    assert moved.identity == original.identity
    # change one pixel of one image in the dataset (a class folder may hold images no split selected)
    victim = moved.resolve(next(i for i in moved.items if i.split == "val" and i.label == 2))
    pixels = np.asarray(Image.open(victim)).copy()
    pixels[0, 0, 0] ^= 1
    Image.fromarray(pixels).save(victim)
    changed = prepare_image_folder("folder", tmp_path / "out", str(moved_root), **spec)
    assert changed.identity != original.identity


def test_image_folder_split_class_layout(tmp_path):
    root = tmp_path / "src"
    for s, (split, count) in enumerate((("train", 3), ("val", 2))):
        for c, name in enumerate(CLASSES):
            for i in range(count):
                _write_image(root / split / name / f"{i}.png", seed=100 * s + 10 * c + i)
    manifest = prepare_image_folder("folder", tmp_path / "out", str(root))
    assert manifest.classes == CLASSES
    assert manifest.params["layout"] == "split/class"
    assert len(manifest.split("train")) == 9 and len(manifest.split("val")) == 6
    for item in manifest.items:
        split, class_name, _ = item.path.split("/")
        assert item.split == split and item.label == CLASSES.index(class_name)
    with pytest.raises(KeyError, match="train, val"):
        manifest.split("test")


def test_image_folder_split_class_layout_with_a_class_missing_from_one_split(tmp_path):
    """A class with no validation images (a rare class) is a valid layout: index what is there."""
    root = tmp_path / "src"
    for name in CLASSES:
        _write_image(root / "train" / name / "0.png", seed=len(name))
    for name in CLASSES[:2]:
        _write_image(root / "val" / name / "0.png", seed=100 + len(name))
    manifest = prepare_image_folder("folder", tmp_path / "out", str(root))
    assert manifest.classes == CLASSES
    assert len(manifest.split("train")) == 3 and len(manifest.split("val")) == 2


def test_image_folder_missing_root_is_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match=r"datasets\.folder\.root"):
        prepare_image_folder("folder", tmp_path / "out", str(tmp_path / "nope"))


# -- manifests ------------------------------------------------------------------------------------------


def test_manifest_save_load_round_trip(tmp_path):
    manifest = Manifest(
        "toy", "data/toy",
        [Item("b.png", "bb" * 32, "train", 1), Item("a.png", "aa" * 32, "val", 0), Item("c.png", "cc" * 32, "val")],
        classes=["zero", "one"], params={"per_class": {"train": 1}}, extra={"pairs": [{"h": [[1.0, 0.5]]}]},
    )
    path = tmp_path / "m" / MANIFEST_NAME
    manifest.save(path)
    loaded = Manifest.load(path)
    assert loaded == manifest
    assert loaded.identity == manifest.identity
    assert json.loads(path.read_text())["identity"] == manifest.identity
    first = path.read_bytes()
    loaded.save(path)
    assert path.read_bytes() == first


def test_manifest_identity_is_content_not_order_or_place():
    items = [Item("a.png", "aa" * 32, "train", 0), Item("b.png", "bb" * 32, "val", 1)]
    base = Manifest("toy", "data/toy", items, ["zero", "one"])
    assert Manifest("other", "/elsewhere", list(reversed(items)), ["zero", "one"]).identity == base.identity
    relabelled = [items[0], Item("b.png", "bb" * 32, "val", 0)]
    resplit = [items[0], Item("b.png", "bb" * 32, "train", 1)]
    for changed in (relabelled, resplit):
        assert Manifest("toy", "data/toy", changed, ["zero", "one"]).identity != base.identity
    assert Manifest("toy", "data/toy", items, ["zero", "one"], params={"x": 1}).identity != base.identity


def test_png_writer_is_deterministic(tmp_path):
    from harness.datasets.files import write_png as _write_png

    array = np.random.default_rng(0).integers(0, 256, size=(5, 7), dtype=np.uint8)
    sha_a, sha_b = _write_png(tmp_path / "a.png", array), _write_png(tmp_path / "b" / "b.png", array)
    assert sha_a == sha_b == sha256_file(tmp_path / "a.png")
    assert np.array_equal(np.asarray(Image.open(io.BytesIO((tmp_path / "a.png").read_bytes()))), array)
    assert not list(tmp_path.rglob("*.tmp"))
