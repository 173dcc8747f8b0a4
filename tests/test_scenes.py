"""Procedural scenes: determinism, content identity, and the analytic truth of every target map."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.core.hashing import sha256_file
from harness.datasets.kinds import prepare_dataset
from harness.datasets.manifest import MANIFEST_NAME, Manifest
from harness.datasets.scene_render import Camera, Light, Primitive, Scene, Texture, render_scene
from harness.datasets.scene_targets import (
    KEYPOINT_KINDS,
    SEMANTIC_CLASSES,
    keypoint_response,
    occlusion_edges,
    semantic_maps,
    texture_edges,
    visible_keypoints,
)
from harness.datasets.scenes import TARGET_FILES, prepare_procedural_scenes

SPEC = {"kind": "procedural_scenes", "scenes": {"train": 4, "val": 2}, "seed": 7, "size": 64}

FLAT_GREY = Texture("flat", ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)))
CHECKER = Texture("checker", ((0.1, 0.1, 0.1), (0.9, 0.8, 0.7)), scale=0.4, offset=(0.3, 0.6, 0.1))
LIGHT = Light((0.0, -0.6, 0.8), 0.3)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Manifest:
    return prepare_dataset("scenes", SPEC, tmp_path_factory.mktemp("scenes"))


def _files(folder: Path) -> dict[str, bytes]:
    """Every file's bytes but the manifest's (it names its folder as `root`)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != MANIFEST_NAME}


def _load(manifest: Manifest, item_path: str, name: str) -> np.ndarray:
    path = Path(manifest.root) / manifest.extra["targets"][item_path][name]["path"]
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    with Image.open(path) as image:
        assert image.mode == "L" and image.palette is None
        return np.asarray(image)


def _annotations(manifest: Manifest, item_path: str) -> dict:
    return json.loads((Path(manifest.root) / manifest.extra["targets"][item_path]["annotations"]["path"]).read_text())


# -- the dataset: identity, splits, files -------------------------------------------------------------------


def test_prepare_is_deterministic_and_identity_covers_targets(tmp_path, dataset):
    again = prepare_dataset("scenes", SPEC, tmp_path / "again")
    assert again.identity == dataset.identity
    assert _files(tmp_path / "again") == _files(Path(dataset.root))
    reseeded = prepare_dataset("scenes", {**SPEC, "seed": 8}, tmp_path / "reseeded")
    assert reseeded.identity != dataset.identity
    # every target file is named in the manifest with its hash, so the identity covers it
    for item in dataset.items:
        assert sha256_file(dataset.resolve(item)) == item.sha256
        targets = dataset.extra["targets"][item.path]
        assert set(targets) == {*TARGET_FILES, "annotations"}
        for entry in targets.values():
            assert sha256_file(Path(dataset.root) / entry["path"]) == entry["sha256"]
    assert not list(Path(dataset.root).rglob("*.tmp"))


def test_a_changed_target_changes_the_identity(dataset):
    item = dataset.items[0].path
    changed = json.loads(json.dumps(dataset.extra))
    changed["targets"][item]["depth"]["sha256"] = "0" * 64
    edited = Manifest(dataset.name, dataset.root, dataset.items, dataset.classes, dataset.params, changed)
    assert edited.identity != dataset.identity


def test_splits_are_disjoint_and_sized(tmp_path, dataset):
    train, val = dataset.split("train"), dataset.split("val")
    assert len(train) == 4 and len(val) == 2 and len(dataset.items) == 6
    assert not {i.sha256 for i in train} & {i.sha256 for i in val}
    assert all(i.path.startswith(f"{i.split}/scene_") and i.label is None for i in dataset.items)
    assert dataset.classes == list(SEMANTIC_CLASSES)
    # a scene depends on (seed, split, index) only: more training scenes leave validation as it was
    more = prepare_procedural_scenes("s", tmp_path / "more", {"train": 5, "val": 2}, seed=7, size=64)
    assert {i.sha256 for i in more.split("val")} == {i.sha256 for i in val}


def test_manifest_save_load_round_trip(tmp_path, dataset):
    saved = Manifest.load(Path(dataset.root) / MANIFEST_NAME)
    assert saved == dataset and saved.identity == dataset.identity
    saved.save(tmp_path / MANIFEST_NAME)
    assert (tmp_path / MANIFEST_NAME).read_bytes() == (Path(dataset.root) / MANIFEST_NAME).read_bytes()


def test_bad_parameters_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown texture kinds"):
        prepare_procedural_scenes("s", tmp_path, {"train": 1}, seed=0, size=16, textures=["marble"])
    with pytest.raises(ValueError, match="objects must be"):
        prepare_procedural_scenes("s", tmp_path, {"train": 1}, seed=0, size=16, objects=[3, 1])


# -- the dense targets of the prepared scenes ------------------------------------------------------------


