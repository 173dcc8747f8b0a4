"""Real-world dataset kinds read from their official layouts (sun397, cub200_2011, stanford_cars, ade20k), on tiny
fixtures written in those exact layouts: the list files' formats, the devkit's .mat structures, the challenge's
8-bit label maps. None of these datasets is on this machine; their grids are declared and wait for the data."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import yaml
from PIL import Image

from harness.core import paths
from harness.core.hashing import sha256_file
from harness.datasets.dense_targets import read_array, target_file
from harness.datasets.kinds import DatasetError, prepare_dataset
from harness.datasets.manifest import MANIFEST_NAME, Manifest

ROOT = Path(__file__).resolve().parents[1]


def _jpg(path: Path, seed: int, size: tuple[int, int] = (12, 10)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=90)


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))


def _check_items(manifest: Manifest, root: Path) -> None:
    """Every item is a file under root, hashed, labelled within the classes; nothing was copied."""
    for item in manifest.items:
        assert (root / item.path).is_file() and item.sha256 == sha256_file(root / item.path)
        assert 0 <= item.label < len(manifest.classes)
    assert len({i.path for i in manifest.items}) == len(manifest.items)


def _moved_identity(spec: dict, root: Path, tmp_path: Path) -> str:
    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    shutil.move(str(root), moved)
    return prepare_dataset("renamed", {**spec, "root": str(moved)}, tmp_path / "prepared-elsewhere").identity


# -- sun397 ----------------------------------------------------------------------------------------

SUN_CLASSES = ["/a/abbey", "/a/apartment_building/outdoor", "/b/beach"]


def _sun_fixture(root: Path) -> dict[str, str]:
    """4 images a class; partition 01 trains on the first two and tests on the last two, partition 02 the
    reverse (the real lists hold 50 + 50 a class). One image is in no list. Returns file → class path."""
    truth, lists = {}, {1: ([], []), 2: ([], [])}
    letters = "qwertyuiopasdfgh"
    for c, class_path in enumerate(SUN_CLASSES):
        for n in range(4):
            line = f"{class_path}/sun_{letters[c + n:c + n + 8]}{c}{n}.jpg"
            _jpg(root / "SUN397" / line[1:], 10 * c + n)
            truth[f"SUN397{line}"] = class_path
            lists[1][0 if n < 2 else 1].append(line)
            lists[2][1 if n < 2 else 0].append(line)
    _jpg(root / "SUN397" / "b" / "beach" / "sun_unlisted.jpg", 99)
    _write(root / "SUN397" / "ClassName.txt", SUN_CLASSES)  # the tarball's copy, not read
    _write(root / "Partitions" / "ClassName.txt", SUN_CLASSES)
    for partition, (train, test) in lists.items():
        _write(root / "Partitions" / f"Training_{partition:02d}.txt", train)
        _write(root / "Partitions" / f"Testing_{partition:02d}.txt", test)
    return truth


def test_sun397_official_partition(tmp_path):
    root, out = tmp_path / "sun397", tmp_path / "prepared"
    truth = _sun_fixture(root)
    spec = {"kind": "sun397", "root": str(root)}
    manifest = prepare_dataset("sun", spec, out)
    assert manifest.classes == ["abbey", "apartment_building/outdoor", "beach"]
    _check_items(manifest, root)
    assert {i.split for i in manifest.items} == {"train", "test"}
    assert len(manifest.split("train")) == len(manifest.split("test")) == 6
    for item in manifest.items:
        assert SUN_CLASSES[item.label] == truth[item.path]  # the class is the folder the line names
    assert "SUN397/b/beach/sun_unlisted.jpg" not in {i.path for i in manifest.items}
    assert manifest.params["partition"] == 1 and not list(out.rglob("*.jpg"))
    assert Manifest.load(out / MANIFEST_NAME).identity == manifest.identity
    second = prepare_dataset("sun", {**spec, "partition": 2}, tmp_path / "p2")
    assert {i.path for i in second.split("train")} == {i.path for i in manifest.split("test")}
    few = prepare_dataset("sun", {**spec, "per_class": {"train": 1}}, tmp_path / "few")
    train = few.split("train")
    assert sorted(i.label for i in train) == [0, 1, 2] and len(few.split("test")) == 6
    assert {i.path for i in train} <= {i.path for i in manifest.split("train")}
    assert prepare_dataset("sun", {**spec, "per_class": {"train": 1}}, tmp_path / "again").identity == few.identity
    assert few.identity != manifest.identity
    assert _moved_identity(spec, root, tmp_path) == manifest.identity


def test_sun397_refuses_bad_folders_in_one_line(tmp_path):
    root = tmp_path / "sun397"
    _sun_fixture(root)
    spec = {"kind": "sun397", "root": str(root)}
    sun397 = importlib.import_module("harness.datasets.sun397")
    assert sun397.check_layout("sun", root=str(tmp_path / "absent")) is None  # a grid without its data: skipped
    assert sun397.check_layout("sun", root=str(root)) is None
    with pytest.raises(DatasetError, match=r"folder .*absent not found \(set datasets.sun.root"):
        prepare_dataset("sun", {**spec, "root": str(tmp_path / "absent")}, tmp_path / "o")
    with pytest.raises(DatasetError, match=r"partition must be 1..10"):
        prepare_dataset("sun", {**spec, "partition": 11}, tmp_path / "o")
    with pytest.raises(DatasetError, match=r"looks like SUN397/ itself"):
        prepare_dataset("sun", {**spec, "root": str(root / "SUN397")}, tmp_path / "o")
    with pytest.raises(DatasetError, match=r"per_class names split.* val"):
        prepare_dataset("sun", {**spec, "per_class": {"val": 2}}, tmp_path / "o")
    (root / "Partitions" / "Training_01.txt").write_text("/a/abbey/sun_x.jpg\n/z/zoo/sun_y.jpg\n")
    with pytest.raises(DatasetError, match=r"Training_01.txt line 2: '/z/zoo/sun_y.jpg' is not an image of a class"):
        prepare_dataset("sun", spec, tmp_path / "o")
    (root / "Partitions" / "Training_01.txt").write_text("/a/abbey/sun_x.jpg\n")
    with pytest.raises(DatasetError, match=r"1 listed image\(s\) not found .* SUN397/a/abbey/sun_x.jpg"):
        prepare_dataset("sun", spec, tmp_path / "o")
    (root / "Partitions" / "Testing_01.txt").unlink()
    message = sun397.check_layout("sun", root=str(root))
    assert "Testing_01.txt not found" in message and "Partitions.zip" in message and "\n" not in message
    with pytest.raises(DatasetError, match=r"Testing_01.txt not found"):
        prepare_dataset("sun", spec, tmp_path / "o")


# -- cub200_2011 -----------------------------------------------------------------------------------

CUB_CLASSES = ["001.Black_footed_Albatross", "002.Laysan_Albatross", "003.Sooty_Albatross"]


def _cub_fixture(root: Path) -> dict[int, tuple[str, int, int]]:
    """3 classes × 4 images in CUB_200_2011.tgz's layout; ids in class order, as the release numbers them.
    Returns id → (image_name, class_id, is_training_image)."""
    truth = {}
    for c, class_name in enumerate(CUB_CLASSES, start=1):
        for n in range(4):
            image_id = len(truth) + 1
            image_name = f"{class_name}/{class_name[4:]}_{n:04d}_{image_id}.jpg"
            _jpg(root / "images" / image_name, image_id)
            truth[image_id] = (image_name, c, 1 if n % 2 == 0 else 0)
    _write(root / "images.txt", [f"{i} {name}" for i, (name, _, _) in truth.items()])
    _write(root / "image_class_labels.txt", [f"{i} {c}" for i, (_, c, _) in truth.items()])
    _write(root / "train_test_split.txt", [f"{i} {t}" for i, (_, _, t) in truth.items()])
    _write(root / "classes.txt", [f"{c} {name}" for c, name in enumerate(CUB_CLASSES, start=1)])
    _write(root / "bounding_boxes.txt", [f"{i} 1.0 1.0 5.0 5.0" for i in truth])  # present, not read
    return truth


def test_cub200_2011_official_split(tmp_path):
    root, out = tmp_path / "CUB_200_2011", tmp_path / "prepared"
    truth = _cub_fixture(root)
    spec = {"kind": "cub200_2011", "root": str(root)}
    manifest = prepare_dataset("cub", spec, out)
    assert manifest.classes == ["Black_footed_Albatross", "Laysan_Albatross", "Sooty_Albatross"]
    _check_items(manifest, root)
    expected = {f"images/{name}": ("train" if t else "test", c - 1) for name, c, t in truth.values()}
    assert {i.path: (i.split, i.label) for i in manifest.items} == expected
    assert [i.path for i in manifest.items] == sorted(  # split by split, image-id order within
        [i.path for i in manifest.items], key=lambda p: (expected[p][0], int(Path(p).stem.rsplit("_", 1)[1])))
    few = prepare_dataset("cub", {**spec, "per_class": {"train": 1, "test": 1}}, tmp_path / "few")
    assert sorted((i.split, i.label) for i in few.items) == sorted((s, c) for s in ("test", "train") for c in range(3))
    assert _moved_identity(spec, root, tmp_path) == manifest.identity


def test_cub200_2011_refuses_bad_folders_in_one_line(tmp_path):
    root = tmp_path / "data" / "CUB_200_2011"
    _cub_fixture(root)
    spec = {"kind": "cub200_2011", "root": str(root)}
    with pytest.raises(DatasetError, match=r"holds CUB_200_2011/: set datasets.cub.root to .*CUB_200_2011"):
        prepare_dataset("cub", {**spec, "root": str(root.parent)}, tmp_path / "o")
    (root / "image_class_labels.txt").write_text("1 1\n2 1\n3 2\n4 1\n5 2\n6 2\n7 2\n8 2\n9 3\n10 3\n11 3\n12 3\n")
    with pytest.raises(DatasetError, match=r"image 3 \(001.Black_footed_Albatross/.*\) is labelled 002.Laysan_Alba"):
        prepare_dataset("cub", spec, tmp_path / "o")
    (root / "image_class_labels.txt").write_text("1 1\n2 one\n")
    with pytest.raises(DatasetError, match=r"image_class_labels.txt line 2: expected '<id> <integer>', got '2 one'"):
        prepare_dataset("cub", spec, tmp_path / "o")
    (root / "image_class_labels.txt").write_text("1 1\n")
    with pytest.raises(DatasetError, match=r"image_class_labels.txt and images.txt list different image ids"):
        prepare_dataset("cub", spec, tmp_path / "o")
    (root / "train_test_split.txt").unlink()
    with pytest.raises(DatasetError, match=r"train_test_split.txt not found in .*: extract CUB_200_2011.tgz"):
        prepare_dataset("cub", spec, tmp_path / "o")


# -- stanford_cars ---------------------------------------------------------------------------------

CAR_CLASSES = ["AM General Hummer SUV 2000", "Acura RL Sedan 2012", "Acura TL Sedan 2012"]


def _cars_annotations(path: Path, rows: list[tuple[str, int]], labelled: bool = True) -> None:
    """Like the devkit: `annotations`, a 1×N struct array (bbox_x1, bbox_y1, bbox_x2, bbox_y2, class, fname)."""
    fields = ["bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2"] + (["class"] if labelled else []) + ["fname"]
    records = np.zeros((1, len(rows)), dtype=[(f, object) for f in fields])
    for n, (fname, label) in enumerate(rows):
        box = [np.array([[v]], dtype=np.uint16) for v in (2, 1, 9, 8)]
        records[0, n] = tuple(box + ([np.array([[label]], dtype=np.uint8)] if labelled else []) + [np.array([fname])])
    path.parent.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(str(path), {"annotations": records})


def _cars_fixture(root: Path) -> dict[str, int]:
    """3 classes; 6 train and 3 test images in the original release's layout. Returns item path → class (1-based)."""
    meta = np.empty((1, len(CAR_CLASSES)), dtype=object)
    meta[0, :] = CAR_CLASSES
    (root / "devkit").mkdir(parents=True)
    scipy.io.savemat(str(root / "devkit" / "cars_meta.mat"), {"class_names": meta})
    train = [(f"{n:05d}.jpg", (n - 1) % 3 + 1) for n in range(1, 7)]
    test = [(f"{n:05d}.jpg", [3, 1, 2][n - 1]) for n in range(1, 4)]
    _cars_annotations(root / "devkit" / "cars_train_annos.mat", train)
    _cars_annotations(root / "devkit" / "cars_test_annos.mat", test, labelled=False)  # the devkit's, unlabelled
    _cars_annotations(root / "cars_test_annos_withlabels.mat", test)
    truth = {}
    for folder, rows, seed in (("cars_train", train, 0), ("cars_test", test, 100)):
        for n, (fname, label) in enumerate(rows):
            _jpg(root / folder / fname, seed + n)
            truth[f"{folder}/{fname}"] = label
    return truth


