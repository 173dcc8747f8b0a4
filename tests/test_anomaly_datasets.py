"""Anomaly datasets: `procedural_defects` (byte-deterministic, MVTec AD layout, exact one-region masks, defects that
change only their mask) and `anomaly_folder` (users' folders: items, classes and mask targets; masks optional; every
bad layout refused in one line naming the fix, before any image is read), read through one code path. `data=DIR`
for the anomaly tasks is in tests/test_anomaly_probes.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from harness.datasets.anomaly_folder import MASK, prepare_anomaly_folder
from harness.datasets.defect_textures import TEXTURES
from harness.datasets.defects import (
    DEFECTS,
    MIN_MASK_PIXELS,
    STAIN_MASK_OPACITY,
    STAIN_QUANTILE,
    draw_defect,
    own_colour,
    prepare_procedural_defects,
)
from harness.datasets.dense_targets import target_file
from harness.datasets.kinds import DatasetError, prepare_dataset

SMALL = {"size": 48, "train_good": 3, "test_good": 2, "test_per_type": 2}


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("defects")
    return out, prepare_procedural_defects("d", out, "weave", seed=0, **SMALL)


def test_the_layout_items_and_classes(generated):
    out, manifest = generated
    assert manifest.classes == ["good", "blob", "missing", "scratch", "stain"]  # good, then types in natural order
    assert [i.path for i in manifest.split("train")] == [f"train/good/{i:03d}.png" for i in range(3)]
    test = manifest.split("test")
    assert [(i.path, i.label) for i in test[:2]] == [("test/good/000.png", 0), ("test/good/001.png", 0)]
    assert {manifest.classes[i.label] for i in test[2:]} == set(DEFECTS)
    for item in test[2:]:
        kind, stem = item.path.split("/")[1], Path(item.path).stem
        assert (out / "ground_truth" / kind / f"{stem}_mask.png").is_file()
        mask = np.load(target_file(manifest, item, MASK, out))
        assert mask.dtype == np.uint8 and mask.shape == (48, 48) and set(np.unique(mask)) <= {0, 1}
    assert MASK not in manifest.extra["targets"].get("test/good/000.png", {})
    assert manifest.params["masks"] is True and manifest.params["generated"]["texture"] == "weave"


def test_the_same_seed_gives_the_same_bytes_and_another_seed_other_ones(generated, tmp_path):
    out, manifest = generated
    again = prepare_procedural_defects("d", tmp_path / "again", "weave", seed=0, **SMALL)
    assert again.identity == manifest.identity and _files(tmp_path / "again") == _files(out)
    other = prepare_procedural_defects("d", tmp_path / "other", "weave", seed=1, **SMALL)
    assert other.identity != manifest.identity


def test_a_rerun_with_fewer_images_leaves_no_stale_files(tmp_path):
    prepare_procedural_defects("d", tmp_path / "a", "tiles", seed=0, **{**SMALL, "test_per_type": 3})
    fewer = prepare_procedural_defects("d", tmp_path / "a", "tiles", seed=0, **SMALL)
    fresh = prepare_procedural_defects("d", tmp_path / "b", "tiles", seed=0, **SMALL)
    assert fewer.identity == fresh.identity and _files(tmp_path / "a") == _files(tmp_path / "b")


@pytest.mark.parametrize("texture", sorted(TEXTURES))
@pytest.mark.parametrize("kind", sorted(DEFECTS))
def test_each_defect_changes_its_mask_and_is_one_region(texture, kind):
    rng = np.random.default_rng(3)
    clean = TEXTURES[texture](np.random.default_rng(3), 96)
    image, mask = DEFECTS[kind](rng, clean.copy())
    change = np.abs(image - clean).max(axis=-1)
    assert mask.any() and change[mask].mean() > 0
    if kind == "stain":  # moved at least the opacity threshold of the way to the stain's colour inside, less outside
        towards = np.abs(own_colour(clean, STAIN_QUANTILE) - clean).max(axis=-1)
        assert (change[mask] >= STAIN_MASK_OPACITY * towards[mask] - 1e-9).all()
        assert (change[~mask] < STAIN_MASK_OPACITY * towards[~mask] + 1e-9).all()
    else:
        assert (change[~mask] == 0).all()
    _, drawn = draw_defect(np.random.default_rng(5), texture, kind, 96)
    _, regions = ndimage.label(drawn, structure=np.ones((3, 3), int))
    assert regions == 1 and drawn.sum() >= MIN_MASK_PIXELS


def test_good_images_differ(generated):
    out, _ = generated
    images = [np.asarray(Image.open(out / f"train/good/{i:03d}.png")) for i in range(3)]
    assert not np.array_equal(images[0], images[1]) and not np.array_equal(images[1], images[2])


def test_a_users_folder_reads_like_the_generated_one(generated, tmp_path):
    out, manifest = generated
    folder = tmp_path / "mine"
    for part in ("train", "test", "ground_truth"):
        shutil.copytree(out / part, folder / part)
    mine = prepare_anomaly_folder("d", tmp_path / "prepared", str(folder))
    assert [(i.path, i.sha256, i.split, i.label) for i in mine.items] == [
        (i.path, i.sha256, i.split, i.label) for i in manifest.items]
    assert mine.classes == manifest.classes and mine.extra == manifest.extra
    limited = prepare_anomaly_folder("d", tmp_path / "limited", str(folder), limit_per_class=1)
    assert len(limited.split("train")) == 1 and len(limited.split("test")) == 1 + len(DEFECTS)


def test_masks_are_optional_and_any_png_mode_reads_the_same(generated, tmp_path):
    out, manifest = generated
    folder = tmp_path / "mine"
    for part in ("train", "test"):
        shutil.copytree(out / part, folder / part)
    without = prepare_anomaly_folder("d", tmp_path / "p1", str(folder))
    assert without.params["masks"] is False and "ground_truth" in without.params["pixel_metrics"]
    assert without.extra["targets"] == {} and without.identity != manifest.identity
    shutil.copytree(out / "ground_truth", folder / "ground_truth")
    rgb = folder / "ground_truth" / "blob" / "000_mask.png"
    Image.open(rgb).convert("RGB").save(rgb)
    one_bit = folder / "ground_truth" / "scratch" / "000_mask.png"
    Image.open(one_bit).convert("1").save(one_bit)
    converted = prepare_anomaly_folder("d", tmp_path / "p2", str(folder))
    for path in ("test/blob/000.png", "test/scratch/000.png"):
        assert np.array_equal(np.load(target_file(converted, path, MASK, tmp_path / "p2")),
                              np.load(target_file(manifest, path, MASK, out)))


def _folder(root: Path, layout: dict[str, int], size: int = 16) -> Path:
    """Images in `layout` (folder → count) and, for ground_truth/<type>, masks named after test/<type>'s images."""
    for folder, count in layout.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for index in range(count):
            if folder.startswith("ground_truth"):
                Image.fromarray(np.full((size, size), 255, np.uint8)).save(root / folder / f"{index}_mask.png")
            else:
                Image.fromarray(np.full((size, size, 3), index * 40, np.uint8)).save(root / folder / f"{index}.png")
    return root