def test_depth_normals_and_masks_agree(dataset):
    for item in dataset.items:
        depth, normals = _load(dataset, item.path, "depth"), _load(dataset, item.path, "normals")
        semantic, foreground = _load(dataset, item.path, "semantic"), _load(dataset, item.path, "foreground")
        assert depth.dtype == np.float32 and normals.dtype == np.float32 and depth.shape == (64, 64)
        hit = semantic > 0
        assert hit.any() and (~hit).any()  # ground and sky both in view
        assert (depth[hit] > 0).all() and (depth[~hit] == 0).all()
        assert set(np.unique(semantic)) <= set(range(len(SEMANTIC_CLASSES)))
        np.testing.assert_array_equal(foreground, (semantic >= 2).astype(np.uint8))
        length = np.linalg.norm(normals, axis=-1)
        np.testing.assert_allclose(length[hit], 1.0, atol=1e-5)
        assert (normals[~hit] == 0).all()
        centres = (np.arange(64) + 0.5 - 32) / 64.0  # focal = size
        rays = np.stack(np.broadcast_arrays(centres[None, :], centres[:, None], 1.0), axis=-1)
        assert ((normals * rays).sum(-1)[hit] < 0).all()  # every visible surface faces the camera


def test_boxes_tightly_enclose_each_object(dataset):
    for item in dataset.items:
        instance, semantic = _load(dataset, item.path, "instance"), _load(dataset, item.path, "semantic")
        boxes = _annotations(dataset, item.path)["boxes"]
        assert sorted(b["instance"] for b in boxes) == sorted(set(np.unique(instance)) - {0})
        for box in boxes:
            rows, cols = np.nonzero(instance == box["instance"])
            assert box["box"] == [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]
            assert box["area"] == rows.size
            assert set(np.unique(semantic[rows, cols])) == {box["class_id"]}


def test_keypoint_maps_peak_at_the_listed_keypoints(dataset):
    for item in dataset.items:
        response = _load(dataset, item.path, "keypoints")
        assert response.shape == (64, 64, len(KEYPOINT_KINDS)) and response.max() <= 1.0
        keypoints = _annotations(dataset, item.path)["keypoints"]
        for keypoint in keypoints:
            channel = KEYPOINT_KINDS.index(keypoint["kind"])
            assert response[int(keypoint["y"]), int(keypoint["x"]), channel] > 0.8  # ≤ 0.5 px·√2 off centre
        for channel, kind in enumerate(KEYPOINT_KINDS):
            if not any(k["kind"] == kind for k in keypoints):
                assert (response[..., channel] == 0).all()


# -- analytic checks on hand-built scenes ---------------------------------------------------------------


def _scene(camera: Camera, objects: list[Primitive], ground: bool = True) -> Scene:
    plane = Primitive("plane", (0.0, 0.0, 0.0), (20.0, 20.0, 0.0), FLAT_GREY) if ground else None
    return Scene(camera, LIGHT, tuple(objects), plane)


def test_sphere_depth_and_normals_are_analytic():
    size, radius = 63, 0.7  # odd size: the central pixel's ray is the optical axis
    camera = Camera.look_at((0.0, -6.0, 2.0), (0.0, 0.0, 1.0), size, focal=63.0)
    render = render_scene(_scene(camera, [Primitive("sphere", (0.0, 0.0, 1.0), (radius,) * 3, FLAT_GREY)], False))
    centre = size // 2
    distance = np.sqrt(6.0**2 + 1.0**2)
    assert abs(float(render.depth[centre, centre]) - (distance - radius)) < 1e-4
    np.testing.assert_allclose(render.normals[centre, centre], [0.0, 0.0, -1.0], atol=1e-6)
    # every sphere pixel back-projects onto the sphere, with the normal pointing from its centre
    rows, cols = np.nonzero(render.depth > 0)
    assert 0 < rows.size < size * size and render.depth[0, 0] == 0
    z = render.depth[rows, cols].astype(np.float64)
    points = np.stack([(cols + 0.5 - size / 2) / 63.0 * z, (rows + 0.5 - size / 2) / 63.0 * z, z], axis=-1)
    offset = points - [0.0, 0.0, distance]
    np.testing.assert_allclose(np.linalg.norm(offset, axis=-1), radius, atol=1e-4)
    np.testing.assert_allclose(render.normals[rows, cols], offset / radius, atol=1e-4)


def test_occlusion_edges_follow_a_floating_spheres_silhouette():
    camera = Camera.look_at((0.0, -6.0, 2.5), (0.0, 0.0, 1.5), 64, focal=64.0)
    scene = _scene(camera, [Primitive("sphere", (0.0, 0.0, 1.8), (0.8,) * 3, FLAT_GREY)])
    render = render_scene(scene)
    edges = occlusion_edges(render, threshold=0.05)
    sphere = render.surface == 1
    padded = np.pad(sphere, 1)
    interior = sphere & padded[:-2, 1:-1] & padded[2:, 1:-1] & padded[1:-1, :-2] & padded[1:-1, 2:]
    silhouette = sphere & ~interior
    assert silhouette.sum() > 20
    assert (edges[silhouette] == 1).all()
    assert (edges[interior] == 0).all()
    # the ground's side of the silhouette is the far side: not marked, except where it meets the sky
    ground = render.surface == 0
    assert (edges[ground & ~np.pad(render.surface < 0, 1)[:-2, 1:-1]] == 0).all()


