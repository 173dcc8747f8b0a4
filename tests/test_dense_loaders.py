"""Dense-target dataset kinds (bsds500, voc2012, nyuv2_folder, taskonomy) on fixtures laid out like the real data."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from PIL import Image

from harness.core.hashing import sha256_file
from harness.datasets.bsds500 import figure_ground, read_bsds_ground_truth
from harness.datasets.dense_folders import VOC_CLASSES
from harness.datasets.dense_targets import natural_key, read_array, target_file
from harness.datasets.kinds import prepare_dataset
from harness.datasets.manifest import Manifest

# the BSDS500 release in the shared/ folder beside the checkout (../shared), as the container mounts it
BSDS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "bsds500"
needs_bsds = pytest.mark.skipif(not (BSDS / "groundTruth").is_dir(), reason=f"{BSDS} absent")


def _rgb(path: Path, h: int, w: int, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def _png(path: Path, array: np.ndarray, mode: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    (Image.fromarray(array, mode) if mode else Image.fromarray(array)).save(path)


def _arrays(manifest: Manifest, out: Path, item_path: str) -> dict[str, np.ndarray]:
    names = manifest.extra["targets"][item_path]
    return {name: read_array(target_file(manifest, item_path, name, out)) for name in names}


def _moved_identity(spec: dict, root: Path, tmp_path: Path) -> str:
    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    shutil.move(str(root), moved)
    return prepare_dataset("renamed", {**spec, "root": str(moved)}, tmp_path / "prepared-elsewhere").identity


# -- bsds500 ---------------------------------------------------------------------------------------

def _bsds_mat(path: Path, segmentations: list[np.ndarray], boundaries: list[np.ndarray]) -> None:
    """Like the release: `groundTruth` a 1×A cell array of 1×1 structs {Segmentation, Boundaries}."""
    cells = np.empty((1, len(segmentations)), dtype=object)
    for k, (seg, bnd) in enumerate(zip(segmentations, boundaries, strict=True)):
        cells[0, k] = {"Segmentation": seg.astype(np.uint16), "Boundaries": bnd.astype(np.uint8)}
    path.parent.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(str(path), {"groundTruth": cells})


def _bsds_fixture(root: Path, ids=("2092", "100007", "35070"), h=12, w=18, annotators=5) -> dict:
    truth = {}
    for n, image_id in enumerate(ids):
        rng = np.random.default_rng(n)
        _rgb(root / "images" / "val" / f"{image_id}.jpg", h, w, n)
        segs = [rng.integers(1, 4, size=(h, w)).astype(np.uint16) for _ in range(annotators)]
        bnds = [(rng.random((h, w)) < 0.2).astype(np.uint8) for _ in range(annotators)]
        _bsds_mat(root / "groundTruth" / "val" / f"{image_id}.mat", segs, bnds)
        truth[image_id] = (np.stack(segs), np.stack(bnds))
    (root / "images" / "val" / "Thumbs.db").write_bytes(b"\0junk")  # as in the real release
    return truth


def _mat_structure(path: Path) -> tuple:
    gt = scipy.io.loadmat(str(path))["groundTruth"]
    cell = gt[0, 0]
    return (type(gt), gt.dtype, gt.ndim, gt.shape[0], type(cell), cell.shape, cell.dtype.names,
            cell["Segmentation"].shape, cell["Segmentation"][0, 0].dtype, cell["Boundaries"][0, 0].dtype,
            cell["Boundaries"][0, 0].ndim)


def test_bsds500_fixture_decodes(tmp_path):
    root, out = tmp_path / "BSDS500", tmp_path / "prepared"
    truth = _bsds_fixture(root)
    spec = {"kind": "bsds500", "root": str(root), "splits": ["val"]}
    manifest = prepare_dataset("bsds", spec, out)
    assert [i.path for i in manifest.items] == ["images/val/2092.jpg", "images/val/35070.jpg",
                                                "images/val/100007.jpg"]  # numeric order; Thumbs.db ignored
    assert not (out / "images").exists()  # images are indexed in place, not copied
    for item in manifest.items:
        assert item.split == "val" and item.label is None and item.sha256 == sha256_file(root / item.path)
        segs, bnds = truth[Path(item.path).stem]
        arrays = _arrays(manifest, out, item.path)
        assert arrays["edge"].dtype == np.float32 and arrays["edge"].min() >= 0 and arrays["edge"].max() <= 1
        np.testing.assert_allclose(arrays["edge"], bnds.mean(axis=0), rtol=0, atol=1e-7)
        np.testing.assert_array_equal(arrays["boundaries"], bnds)
        np.testing.assert_array_equal(arrays["segmentation"], segs)
        assert arrays["boundaries"].dtype == np.uint8 and arrays["segmentation"].dtype == np.uint16
        np.testing.assert_array_equal(arrays["foreground"], figure_ground(segs))
        for entry in manifest.extra["targets"][item.path].values():
            assert entry["base"] == "prepared" and sha256_file(out / entry["path"]) == entry["sha256"]
    assert "Berkeley" in manifest.params["source"]
    assert Manifest.load(out / "manifest.json").identity == manifest.identity
    small = prepare_dataset("bsds", {**spec, "limit_per_split": 2}, tmp_path / "small")
    assert [i.path for i in small.items] == [i.path for i in manifest.items[:2]]
    # one boundary pixel of one annotator changes the identity; moving the folder keeps it
    segs, bnds = truth["35070"]
    bnds[2, 0, 0] ^= 1
    _bsds_mat(root / "groundTruth" / "val" / "35070.mat", list(segs), list(bnds))
    changed = prepare_dataset("bsds", spec, tmp_path / "changed").identity
    assert changed != manifest.identity
    assert _moved_identity(spec, root, tmp_path) == changed


def test_bsds500_one_annotator_and_bad_split(tmp_path):
    root = tmp_path / "b"
    _bsds_fixture(root, ids=("1",), annotators=1)
    segs, bnds = read_bsds_ground_truth(root / "groundTruth" / "val" / "1.mat")
    assert segs.shape == bnds.shape == (1, 12, 18)
    with pytest.raises(ValueError, match="splits"):
        prepare_dataset("b", {"kind": "bsds500", "root": str(root), "splits": ["validation"]}, tmp_path / "o")


@needs_bsds
def test_bsds500_fixture_matches_real_mat_structure(tmp_path):
    real = sorted((BSDS / "groundTruth" / "val").glob("*.mat"))[0]
    _bsds_fixture(tmp_path / "fx", ids=("1",))
    assert _mat_structure(tmp_path / "fx" / "groundTruth" / "val" / "1.mat") == _mat_structure(real)


@needs_bsds
def test_bsds500_real_val(tmp_path):
    out = tmp_path / "bsds"
    manifest = prepare_dataset("bsds500", {"kind": "bsds500", "root": str(BSDS), "splits": ["val"],
                                           "limit_per_split": 3}, out)
    assert len(manifest.split("val")) == 3 and {i.split for i in manifest.items} == {"val"}
    ids = sorted((p.stem for p in (BSDS / "images" / "val").glob("*.jpg")), key=natural_key)[:3]
    assert [Path(i.path).stem for i in manifest.items] == ids
    for item in manifest.items:
        with Image.open(BSDS / item.path) as image:
            size = image.size[::-1]
        assert size in {(321, 481), (481, 321)}
        arrays = _arrays(manifest, out, item.path)
        assert arrays["edge"].shape == size and arrays["edge"].min() >= 0 and arrays["edge"].max() <= 1
        assert arrays["edge"].max() > 0
        assert arrays["boundaries"].shape[0] >= 4 and arrays["boundaries"].shape[1:] == size
        assert set(np.unique(arrays["boundaries"])) <= {0, 1}
        assert arrays["segmentation"].shape == arrays["boundaries"].shape and arrays["segmentation"].min() >= 1


# -- voc2012 ---------------------------------------------------------------------------------------

def voc_palette() -> list[int]:
    """The VOC devkit's colour map (labelcolormap.m): bits of the index spread over R, G, B."""
    palette = []
    for index in range(256):
        r = g = b = 0
        c = index
        for shift in range(7, -1, -1):
            r |= (c & 1) << shift
            g |= ((c >> 1) & 1) << shift
            b |= ((c >> 2) & 1) << shift
            c >>= 3
        palette += [r, g, b]
    return palette