GOOD_LAYOUT = {"train/good": 2, "test/good": 1, "test/crack": 1, "ground_truth/crack": 1}


@pytest.mark.parametrize(("change", "message"), [
    ({"train/good": 0}, "train/good/"),
    ({"train/crack": 1}, "train/ holds only good/"),
    ({"test/good": 0}, "no images in test/good/"),
    ({"test/crack": 0, "ground_truth/crack": 0}, "no defective images"),
    ({"test/bad type": 1}, "rename them"),
    ({"test/hole": 1}, "ground_truth/ has no folder for defect type.* hole"),
])
def test_a_bad_layout_is_refused_in_one_line_before_any_image_is_read(tmp_path, change, message):
    root = _folder(tmp_path / "data", {k: v for k, v in {**GOOD_LAYOUT, **change}.items() if v})
    with pytest.raises(DatasetError, match=message) as caught:
        prepare_dataset("d", {"kind": "anomaly_folder", "root": str(root)}, tmp_path / "out")
    assert "\n" not in str(caught.value)


def test_a_missing_or_misfit_mask_names_the_file(tmp_path):
    root = _folder(tmp_path / "data", {**GOOD_LAYOUT, "ground_truth/crack": 0})
    with pytest.raises(DatasetError, match=r"ground_truth/crack/0_mask\.png not found"):
        prepare_anomaly_folder("d", tmp_path / "out", str(root))
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(root / "ground_truth" / "crack" / "0_mask.png")
    with pytest.raises(DatasetError, match="must be its image's size"):
        prepare_anomaly_folder("d", tmp_path / "out", str(root))


def test_the_generator_refuses_unknown_textures_and_types(tmp_path):
    with pytest.raises(DatasetError, match="texture 'silk'"):
        prepare_procedural_defects("d", tmp_path, "silk", seed=0)
    with pytest.raises(DatasetError, match="defect_types"):
        prepare_procedural_defects("d", tmp_path, "weave", seed=0, defect_types=["crack"])