def test_texture_edges_see_paint_not_shape_or_shading():
    camera = Camera.look_at((0.0, -6.0, 3.0), (0.0, 0.0, 0.6), 96, focal=96.0)
    box = Primitive("box", (-1.0, 0.0, 0.6), (0.6, 0.6, 0.6), CHECKER, heading=(0.8, 0.6))
    flat = Primitive("sphere", (1.0, 0.0, 0.7), (0.7,) * 3, Texture("flat", ((0.9, 0.2, 0.2), (0.9, 0.2, 0.2))))
    render = render_scene(_scene(camera, [box, flat]))
    edges = texture_edges(render)
    assert edges.dtype == np.float32 and edges.min() >= 0
    assert (edges[render.surface == 2] == 0).all()  # the flat sphere: shaded, outlined, never painted
    assert (edges[render.surface == 0] == 0).all()  # the flat ground, shadows included
    # on the checker box, every pixel whose right neighbour has the other checker colour is an edge
    luma = render.albedo @ np.array([0.2126, 0.7152, 0.0722], dtype=np.float32)
    on_box = render.surface == 1
    inner = on_box & np.pad(on_box, 2)[2:-2, 4:] & np.pad(on_box, 2)[2:-2, :-4]
    inner &= np.pad(on_box, 2)[:-4, 2:-2] & np.pad(on_box, 2)[4:, 2:-2]
    boundary = inner[:, :-1] & (np.abs(luma[:, 1:] - luma[:, :-1]) > 0.3)
    assert boundary.sum() > 10
    assert (np.maximum(edges[:, :-1], edges[:, 1:])[boundary] > 0.1).all()


def test_occluded_keypoints_are_excluded():
    camera = Camera.look_at((3.0, -6.0, 3.0), (0.0, 0.0, 0.5), 128, focal=128.0)
    box = Primitive("box", (0.0, 0.0, 0.5), (0.5, 0.5, 0.5), CHECKER)
    alone = visible_keypoints(_scene(camera, [box]))
    # a box seen from above, front and right: 7 corners visible, the back-left-bottom one hidden by the box
    assert [k["kind"] for k in alone] == ["box_corner"] * 7
    seen_alone = {(round(k["x"], 6), round(k["y"], 6)) for k in alone}
    # a sphere between the camera and the box's left half hides the left corners
    blocker = Primitive("sphere", (0.96, -2.52, 1.62), (0.35,) * 3, FLAT_GREY)
    scene = _scene(camera, [box, blocker])
    render = render_scene(scene)
    keypoints = visible_keypoints(scene)
    corners = [k for k in keypoints if k["kind"] == "box_corner"]
    assert 0 < len(corners) < 7
    for corner in alone:  # expected from the depth map: excluded exactly where the sphere is in front
        behind_sphere = render.surface[int(corner["y"]), int(corner["x"])] == 2
        listed = (round(corner["x"], 6), round(corner["y"], 6)) in {(round(k["x"], 6), round(k["y"], 6))
                                                                   for k in corners}
        assert listed != behind_sphere
    assert seen_alone >= {(round(k["x"], 6), round(k["y"], 6)) for k in corners}
    assert [k["object"] for k in keypoints if k["kind"] == "sphere_centre"] == [2]
    # a sphere wholly behind the box loses its centre keypoint
    tucked = Primitive("sphere", (-0.3, 0.9, 0.3), (0.3,) * 3, FLAT_GREY)
    tucked_scene = _scene(camera, [box, tucked])
    assert not (render_scene(tucked_scene).surface == 2).any()
    assert not [k for k in visible_keypoints(tucked_scene) if k["kind"] == "sphere_centre"]
    response = keypoint_response(keypoints, 128, sigma=2.0)
    assert response[..., KEYPOINT_KINDS.index("cylinder_cap_centre")].max() == 0
    assert response[..., KEYPOINT_KINDS.index("sphere_centre")].max() > 0.8


def test_semantic_and_instance_maps_follow_the_label_map():
    camera = Camera.look_at((0.0, -6.0, 3.0), (0.0, 0.0, 0.5), 64, focal=64.0)
    objects = [Primitive("cylinder", (-1.2, 0.0, 0.5), (0.4, 0.4, 0.5), FLAT_GREY),
               Primitive("sphere", (0.0, 0.0, 0.5), (0.5,) * 3, FLAT_GREY),
               Primitive("box", (1.2, 0.0, 0.4), (0.4, 0.4, 0.4), FLAT_GREY)]
    scene = _scene(camera, objects)
    semantic, instance = semantic_maps(scene, render_scene(scene).surface)
    assert set(np.unique(semantic)) == {0, 1, 2, 3, 4}
    for index, primitive in enumerate(objects):
        assert set(np.unique(semantic[instance == index + 1])) == {SEMANTIC_CLASSES.index(primitive.kind)}
    assert set(np.unique(semantic[instance == 0])) == {0, 1}