def _voc_fixture(root: Path) -> dict[str, np.ndarray]:
    voc, labels = root / "VOC2012", {}
    ids = {"train": ["2007_000032", "2007_000039"], "val": ["2007_000033", "2008_000002"]}
    for n, image_id in enumerate(sorted(ids["train"] + ids["val"] + ["2009_000001"])):
        _rgb(voc / "JPEGImages" / f"{image_id}.jpg", 10, 14, n)
        label = np.zeros((10, 14), np.uint8)
        label[2:8, 3:11] = 255  # void band around the object, as VOC draws it
        label[3:7, 4:10] = [15, 12, 1, 20][n % 4]
        path = voc / "SegmentationClass" / f"{image_id}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        image = Image.fromarray(label, "P")
        image.putpalette(voc_palette())
        image.save(path)
        labels[image_id] = label
    lists = voc / "ImageSets" / "Segmentation"
    lists.mkdir(parents=True)
    for split, names in ids.items():
        (lists / f"{split}.txt").write_text("".join(f"{i}\n" for i in names))
    (lists / "trainval.txt").write_text("".join(f"{i}\n" for i in sorted(ids["train"] + ids["val"])))
    return labels


def test_voc2012_palette_indices_and_split_lists(tmp_path):
    root, out = tmp_path / "VOCdevkit", tmp_path / "prepared"
    labels = _voc_fixture(root)
    spec = {"kind": "voc2012", "root": str(root)}
    manifest = prepare_dataset("voc", spec, out)
    assert manifest.classes == VOC_CLASSES and len(VOC_CLASSES) == 21 and VOC_CLASSES[15] == "person"
    assert manifest.extra["ignore_index"] == 255
    assert [(i.split, Path(i.path).stem) for i in manifest.items] == [
        ("train", "2007_000032"), ("train", "2007_000039"), ("val", "2007_000033"), ("val", "2008_000002")]
    assert "2009_000001" not in str(manifest.items)  # on disk but in no split list
    for item in manifest.items:
        entry = manifest.extra["targets"][item.path]["semantic"]
        assert entry["path"] == f"VOC2012/SegmentationClass/{Path(item.path).stem}.png" and entry["base"] == "root"
        path = target_file(manifest, item, "semantic", out)
        assert entry["sha256"] == sha256_file(path)
        with Image.open(path) as image:
            assert image.mode == "P"
            indices = np.asarray(image)
        assert indices.ndim == 2  # indices, not palette colours
        np.testing.assert_array_equal(indices, labels[Path(item.path).stem])
        assert 255 in indices and set(np.unique(indices)) <= set(range(21)) | {255}
    assert not any(out.rglob("*.png"))  # labels are not copied or converted
    val_only = prepare_dataset("voc", {**spec, "splits": ["val"], "limit_per_split": 1}, tmp_path / "v")
    assert [Path(i.path).stem for i in val_only.items] == ["2007_000033"]
    with pytest.raises(KeyError, match="trainval"):
        prepare_dataset("voc", {**spec, "splits": ["test"]}, tmp_path / "t")
    # one label pixel changes the identity; moving the devkit keeps it
    label = labels["2007_000039"].copy()
    label[0, 0] = 7
    image = Image.fromarray(label, "P")
    image.putpalette(voc_palette())
    image.save(root / "VOC2012" / "SegmentationClass" / "2007_000039.png")
    changed = prepare_dataset("voc", spec, tmp_path / "changed").identity
    assert changed != manifest.identity
    assert _moved_identity(spec, root, tmp_path) == changed