def test_stanford_cars_devkit_layout(tmp_path):
    root, out = tmp_path / "stanford_cars", tmp_path / "prepared"
    truth = _cars_fixture(root)
    meta = scipy.io.loadmat(str(root / "devkit" / "cars_meta.mat"))["class_names"]
    annos = scipy.io.loadmat(str(root / "devkit" / "cars_train_annos.mat"))["annotations"]
    # the devkit's MATLAB structures: a 1×196 cell array, a 1×N struct array with these fields in this order
    assert meta.shape == (1, 3) and meta.dtype == object and annos.shape == (1, 6)
    assert annos.dtype.names == ("bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "fname")
    spec = {"kind": "stanford_cars", "root": str(root)}
    manifest = prepare_dataset("cars", spec, out)
    assert manifest.classes == CAR_CLASSES
    _check_items(manifest, root)
    assert {i.path: i.label + 1 for i in manifest.items} == truth
    assert [i.path for i in manifest.split("test")] == ["cars_test/00001.jpg", "cars_test/00002.jpg",
                                                         "cars_test/00003.jpg"]
    few = prepare_dataset("cars", {**spec, "per_class": {"train": 1}}, tmp_path / "few")
    assert [i.path for i in few.split("train")] == ["cars_train/00001.jpg", "cars_train/00002.jpg",
                                                     "cars_train/00003.jpg"]
    shutil.move(str(root / "cars_test_annos_withlabels.mat"), root / "devkit")  # also read from devkit/
    assert prepare_dataset("cars", spec, tmp_path / "devkit").identity == manifest.identity
    assert _moved_identity(spec, root, tmp_path) == manifest.identity


def test_stanford_cars_refuses_bad_folders_in_one_line(tmp_path):
    root = tmp_path / "stanford_cars"
    _cars_fixture(root)
    spec = {"kind": "stanford_cars", "root": str(root)}
    labelled = root / "cars_test_annos_withlabels.mat"
    shutil.copy(root / "devkit" / "cars_test_annos.mat", labelled)
    with pytest.raises(DatasetError, match=r"has bbox_x1, .*fname \(the unlabelled test list: use cars_test"):
        prepare_dataset("cars", spec, tmp_path / "o")
    labelled.unlink()
    with pytest.raises(DatasetError, match=r"withlabels.mat not found \(devkit/cars_test_annos.mat has no"):
        prepare_dataset("cars", spec, tmp_path / "o")
    labelled.write_text("not a mat file")
    with pytest.raises(DatasetError, match=r"cars_test_annos_withlabels.mat is not a readable MATLAB file"):
        prepare_dataset("cars", spec, tmp_path / "o")
    _cars_annotations(labelled, [("00001.jpg", 4)])
    with pytest.raises(DatasetError, match=r"annotation 1 \(00001.jpg\) has class .*valid: 1..3"):
        prepare_dataset("cars", spec, tmp_path / "o")
    _cars_annotations(labelled, [("09999.jpg", 1)])
    with pytest.raises(DatasetError, match=r"1 listed image.* e.g. cars_test/09999.jpg"):
        prepare_dataset("cars", spec, tmp_path / "o")
    nested = root / "cars_train" / "cars_train"
    nested.mkdir()
    with pytest.raises(DatasetError, match=r"nested \(the Kaggle mirror's layout\): move its images up"):
        prepare_dataset("cars", spec, tmp_path / "o")


# -- ade20k ----------------------------------------------------------------------------------------

def _object_info(path: Path, csv_form: bool = False) -> list[str]:
    """objectInfo150 as the challenge zip writes it (tab-separated, stray spaces kept) or the .csv copy."""
    names = ["wall", "building, edifice", "sky", "floor, flooring", "tree", "ceiling", "road, route", "bed"]
    names += [f"thing {k}" for k in range(9, 151)]
    if csv_form:
        names = [n.replace(", ", ";").replace(" ", ";") for n in names]
        rows = ["Idx,Ratio,Train,Val,Name"] + [f"{k},0.0010,10,1,{n}" for k, n in enumerate(names, start=1)]
    else:
        rows = ["Idx\tRatio\tTrain\tVal\tName"] + [f"{k}{' ' if k == 22 else ''}\t0.0010\t10\t1\t{n}"
                                                   for k, n in enumerate(names, start=1)]
        rows[8] += " "  # "bed " in the release
    _write(path, rows)
    return [n.strip() for n in names]


def _ade_fixture(root: Path) -> dict[str, np.ndarray]:
    labels = {}
    for split, prefix, count in (("training", "ADE_train", 3), ("validation", "ADE_val", 2)):
        for n in range(1, count + 1):
            stem = f"{prefix}_{n:08d}"
            _jpg(root / "images" / split / f"{stem}.jpg", n + 10 * len(prefix), size=(16, 12))
            label = np.random.default_rng(n).integers(0, 151, size=(12, 16)).astype(np.uint8)
            label[0, :4] = [0, 1, 150, 2]
            path = root / "annotations" / split / f"{stem}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(label, "L").save(path)
            labels[f"images/{split}/{stem}.jpg"] = label
    (root / "sceneCategories.txt").write_text("ADE_train_00000001 airport_terminal\n")  # present, not read
    return labels


def test_ade20k_targets_shift_classes_and_ignore_other(tmp_path):
    root, out = tmp_path / "ADEChallengeData2016", tmp_path / "prepared"
    labels = _ade_fixture(root)
    names = _object_info(root / "objectInfo150.txt")
    spec = {"kind": "ade20k", "root": str(root)}
    manifest = prepare_dataset("ade", spec, out)
    assert manifest.classes == names and manifest.classes[1] == "building, edifice" and manifest.classes[7] == "bed"
    assert manifest.params["class_names"] == "objectInfo150.txt" and manifest.extra["ignore_index"] == 255
    assert [(i.split, i.path) for i in manifest.items] == [
        ("train", "images/training/ADE_train_00000001.jpg"), ("train", "images/training/ADE_train_00000002.jpg"),
        ("train", "images/training/ADE_train_00000003.jpg"), ("val", "images/validation/ADE_val_00000001.jpg"),
        ("val", "images/validation/ADE_val_00000002.jpg")]
    for item in manifest.items:
        assert item.label is None and item.sha256 == sha256_file(root / item.path)
        entry = manifest.extra["targets"][item.path]["semantic"]
        path = target_file(manifest, item, "semantic", out)
        assert entry["base"] == "prepared" and path.is_relative_to(out) and entry["sha256"] == sha256_file(path)
        semantic, raw = read_array(path), labels[item.path]
        assert semantic.dtype == np.uint8 and semantic.shape == raw.shape
        np.testing.assert_array_equal(semantic[raw == 0], 255)
        np.testing.assert_array_equal(semantic[raw > 0], raw[raw > 0] - 1)
        assert semantic[0, :4].tolist() == [255, 0, 149, 1]
    assert not list(out.rglob("*.jpg"))  # images stay in root
    first = prepare_dataset("ade", {**spec, "splits": ["val"], "limit_per_split": 1}, tmp_path / "first")
    assert [i.path for i in first.items] == ["images/validation/ADE_val_00000001.jpg"]
    # class names: the .csv copy when the .txt is absent, else ADE's indices; each named in the params
    (root / "objectInfo150.txt").unlink()
    by_index = prepare_dataset("ade", spec, tmp_path / "indices")
    assert by_index.classes == [str(k) for k in range(1, 151)] and by_index.params["class_names"] == "indices"
    assert by_index.identity != manifest.identity
    csv_names = _object_info(root / "objectInfo150.csv", csv_form=True)
    by_csv = prepare_dataset("ade", spec, tmp_path / "csv")
    assert by_csv.classes == csv_names and csv_names[1] == "building;edifice"
    # one label pixel changes the identity; moving the folder keeps it
    label = labels["images/validation/ADE_val_00000002.jpg"].copy()
    label[5, 5] = 0 if label[5, 5] else 1
    Image.fromarray(label, "L").save(root / "annotations" / "validation" / "ADE_val_00000002.png")
    changed = prepare_dataset("ade", spec, tmp_path / "changed").identity
    assert changed != by_csv.identity
    assert _moved_identity(spec, root, tmp_path) == changed


def test_ade20k_refuses_bad_folders_in_one_line(tmp_path):
    root = tmp_path / "data" / "ADEChallengeData2016"
    _ade_fixture(root)
    spec = {"kind": "ade20k", "root": str(root)}
    ade20k = importlib.import_module("harness.datasets.ade20k")
    assert ade20k.check_layout("ade", root=str(root)) is None
    with pytest.raises(DatasetError, match=r"holds ADEChallengeData2016/: set datasets.ade.root to"):
        prepare_dataset("ade", {**spec, "root": str(root.parent)}, tmp_path / "o")
    with pytest.raises(DatasetError, match=r"splits must be among train, val"):
        prepare_dataset("ade", {**spec, "splits": ["training"]}, tmp_path / "o")
    _write(root / "objectInfo150.txt", ["Idx\tRatio\tTrain\tVal\tName", "1\t0.1\t1\t1\twall"])
    with pytest.raises(DatasetError, match=r"must list classes 1..150 once each; it lists 1"):
        prepare_dataset("ade", spec, tmp_path / "o")
    (root / "objectInfo150.txt").unlink()
    bad = root / "annotations" / "validation" / "ADE_val_00000001.png"
    Image.fromarray(np.full((12, 16), 151, np.uint8), "L").save(bad)
    with pytest.raises(DatasetError, match=r"ADE_val_00000001.png holds class 151; the challenge has 0..150"):
        prepare_dataset("ade", spec, tmp_path / "o")
    Image.fromarray(np.zeros((12, 16, 3), np.uint8)).save(bad)
    with pytest.raises(DatasetError, match=r"ADE_val_00000001.png is mode RGB"):
        prepare_dataset("ade", spec, tmp_path / "o")
    Image.fromarray(np.zeros((6, 16), np.uint8), "L").save(bad)
    with pytest.raises(DatasetError, match=r"ADE_val_00000001.png is 16×6, its image 16×12"):
        prepare_dataset("ade", spec, tmp_path / "o")
    bad.unlink()
    with pytest.raises(DatasetError, match=r"1 image\(s\) in images/validation have no annotations/validation/"):
        prepare_dataset("ade", spec, tmp_path / "o")
    shutil.rmtree(root / "annotations" / "validation")
    with pytest.raises(DatasetError, match=r"annotations/validation not found: extract ADEChallengeData2016.zip"):
        prepare_dataset("ade", spec, tmp_path / "o")


# -- the probes read them, and the declared grids validate --------------------------------------------

# What params.yaml declares for these datasets (added to a copy where params.yaml does not have them yet)
DECLARED = yaml.safe_load("""
datasets:
  sun397: {kind: sun397, root: ../shared/data/sun397, partition: 1}
  cub200: {kind: cub200_2011, root: ../shared/data/CUB_200_2011}
  stanford_cars: {kind: stanford_cars, root: ../shared/data/stanford_cars}
  ade20k: {kind: ade20k, root: ../shared/data/ADEChallengeData2016, splits: [train, val]}
grids:
  sun397:
    backbones: [efficientnet_lite0, efficientnet_lite1, efficientnet_lite2, resnet18.random, clip_vitb32.random]
    tasks: {classification: sun397}
    probes: {classification: {eval_split: test}}
  cub200:
    backbones: [efficientnet_lite0, efficientnet_lite1, efficientnet_lite2, resnet18.random, clip_vitb32.random]
    tasks: {classification: cub200, retrieval: cub200, class_overlap: cub200, head_family: cub200}
    probes: &test_split {classification: {eval_split: test}, retrieval: {query_split: test},
                         class_overlap: {eval_split: test}, head_family: {eval_split: test}}
  stanford_cars:
    backbones: [efficientnet_lite0, efficientnet_lite1, efficientnet_lite2, resnet18.random, clip_vitb32.random]
    tasks: {classification: stanford_cars, retrieval: stanford_cars, class_overlap: stanford_cars,
            head_family: stanford_cars}
    probes: *test_split
  ade20k:
    backbones: [efficientnet_lite0, efficientnet_lite1, efficientnet_lite2, resnet18.random, clip_vitb32.random]
    tasks: {semantic_segmentation: ade20k}
""")


@pytest.fixture(scope="module")
def declared_params():
    from harness.core.config import Params

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    for section in ("datasets", "grids"):
        for key, value in DECLARED[section].items():
            raw[section].setdefault(key, value)
    return Params.model_validate(raw)


def test_declared_grids_validate_and_list_names_the_data(declared_params, monkeypatch):
    from harness.pipeline.checks import check_params, missing_requirements, missing_requirements_note

    monkeypatch.chdir(ROOT)  # roots are relative to the project, as stages run
    check_params(declared_params)
    for grid, dataset in (("sun397", "sun397"), ("cub200", "cub200"), ("stanford_cars", "stanford_cars"),
                          ("ade20k", "ade20k")):
        if Path(declared_params.datasets[dataset]["root"]).exists():
            continue
        # `visbench-harness list` prints "(needs <root>)" for the grid; the run's note names the key to set
        assert missing_requirements(declared_params, grid) == [declared_params.datasets[dataset]["root"]]
        note = missing_requirements_note(declared_params, grid)
        assert note is not None and f"set datasets.{dataset}.root in params.yaml" in note


def test_layouts_are_checked_before_any_stage(declared_params, tmp_path):
    """The CLI's pre-stage check (`layout_problems`) reaches each kind's `check_layout`: one line, naming the fix."""
    from harness.pipeline.checks import layout_problems

    folders = {"sun397": tmp_path / "sun397", "cub200": tmp_path / "data" / "CUB_200_2011",
               "stanford_cars": tmp_path / "cars", "ade20k": tmp_path / "ADEChallengeData2016"}
    _sun_fixture(folders["sun397"])
    (folders["sun397"] / "Partitions" / "Testing_01.txt").unlink()
    _cub_fixture(folders["cub200"])
    _cars_fixture(folders["stanford_cars"])
    (folders["stanford_cars"] / "cars_test_annos_withlabels.mat").unlink()
    (folders["ade20k"] / "images" / "training").mkdir(parents=True)
    params = declared_params.model_copy(deep=True)
    for dataset, folder in folders.items():
        params.datasets[dataset]["root"] = str(folder.parent if dataset == "cub200" else folder)
    problems = layout_problems(params, list(folders))
    assert len(problems) == 4 and not any("\n" in p for p in problems)
    for problem, expected in zip(problems, ("Testing_01.txt not found", "holds CUB_200_2011/: set datasets.cub200",
                                            "cars_test_annos_withlabels.mat not found (devkit/cars_test_annos.mat",
                                            "annotations/training, "), strict=True):
        assert expected in problem, problem


def _features(manifest: Manifest, dense: bool = False) -> dict[str, np.ndarray]:
    """Random features with a class signal, so a probe has something to learn."""
    rng = np.random.default_rng(0)
    out = {}
    for item in manifest.items:
        if dense:
            out[item.path] = rng.normal(size=(8, 4, 4)).astype(np.float32)
        else:
            signal = np.zeros(16, np.float32)
            signal[item.label] = 3.0
            out[item.path] = (signal + rng.normal(size=16)).astype(np.float32)
    return out


def test_the_pooled_probes_read_a_classification_manifest(declared_params, tmp_path):
    from harness.core.config import probe_block
    from harness.probes import ProbeInputs, get_probe, validate_probe_params

    root = tmp_path / "CUB_200_2011"
    _cub_fixture(root)
    manifest = prepare_dataset("cub200", {"kind": "cub200_2011", "root": str(root)}, tmp_path / "prepared")
    features = _features(manifest)
    for task in ("classification", "retrieval", "class_overlap", "head_family"):
        params = validate_probe_params(task, probe_block(declared_params, "cub200", task))
        params |= {"epochs": 5} if "epochs" in params else {}
        params |= {"k": 3} if "k" in params else {}
        result = get_probe(task).run(ProbeInputs(manifest, lambda item: features[item.path], params, seed=0))
        assert result.metrics and all(np.isfinite(v) for v in result.metrics.values()), task
        assert len(result.sample_ids) == len(manifest.split("test")), task  # scored on the official test split


def test_the_semantic_probe_reads_ade20k_and_ignores_other(declared_params, tmp_path):
    from harness.core.config import probe_block
    from harness.probes import ProbeInputs, get_probe, validate_probe_params

    root = tmp_path / "ADEChallengeData2016"
    _ade_fixture(root)
    params = validate_probe_params("semantic_segmentation", probe_block(declared_params, "ade20k",
                                                                        "semantic_segmentation"))
    params |= {"epochs": 2, "target_size": 8, "batch_size": 2}
    with paths.workspace(tmp_path / "workspace"):  # converted targets are found beside the manifest, as in a stage
        manifest = prepare_dataset("ade20k", {"kind": "ade20k", "root": str(root)}, paths.dataset_dir("ade20k"))
        features = _features(manifest, dense=True)
        run = lambda: get_probe("semantic_segmentation").run(  # noqa: E731
            ProbeInputs(manifest, lambda item: features[item.path], params, seed=0))
        result = run()
        again = run()
    assert all(np.isfinite(v) for v in result.metrics.values()) and 0.0 <= result.metrics["miou"] <= 1.0
    assert result.head.config["out_channels"] == 150 and again.metrics == result.metrics
