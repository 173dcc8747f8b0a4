"""Bad input files, made for real: each is a clear error naming the file, or a recorded skip with a count.

Truncated JPEGs, text under an image name, 16-bit and CMYK pixels, float TIFFs, empty folders and classes too
small to train and evaluate on (`harness.datasets.decode`, `harness.datasets.image_folder`).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.datasets.decode import ImageDecodeError, decode_rgb
from harness.datasets.image_folder import prepare_image_folder
from harness.datasets.kinds import DatasetError, prepare_dataset
from harness.runs.extract import load_image


def _noise(seed: int, size: int = 24) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3)).astype(np.uint8)


def _png16(path: Path, values: np.ndarray) -> None:
    """A real 16-bit PNG (greyscale (H, W) or RGB (H, W, 3)), written by hand: Pillow cannot write 16-bit RGB."""
    height, width = values.shape[:2]
    colour_type = 2 if values.ndim == 3 else 0
    raw = b"".join(b"\x00" + values[y].astype(">u2").tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 16, colour_type, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
                     + chunk(b"IEND", b""))


def _folder(root: Path, per_class: int = 3) -> Path:
    for split in ("train", "val"):
        for label in range(2):
            folder = root / split / f"class{label}"
            folder.mkdir(parents=True)
            for index in range(per_class):
                Image.fromarray(_noise(100 * label + 10 * index + (split == "val"))).save(folder / f"{index}.png")
    return root


# -- one file at a time ------------------------------------------------------------------------------------


def test_a_truncated_jpeg_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "cut.jpg"
    Image.fromarray(_noise(0, 64)).save(path, quality=90)
    path.write_bytes(path.read_bytes()[:-200])  # the last scan lines are gone
    with pytest.raises(ImageDecodeError, match=r"cut\.jpg.*truncated"):
        decode_rgb(path)
    with pytest.raises(ImageDecodeError, match=r"cut\.jpg"):  # extraction decodes through the same function
        load_image(path)


def test_truncated_images_never_load_even_when_a_library_allows_them(tmp_path, monkeypatch):
    from PIL import ImageFile

    path = tmp_path / "cut.jpg"
    Image.fromarray(_noise(0, 64)).save(path, quality=90)
    path.write_bytes(path.read_bytes()[:-200])
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)  # what some libraries do at import
    with pytest.raises(ImageDecodeError, match=r"cut\.jpg"):
        decode_rgb(path)
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True  # restored for whoever set it


def test_a_text_file_under_an_image_name_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "notes.png"
    path.write_text("these are my notes, not a picture\n")
    with pytest.raises(ImageDecodeError, match=r"notes\.png.*not an image"):
        decode_rgb(path)


def test_16_bit_greyscale_png_is_scaled_not_clipped(tmp_path):
    path = tmp_path / "depth16.png"
    values = (np.arange(16 * 16).reshape(16, 16) * 257).astype(np.uint16)  # 0 .. 65535 in even steps
    _png16(path, values)
    with Image.open(path) as image:
        assert image.mode == "I;16"
        clipped = np.asarray(image.convert("RGB"))[..., 0]
    assert (clipped == 255).mean() > 0.9  # what a plain convert("RGB") gives: almost all white, silently
    rgb = np.asarray(decode_rgb(path))
    assert rgb.shape == (16, 16, 3) and rgb.dtype == np.uint8
    assert np.array_equal(rgb[..., 0], (values >> 8).astype(np.uint8))
    assert np.array_equal(rgb[..., 0], rgb[..., 2])


def test_16_bit_rgb_png_keeps_its_high_bytes(tmp_path):
    path = tmp_path / "rgb16.png"
    values = np.random.default_rng(1).integers(0, 65536, (8, 8, 3)).astype(np.uint16)
    _png16(path, values)
    assert np.array_equal(np.asarray(decode_rgb(path)), (values >> 8).astype(np.uint8))


def test_cmyk_converts_by_the_device_formula(tmp_path):
    cmyk = np.random.default_rng(2).integers(0, 256, (8, 8, 4)).astype(np.uint8)
    path = tmp_path / "print.tif"  # TIFF keeps CMYK lossless, so the expected pixels are exact
    Image.fromarray(cmyk, mode="CMYK").save(path)
    expected = np.rint(255.0 * (1 - cmyk[..., :3] / 255.0) * (1 - cmyk[..., 3:] / 255.0)).astype(np.uint8)
    assert np.array_equal(np.asarray(decode_rgb(path)), expected)
    jpeg = tmp_path / "print.jpg"  # CMYK JPEGs (Adobe) decode to CMYK and take the same conversion
    Image.fromarray(cmyk, mode="CMYK").save(jpeg, quality=95)
    with Image.open(jpeg) as image:
        assert image.mode == "CMYK"
        stored = np.asarray(image, dtype=np.float64) / 255.0
    decoded = np.asarray(decode_rgb(jpeg))
    assert np.array_equal(decoded, np.rint(255 * (1 - stored[..., :3]) * (1 - stored[..., 3:])).astype(np.uint8))


def test_float_pixels_are_refused_naming_the_file(tmp_path):
    path = tmp_path / "radiance.tif"
    Image.fromarray(np.random.default_rng(3).random((8, 8)).astype(np.float32)).save(path)
    with pytest.raises(ImageDecodeError, match=r"radiance\.tif.*no defined 8-bit range"):
        decode_rgb(path)


def test_eight_bit_modes_decode_as_before(tmp_path):
    rgba = np.dstack([_noise(6), _noise(7)[..., 0]])
    for mode, array in (("L", _noise(4)[..., 0]), ("RGB", _noise(5)), ("RGBA", rgba)):
        path = tmp_path / f"{mode}.png"
        Image.fromarray(array).save(path)
        with Image.open(path) as image:
            assert np.array_equal(np.asarray(decode_rgb(path)), np.asarray(image.convert("RGB")))


# -- image folders -----------------------------------------------------------------------------------------


def test_a_folder_with_no_images_is_refused_naming_it(tmp_path):
    (tmp_path / "empty" / "train" / "cats").mkdir(parents=True)
    (tmp_path / "empty" / "train" / "cats" / "readme.txt").write_text("no pictures yet")
    with pytest.raises(DatasetError, match=r"no images found in .*empty"):
        prepare_image_folder("mine", tmp_path / "out", str(tmp_path / "empty"))


def test_a_bad_file_in_a_folder_fails_extraction_naming_it(tmp_path):
    from harness.backbones import create_backbone
    from harness.runs.extract import FeatureRequest, extract_dataset

    root = _folder(tmp_path / "images")
    (root / "val" / "class1" / "2.png").write_bytes(b"GIF89a but not really")
    manifest = prepare_image_folder("mine", tmp_path / "out", str(root))  # indexing reads no pixels
    with pytest.raises(ImageDecodeError, match=r"val/class1/2\.png.*not an image"):
        extract_dataset(create_backbone("cifar_resnet20@random"), manifest, [FeatureRequest("pooled")],
                        tmp_path / "features", batch_size=4)


def test_bad_files_can_be_skipped_and_are_counted_in_the_manifest(tmp_path):
    root = _folder(tmp_path / "images")
    (root / "val" / "class1" / "2.png").write_text("not an image")
    cut = root / "train" / "class0" / "1.png"
    cut.write_bytes(cut.read_bytes()[:-600])
    manifest = prepare_dataset("mine", {"kind": "image_folder", "root": str(root), "on_bad_image": "skip"},
                               tmp_path / "out", ("train", "val"))
    assert len(manifest.items) == 10
    skipped = manifest.params["skipped"]
    assert skipped["count"] == 2
    assert set(skipped["files"]) == {"val/class1/2.png", "train/class0/1.png"}
    assert "not an image" in skipped["files"]["val/class1/2.png"]
    assert "truncated" in skipped["files"]["train/class0/1.png"]


def test_a_class_too_small_for_every_split_is_refused_or_skipped_and_counted(tmp_path):
    root = tmp_path / "images"
    for label, count in (("cats", 3), ("dogs", 3), ("owls", 1)):  # per_class layout: <class>/<image>
        (root / label).mkdir(parents=True)
        for index in range(count):
            Image.fromarray(_noise(50 + 10 * len(label) + index)).save(root / label / f"{index}.png")
    expected = r"class 'owls' has 1 usable image\(s\) \(owls/0.png\), none for split\(s\) val"
    with pytest.raises(DatasetError, match=expected):
        prepare_image_folder("mine", tmp_path / "out", str(root), per_class={"train": 1, "val": 2})
    manifest = prepare_image_folder("mine", tmp_path / "out", str(root), per_class={"train": 1, "val": 2},
                                    on_bad_image="skip")
    assert manifest.classes == ["cats", "dogs"] and len(manifest.items) == 6
    assert manifest.params["skipped"] == {"count": 1, "files": {}, "classes": {"owls": 1}}


def test_classification_refuses_a_class_it_has_no_training_image_of(tmp_path):
    from harness.probes import ProbeInputs, get_probe

    root = _folder(tmp_path / "images")
    (root / "val" / "class2").mkdir()  # a class only the evaluation split has
    Image.fromarray(_noise(77)).save(root / "val" / "class2" / "0.png")
    manifest = prepare_image_folder("mine", tmp_path / "out", str(root))
    params = {"train_split": "train", "eval_split": "val", "epochs": 1, "lr": 0.01, "weight_decay": 0.0,
              "batch_size": 4}
    inputs = ProbeInputs(manifest, lambda item: np.full(4, float(item.label), np.float32), params, 0)
    with pytest.raises(ValueError, match=r"class 'class2' \(e.g. val/class2/0.png\) has no image in split 'train'"):
        get_probe("classification").run(inputs)


def test_an_empty_class_folder_is_not_a_class_nobody_can_predict(tmp_path):
    root = _folder(tmp_path / "images", per_class=2)
    (root / "val" / "class9").mkdir()  # an empty folder would add a class no image belongs to
    with pytest.raises(DatasetError, match=r"class 'class9' has 0 usable image"):
        prepare_image_folder("mine", tmp_path / "out", str(root))
    (root / "val" / "class9" / "x.jpg").write_bytes(b"")  # ... as would one whose only file is empty
    manifest = prepare_image_folder("mine", tmp_path / "out", str(root), on_bad_image="skip")
    assert manifest.classes == ["class0", "class1"]
    skipped = manifest.params["skipped"]
    assert skipped["count"] == 1 and list(skipped["files"]) == ["val/class9/x.jpg"]
    assert skipped["classes"] == {"class9": 0}


def test_defaults_keep_the_identity_of_existing_folders(tmp_path):
    root = _folder(tmp_path / "images")
    manifest = prepare_image_folder("mine", tmp_path / "out", str(root))
    assert manifest.params == {"layout": "split/class", "per_class": None, "note": ""}  # as before the checks


def test_limit_per_class_keeps_the_first_images_by_content_hash(tmp_path):
    root = _folder(tmp_path / "images", per_class=4)
    manifest = prepare_image_folder("mine", tmp_path / "out", str(root), limit_per_class=2)
    assert len(manifest.items) == 8 and manifest.params["limit_per_class"] == 2
    again = prepare_image_folder("mine", tmp_path / "out2", str(root), limit_per_class=2)
    assert manifest.identity == again.identity


# -- a layout the spec does not describe, refused before any stage runs ------------------------------------------


def test_a_class_only_folder_without_per_class_is_refused_before_any_stage(tmp_path, monkeypatch):
    """extend.md's first example once ran 29 s and failed six runs: a `<class>/<image>` folder listed without
    per_class. The CLI now names the fix in one line and exits 2 before DVC runs anything."""
    import subprocess
    import sys

    import yaml

    root = tmp_path / "photos"
    for label in range(2):
        (root / f"class{label}").mkdir(parents=True)
        for index in range(3):
            Image.fromarray(_noise(10 * label + index)).save(root / f"class{label}" / f"{index}.png")
    repo = Path(__file__).resolve().parents[1]
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["datasets"] = {"mine": {"kind": "image_folder", "root": str(root)}}
    params["grids"] = {"mine": {"backbones": ["resnet18.random"], "tasks": {"classification": "mine"}}}
    params["checkpoints"] = {}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "harness").symlink_to(repo / "harness")  # the pipeline's code fingerprints read it from the project
    out = subprocess.run([sys.executable, "-m", "harness.cli.main", "grid=mine"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "dataset mine: no images found in" in out.stderr and "add per_class: {train: N, val: M}" in out.stderr
    assert "dvc repro" not in out.stdout + out.stderr and not (tmp_path / "data").exists()


def test_check_layout_accepts_either_layout_as_its_spec_says(tmp_path):
    from harness.datasets.image_folder import check_layout

    nested = _folder(tmp_path / "nested")
    assert check_layout("d", str(nested)) is None
    assert "drop per_class" in check_layout("d", str(nested), per_class={"train": 1, "val": 1})
    assert check_layout("d", str(tmp_path / "absent")) is None  # the grid is skipped as lacking its data


# -- params.yaml values no run could mean: refused at validation, before any work -----------------------------


def _params_file(tmp_path: Path, monkeypatch, change) -> Path:
    import yaml
    from conftest import image_project_params

    params = image_project_params(_folder(tmp_path / "images"), ["cifar_resnet20.random"])
    change(params)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return tmp_path / "params.yaml"


@pytest.mark.parametrize(("change", "message"), [
    (lambda p: p["datasets"]["tiny"].update(per_class={"train": -3, "val": 2}),
     r"^datasets\.tiny\.per_class\.train: -3 is out of range; give 1\.\.10000000$"),
    (lambda p: p["probes"]["classification"].update(epochs=1e12),
     r"^grids\.g: probes\.classification\.epochs: 1000000000000 is out of range; give 1\.\.100000$|"
     r"^probes\.classification\.epochs: 1000000000000 is out of range; give 1\.\.100000$"),
    (lambda p: p["probes"]["classification"].update(lr=float("inf")),
     r"probes\.classification\.lr: inf is not a usable number; give a finite value"),
    (lambda p: p["datasets"]["tiny"].update(per_class={"train": 2, "val": 1}) or p["probes"]["classification"].update(
        eval_split="vall"), r"^probes\.classification\.eval_split: unknown split 'vall'\. Did you mean 'val'\?"),
])
def test_out_of_range_numbers_and_split_typos_are_refused_in_one_line_before_any_work(
        tmp_path, monkeypatch, change, message):
    from harness.core.config import ConfigError, load_params
    from harness.pipeline.checks import check_params

    _params_file(tmp_path, monkeypatch, change)
    with pytest.raises(ConfigError) as caught:
        check_params(load_params())
    assert len(str(caught.value).splitlines()) == 1
    assert caught.match(message)


@pytest.mark.parametrize(("change", "message"), [
    (lambda p: p["settings"].update(seed=2**40), r"settings\.seed: Input should be less than or equal to 4294967295"),
    (lambda p: p["settings"].update(seed=1e23), r"settings\.seed: "),
    (lambda p: p.update(grids={"g": {**p["grids"]["g"], "fewshot": {"k_shots": [1], "seeds": [-1]}}}),
     r"grids\.g\.fewshot\.seeds\.0: Input should be greater than or equal to 0"),
])
def test_seeds_outside_32_bits_are_refused_when_params_yaml_is_read(tmp_path, monkeypatch, change, message):
    from harness.core.config import ConfigError, load_params

    _params_file(tmp_path, monkeypatch, change)
    with pytest.raises(ConfigError, match=message) as caught:
        load_params()
    assert len(str(caught.value).splitlines()) == 1


def test_a_dataset_seed_beyond_32_bits_is_refused_naming_the_key():
    from harness.datasets.kinds import validate_dataset_spec

    with pytest.raises(DatasetError, match=r"^datasets\.s\.seed: 1099511627776 is out of range; give 0\.\.4294967295$"):
        validate_dataset_spec("s", {"kind": "procedural_scenes", "scenes": {"train": 2}, "seed": 2**40})


def test_a_duplicate_key_in_params_yaml_is_one_line_naming_the_key_and_its_lines(tmp_path, monkeypatch):
    from harness.core.config import ConfigError, load_params

    path = _params_file(tmp_path, monkeypatch, lambda p: None)
    lines = path.read_text().splitlines()
    at = lines.index("settings:")
    lines.insert(at + 1, "  seed: 7")  # the second `seed:` under settings, as a hand edit leaves it
    path.write_text("\n".join(lines) + "\n")
    second = next(i for i, line in enumerate(lines) if line.strip().startswith("seed:") and i > at + 1) + 1
    with pytest.raises(ConfigError) as caught:
        load_params()
    assert str(caught.value) == (f"params.yaml line {second}: not valid YAML (duplicate key 'seed' (first on line "
                                 f"{at + 2}): keep one of them)")


# -- image files and folders --------------------------------------------------------------------------------


def test_a_decompression_bomb_is_refused_naming_the_file(tmp_path, monkeypatch):
    path = tmp_path / "huge.png"
    Image.fromarray(_noise(3, 64)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 64 * 64 // 4)  # 64x64 is over twice the limit: a bomb to Pillow
    with pytest.raises(ImageDecodeError, match=r"cannot decode image .*huge\.png: .*decompression bomb.*smaller image"):
        decode_rgb(path)


def test_gif_and_tiff_files_left_out_are_said_once_with_a_count_and_an_example(tmp_path, caplog):
    root = _folder(tmp_path / "images")
    Image.fromarray(_noise(7)).save(root / "train" / "class0" / "anim.gif")
    Image.fromarray(_noise(8)).save(root / "val" / "class1" / "scan.tif")
    with caplog.at_level("WARNING"):
        manifest = prepare_image_folder("d", tmp_path / "out", str(root))
    assert len(manifest.items) == 12  # the PNGs only
    [warning] = [r.getMessage() for r in caplog.records if "GIF/TIFF" in r.getMessage()]
    assert "left out 2 GIF/TIFF file(s)" in warning and "train/class0/anim.gif" in warning


def test_symlinked_class_folders_are_followed_and_a_dangling_one_is_refused_naming_it(tmp_path):
    from harness.datasets.image_folder import check_layout

    root = _folder(tmp_path / "images")
    elsewhere = _folder(tmp_path / "elsewhere")
    for split in ("train", "val"):  # a class kept on another disk, linked in: read as if it were there
        (root / split / "class2").symlink_to(elsewhere / split / "class0", target_is_directory=True)
    manifest = prepare_image_folder("d", tmp_path / "out", str(root))
    assert manifest.classes == ["class0", "class1", "class2"] and len(manifest.items) == 18
    (root / "train" / "class3").symlink_to(tmp_path / "gone", target_is_directory=True)
    expected = r"dataset d: .*train/class3 is a symbolic link to .*gone, which does not exist: fix or remove the link"
    assert check_layout("d", str(root)) is not None
    with pytest.raises(DatasetError, match=expected):
        prepare_image_folder("d", tmp_path / "out", str(root))


def test_a_split_typo_against_a_split_class_folder_is_found_by_its_listing_before_any_stage(tmp_path, monkeypatch):
    """The <split>/<class>/ layout's splits are its folders, so the typo is found where the folder is listed (what
    the CLI runs before any stage), not by the prepare stage."""
    from harness.core.config import load_params
    from harness.pipeline.checks import layout_problems

    _params_file(tmp_path, monkeypatch, lambda p: p["probes"]["classification"].update(eval_split="vall"))
    assert layout_problems(load_params(), ["tiny"]) == [
        "probes.classification.eval_split: unknown split 'vall'. Did you mean 'val'? Valid splits: train, val "
        "(dataset tiny's splits)"]
    params = load_params()
    params.probes["classification"]["eval_split"] = "val"
    assert layout_problems(params, ["tiny"]) == []