def test_voc2012_rejects_rgb_labels(tmp_path):
    root = tmp_path / "VOCdevkit"
    _voc_fixture(root)
    path = root / "VOC2012" / "SegmentationClass" / "2007_000032.png"
    with Image.open(path) as image:
        image.convert("RGB").save(path)
    with pytest.raises(ValueError, match="palette"):
        prepare_dataset("voc", {"kind": "voc2012", "root": str(root)}, tmp_path / "o")


# -- nyuv2_folder ----------------------------------------------------------------------------------

def _encode_normals(n: np.ndarray) -> np.ndarray:
    return np.clip(np.round((n + 1.0) * 127.5), 0, 255).astype(np.uint8)


def _nyu_fixture(root: Path, h=8, w=10) -> dict:
    truth = {}
    for split, ids in {"train": ["2", "10"], "test": ["1"]}.items():
        for n, image_id in enumerate(ids):
            _rgb(root / split / "rgb" / f"{image_id}.png", h, w, n)
            mm = np.random.default_rng(n).integers(500, 9000, size=(h, w)).astype(np.uint16)
            mm[0, :3] = 0  # Kinect holes
            _png(root / split / "depth" / f"{image_id}.png", mm)
            normals = np.zeros((h, w, 3))
            normals[..., 2] = -1.0
            normals[:, : w // 2] = np.array([0.6, 0.0, -0.8])
            rgb = _encode_normals(normals)
            rgb[h - 1] = 0  # no normal
            _png(root / split / "normals" / f"{image_id}.png", rgb)
            truth[(split, image_id)] = mm
    return truth


def test_nyuv2_folder_depth_metres_and_unit_normals(tmp_path):
    root, out = tmp_path / "nyuv2", tmp_path / "prepared"
    truth = _nyu_fixture(root)
    with Image.open(root / "train" / "depth" / "2.png") as image:
        assert image.mode.startswith("I;16") or image.mode == "I"  # a real 16-bit PNG
    spec = {"kind": "nyuv2_folder", "root": str(root)}
    manifest = prepare_dataset("nyu", spec, out)
    assert [i.path for i in manifest.items] == ["test/rgb/1.png", "train/rgb/2.png", "train/rgb/10.png"]
    for item in manifest.items:
        mm = truth[(item.split, Path(item.path).stem)]
        arrays = _arrays(manifest, out, item.path)
        depth, normals = arrays["depth"], arrays["normals"]
        assert depth.dtype == normals.dtype == np.float32 and normals.shape == (*depth.shape, 3)
        np.testing.assert_allclose(depth, mm / 1000.0, rtol=1e-6)
        assert (depth[0, :3] == 0).all() and depth[depth > 0].min() >= 0.5 and depth.max() < 9.0
        length = np.linalg.norm(normals, axis=-1)
        assert np.allclose(length[:-1], 1.0, atol=1e-6) and (normals[-1] == 0).all()
        np.testing.assert_allclose(normals[0, 0], [0.6, 0.0, -0.8], atol=0.01)
    only = prepare_dataset("nyu", {**spec, "splits": ["train"], "limit_per_split": 1}, tmp_path / "o")
    assert [i.path for i in only.items] == ["train/rgb/2.png"]
    # .npy depth in metres is accepted too
    (root / "test" / "depth" / "1.png").unlink()
    metres = truth[("test", "1")] / 1000.0
    metres[1, 1] = np.nan
    np.save(root / "test" / "depth" / "1.npy", metres.astype(np.float32))
    npy = prepare_dataset("nyu", {**spec, "splits": ["test"]}, tmp_path / "npy")
    depth = _arrays(npy, tmp_path / "npy", "test/rgb/1.png")["depth"]
    assert depth[1, 1] == 0 and depth[0, 0] == 0 and np.isclose(depth[2, 2], metres[2, 2])
    # one depth pixel changes the identity; moving the folder keeps it
    base = prepare_dataset("nyu", spec, tmp_path / "base").identity
    mm = truth[("train", "10")].copy()
    mm[3, 3] += 1
    _png(root / "train" / "depth" / "10.png", mm)
    changed = prepare_dataset("nyu", spec, tmp_path / "changed").identity
    assert changed != base
    assert _moved_identity(spec, root, tmp_path) == changed


# -- taskonomy -------------------------------------------------------------------------------------

TASKONOMY_LOW_LEVEL = ("edge_texture", "edge_occlusion", "keypoints2d")


def _taskonomy_view(root: Path, building: str, view: str, seed: int, h=8, w=8) -> dict:
    rng = np.random.default_rng(seed)
    raw = rng.integers(256, 20000, size=(h, w)).astype(np.uint16)
    raw[0, 0] = 65535
    mask = np.full((h, w), 255, np.uint8)
    mask[-1, :] = 0
    n = rng.normal(size=(h, w, 3))
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    stem = f"{view}_domain_"
    _rgb(root / building / "rgb" / f"{stem}rgb.png", h, w, seed)
    _png(root / building / "depth_zbuffer" / f"{stem}depth_zbuffer.png", raw)
    _png(root / building / "normal" / f"{stem}normal.png", _encode_normals(n))
    _png(root / building / "mask_valid" / f"{stem}mask_valid.png", mask)
    # the low-level domains as the annotator writes them: skimage.img_as_uint of a [0, 1] map, a 16-bit gray PNG
    low = {}
    for domain in TASKONOMY_LOW_LEVEL:
        low[domain] = rng.integers(0, 3000, size=(h, w)).astype(np.uint16)
        low[domain][1, 2], low[domain][2, 1] = 0, 65535
        _png(root / building / domain / f"{stem}{domain}.png", low[domain])
    return {"raw": raw, "mask": mask, "normals": n, **low}


def test_taskonomy_buildings_depth_and_mask(tmp_path):
    root, out = tmp_path / "taskonomy", tmp_path / "prepared"
    truth = {}
    for seed, (building, view) in enumerate([("allensville", "point_10_view_0"), ("allensville", "point_2_view_1"),
                                             ("beechwood", "point_0_view_0"), ("collierville", "point_3_view_2")]):
        truth[f"{building}/rgb/{view}_domain_rgb.png"] = _taskonomy_view(root, building, view, seed)
    spec = {"kind": "taskonomy", "root": str(root), "splits": {"train": ["allensville", "beechwood"],
                                                                "val": ["collierville"]}}
    manifest = prepare_dataset("tasko", spec, out)
    assert [(i.split, i.path) for i in manifest.items] == [
        ("train", "allensville/rgb/point_2_view_1_domain_rgb.png"),
        ("train", "allensville/rgb/point_10_view_0_domain_rgb.png"),
        ("train", "beechwood/rgb/point_0_view_0_domain_rgb.png"),
        ("val", "collierville/rgb/point_3_view_2_domain_rgb.png")]
    for item in manifest.items:
        t = truth[item.path]
        arrays = _arrays(manifest, out, item.path)
        depth, normals = arrays["depth"], arrays["normals"]
        valid = (t["raw"] != 65535) & (t["mask"] > 0)
        np.testing.assert_allclose(depth[valid], t["raw"][valid] / 512.0, rtol=1e-6)
        assert depth[0, 0] == 0 and (depth[-1] == 0).all() and (normals[~valid] == 0).all()
        assert np.allclose(np.linalg.norm(normals[valid], axis=-1), 1.0, atol=1e-6)
        assert np.abs(normals[valid] - t["normals"][valid]).max() < 0.02
        assert target_file(manifest, item, "depth", out).is_relative_to(out)
    first = prepare_dataset("tasko", {**spec, "limit_per_split": 1}, tmp_path / "first")
    assert [i.path for i in first.items] == [manifest.items[0].path, manifest.items[3].path]
    with pytest.raises(ValueError, match="both"):
        prepare_dataset("tasko", {**spec, "splits": {"train": ["beechwood"], "val": ["beechwood"]}}, tmp_path / "x")
    # one mask pixel changes the identity (it zeroes a target pixel); moving the folder keeps it
    mask = truth[manifest.items[3].path]["mask"].copy()
    mask[1, 1] = 0
    _png(root / "collierville" / "mask_valid" / "point_3_view_2_domain_mask_valid.png", mask)
    changed = prepare_dataset("tasko", spec, tmp_path / "changed")
    assert changed.identity != manifest.identity
    assert _arrays(changed, tmp_path / "changed", manifest.items[3].path)["depth"][1, 1] == 0
    assert _moved_identity(spec, root, tmp_path) == changed.identity


def _taskonomy_fixture(root: Path) -> dict:
    views = [("allensville", "point_10_view_0"), ("allensville", "point_2_view_1"), ("collierville", "point_3_view_2")]
    return {f"{b}/rgb/{v}_domain_rgb.png": _taskonomy_view(root, b, v, seed) for seed, (b, v) in enumerate(views)}


LOW_LEVEL_TASKS = {"edge": ("edge_texture", "texture_edges"), "occlusion_edge": ("edge_occlusion", "occlusion_edges"),
                   "keypoints2d": ("keypoints2d", "keypoints")}


def test_taskonomy_low_level_domains_are_raw_over_65535(tmp_path):
    root, out = tmp_path / "taskonomy", tmp_path / "prepared"
    truth = _taskonomy_fixture(root)
    spec = {"kind": "taskonomy", "root": str(root), "splits": {"train": ["allensville"], "val": ["collierville"]},
            "tasks": ["edge", "keypoints2d", "occlusion_edge"]}
    manifest = prepare_dataset("tasko", spec, out)
    assert len(manifest.items) == 3 and manifest.params["tasks"] == ["edge", "keypoints2d", "occlusion_edge"]
    assert sorted(manifest.extra["target_sources"]) == ["keypoints", "occlusion_edges", "texture_edges"]
    for item in manifest.items:
        arrays = _arrays(manifest, out, item.path)
        assert sorted(arrays) == ["keypoints", "occlusion_edges", "texture_edges"]  # no depth, no normals
        for domain, target in LOW_LEVEL_TASKS.values():
            expected = truth[item.path][domain].astype(np.float32) / np.float32(65535.0)
            got = arrays[target][..., 0] if target == "keypoints" else arrays[target]
            assert arrays[target].dtype == np.float32 and got.shape == expected.shape
            np.testing.assert_array_equal(got, expected)
            assert got[1, 2] == 0.0 and got[2, 1] == 1.0
        assert arrays["keypoints"].shape == (8, 8, 1)  # (H, W, kinds): what the keypoints probe reads
    # depth, normals and low-level targets side by side; the low-level maps are the same whatever else is asked
    both = prepare_dataset("tasko", {**spec, "tasks": ["depth", "surface_normal", "edge"]}, tmp_path / "both")
    arrays = _arrays(both, tmp_path / "both", both.items[0].path)
    assert sorted(arrays) == ["depth", "normals", "texture_edges"]
    np.testing.assert_array_equal(arrays["texture_edges"],
                                  _arrays(manifest, out, manifest.items[0].path)["texture_edges"])


def test_taskonomy_needs_only_the_requested_tasks_domains(tmp_path):
    root = tmp_path / "taskonomy"
    _taskonomy_fixture(root)
    spec = {"kind": "taskonomy", "root": str(root), "splits": {"train": ["allensville"], "val": ["collierville"]}}
    shutil.rmtree(root / "collierville" / "edge_occlusion")
    with pytest.raises(FileNotFoundError) as refused:
        prepare_dataset("tasko", {**spec, "tasks": ["edge", "occlusion_edge"]}, tmp_path / "refused")
    message = str(refused.value)
    assert "\n" not in message and str(root / "collierville" / "edge_occlusion") in message
    assert "occlusion_edge" in message
    assert not (tmp_path / "refused").exists()  # refused before any target was written
    # tasks that do not read edge_occlusion do not need it, and edge alone needs neither depth nor normals
    shutil.rmtree(root / "allensville" / "depth_zbuffer")
    shutil.rmtree(root / "allensville" / "normal")
    edge = prepare_dataset("tasko", {**spec, "tasks": ["edge"]}, tmp_path / "edge")
    assert len(edge.items) == 3
    with pytest.raises(FileNotFoundError, match=r"allensville/depth_zbuffer not found \(needed for depth, surface_"):
        prepare_dataset("tasko", spec, tmp_path / "default")  # the default tasks: depth and surface_normal
    with pytest.raises(ValueError, match="unknown edges; valid: depth, surface_normal, edge"):
        prepare_dataset("tasko", {**spec, "tasks": ["edges"]}, tmp_path / "typo")


def test_taskonomy_low_level_targets_feed_their_probes(tmp_path):
    from harness.core import paths
    from harness.probes import ProbeInputs, get_probe

    root = tmp_path / "taskonomy"
    _taskonomy_fixture(root)
    spec = {"kind": "taskonomy", "root": str(root), "splits": {"train": ["allensville"], "val": ["collierville"]},
            "tasks": list(LOW_LEVEL_TASKS)}
    params = {"train_split": "train", "eval_split": "val", "epochs": 2, "lr": 0.01, "weight_decay": 0.0,
              "batch_size": 2, "head": "linear", "target_size": 4}
    rng = np.random.default_rng(0)
    with paths.workspace(tmp_path / "workspace"):  # converted targets are found beside the manifest, as in a stage
        manifest = prepare_dataset("tasko", spec, paths.dataset_dir("tasko"))
        features = {item.path: rng.normal(size=(6, 4, 4)).astype(np.float32) for item in manifest.items}
        for task, (_, target) in LOW_LEVEL_TASKS.items():
            result = get_probe(task).run(ProbeInputs(manifest, lambda item: features[item.path], params, seed=0))
            assert result.head.config["target"] == target
            assert result.sample_ids == [manifest.items[-1].path]
            assert all(np.isfinite(v) for v in result.metrics.values())


def test_bsds500_figure_ground_is_the_majority_outside_each_largest_region():
    a = np.array([[1, 1, 2], [1, 1, 3]], dtype=np.uint16)  # largest region: 1
    b = np.array([[1, 1, 2], [1, 2, 2]], dtype=np.uint16)  # largest region: 1 (tie 3–3 → smaller label)
    c = np.array([[5, 5, 5], [5, 5, 4]], dtype=np.uint16)  # largest region: 5
    mask = figure_ground(np.stack([a, b, c]))
    # outside counts: [[0,0,2],[0,1,3]]; strict majority of 3 is ≥ 2
    assert mask.tolist() == [[0, 0, 1], [0, 0, 1]]
    assert figure_ground(np.stack([a, c])).tolist() == [[0, 0, 0], [0, 0, 1]]  # 1 of 2 is not a majority


def test_voc_void_pixels_neither_train_nor_score(tmp_path):
    """VOC's 255 (object borders nobody labelled) is outside the 21 classes: the semantic probe must mask
    it (v1 stopped with "labels outside 0..20"), and a run is still finite and reproducible."""
    from harness.probes import ProbeInputs, get_probe

    root = tmp_path / "VOCdevkit"
    labels = _voc_fixture(root)
    assert any((label == 255).any() for label in labels.values()), "the fixture must contain void pixels"
    manifest = prepare_dataset("voc", {"kind": "voc2012", "root": str(root)}, tmp_path / "prepared")
    rng = np.random.default_rng(0)
    features = {item.path: rng.normal(size=(8, 4, 4)).astype(np.float32) for item in manifest.items}
    params = {"train_split": "train", "eval_split": "val", "epochs": 2, "lr": 0.01, "weight_decay": 0.0,
              "batch_size": 2, "head": "linear", "target_size": 8}
    run = lambda: get_probe("semantic_segmentation").run(  # noqa: E731
        ProbeInputs(manifest, lambda item: features[item.path], params, seed=0))
    result = run()
    assert all(np.isfinite(v) for v in result.metrics.values())
    assert 0.0 <= result.metrics["miou"] <= 1.0
    assert run().metrics == result.metrics
