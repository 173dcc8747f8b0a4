"""Corners: the scene pairs' corner ground truth (deterministic, the older files unchanged), matching and
repeatability by hand, the true corners repeating under the true pose, and the whole probe on tiny renders."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from harness.datasets.kinds import prepare_dataset
from harness.datasets.manifest import MANIFEST_NAME, Manifest
from harness.datasets.scene_corners import local_maxima, texture_corners, thin
from harness.probes import ProbeInputs, get_probe
from harness.probes.base import validate_probe_params
from harness.probes.corners.matching import ViewPair, detection_score, match_points, repeatability, transfer
from harness.probes.corners.probe import COLUMNS, corner_heatmap, detect_corners
from harness.probes.dense.targets import load_target
from harness.runs.probe_run import check_result

SIZE = 64
SPEC = {"kind": "procedural_scene_pairs", "pairs": {"train": 1, "val": 2}, "seed": 3, "size": SIZE}
# SHA-256 of {path: sha256} over every file this SPEC wrote before corners existed (commit 9dc5365: rgb.png,
# depth.npy, annotations.json): the corners must only add files
FILES_BEFORE_CORNERS = "f055e8f55dbd3cd65df9a258fc3bd3202c4a443dc0375e3f9d96829aa32095bd"
PROBE_PARAMS = {"eval_split": "val", "train_split": "train", "head": "linear", "target_size": 16, "epochs": 3,
                "lr": 0.01, "weight_decay": 0.0, "batch_size": 2, "sigma": 4.0, "epsilon": 8.0,
                "nms_radius": 6.0, "score_threshold": 0.05, "max_corners": 20}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Manifest:
    return prepare_dataset("pairs", SPEC, tmp_path_factory.mktemp("pairs"), ("train", "val"))


def _hashes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST_NAME}


def _views(depth: float = 5.0, rotation: np.ndarray | None = None, translation=(0.0, 0.0, 0.0)) -> ViewPair:
    """Two cameras of SIZE px looking at a wall `depth` metres ahead (the same wall in both views)."""
    k = np.array([[64.0, 0.0, SIZE / 2], [0.0, 64.0, SIZE / 2], [0.0, 0.0, 1.0]])
    wall = np.full((SIZE, SIZE), depth)
    return ViewPair(wall, wall, k, k, np.eye(3) if rotation is None else rotation, np.asarray(translation), SIZE)


# -- the dataset ------------------------------------------------------------------------------------------------


def test_corners_only_add_files_and_are_byte_deterministic(pairs, tmp_path):
    files = _hashes(Path(pairs.root))
    before = {path: digest for path, digest in files.items() if not path.endswith("corners.npy")}
    assert hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest() == FILES_BEFORE_CORNERS
    assert sorted(set(files) - set(before)) == [f"{split}/pair_{i:05d}/view{v}/corners.npy"
                                                for split, n in (("train", 1), ("val", 2))
                                                for i in range(n) for v in (0, 1)]
    again = prepare_dataset("pairs", SPEC, tmp_path / "again", ("val",))
    assert again.identity == pairs.identity and _hashes(tmp_path / "again") == files
    # the corner settings are in the identity, and change the corners only
    fewer = prepare_dataset("pairs", {**SPEC, "corner_threshold": 0.5}, tmp_path / "fewer", ("val",))
    assert fewer.identity != pairs.identity
    changed = {path for path, digest in _hashes(tmp_path / "fewer").items() if files[path] != digest}
    assert changed and all(path.endswith("corners.npy") for path in changed)
    for item in pairs.items:
        corners = np.asarray(load_target(pairs, item, "corners"))
        assert corners.dtype == np.float32 and corners.ndim == 2 and corners.shape[1] == 3
        assert set(np.unique(corners[:, 2])) <= {0.0, 1.0}
        assert ((corners[:, :2] >= 0) & (corners[:, :2] < SIZE)).all()
    assert sum(len(load_target(pairs, item, "corners")) for item in pairs.items) > 20


def test_corner_settings_are_refused_out_of_range(tmp_path):
    with pytest.raises(ValueError, match="corner_radius"):
        prepare_dataset("p", {**SPEC, "corner_radius": 0.5}, tmp_path)


def test_texture_corners_are_local_maxima_thinned_to_the_radius():
    response = np.zeros((12, 12))
    response[2, 2], response[2, 4], response[9, 9], response[6, 6] = 5.0, 4.0, 3.0, 0.2
    response[9, 10] = 3.0  # a plateau: the first in raster order stands for it
    assert local_maxima(response)[9, 9] and local_maxima(response)[9, 10]
    found = texture_corners(response, threshold=0.1, radius=3.0)
    # (4.5, 2.5) lies 2 px from the stronger (2.5, 2.5); (6.5, 6.5)'s 0.2 is under 0.1 × 5
    assert found.tolist() == [[2.5, 2.5], [9.5, 9.5]]
    # a taken point (an object vertex) suppresses what lies within the radius of it, and nothing else
    assert texture_corners(response, 0.1, 2.0, taken=np.array([[2.0, 3.0]])).tolist() == [[4.5, 2.5], [9.5, 9.5]]
    assert thin(np.array([[0.0, 0.0], [3.0, 0.0], [3.1, 0.0]]), np.array([1.0, 1.0, 2.0]), 3.0).tolist() == [2, 0]
    assert texture_corners(np.zeros((4, 4)), 0.1, 2.0).shape == (0, 2)


# -- matching and repeatability by hand ---------------------------------------------------------------------------


def test_precision_and_recall_match_one_to_one_within_epsilon():
    truth = np.array([[10.0, 10.0], [20.0, 10.0], [40.0, 40.0]])
    found = np.array([[11.0, 10.0], [12.0, 10.0], [20.0, 13.0], [60.0, 60.0]])
    # (11, 10) takes (10, 10) at 1 px; (12, 10) is 2 px from it but it is taken, and 8 px from (20, 10) at ε = 4;
    # (20, 13) takes (20, 10) at 3 px; (60, 60) matches nothing
    assert match_points(found, truth, 4.0).tolist() == [[0, 0], [2, 1]]
    score = detection_score(found, truth, 4.0)
    assert (score.precision, score.recall) == (0.5, 2 / 3)
    assert score.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    wider = detection_score(found, truth, 8.0)  # (12, 10) now reaches (20, 10) at 8 px, but (20, 13) took it at 3
    assert (wider.precision, wider.recall) == (0.5, 2 / 3)
    empty = np.empty((0, 2))
    assert detection_score(empty, empty, 4.0).f1 == 1.0
    assert (detection_score(empty, truth, 4.0).recall, detection_score(empty, truth, 4.0).f1) == (0.0, 0.0)
    assert (detection_score(found, empty, 4.0).precision, detection_score(found, empty, 4.0).f1) == (0.0, 0.0)


def test_identity_pose_repeats_every_detection_and_a_shift_beyond_epsilon_does_not():
    points = np.array([[10.5, 10.5], [30.5, 20.5], [50.5, 50.5]])
    carried, seen = transfer(points, _views())
    assert seen.all() and np.allclose(carried, points, atol=1e-9)
    assert repeatability(points, points, _views(), 2.0).repeatability == 1.0
    moved = points + np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 0.0]])  # one view-1 detection 3 px off
    result = repeatability(points, moved, _views(), 2.0)
    assert (result.repeated, result.common, result.repeatability) == (2, 3, 2 / 3)
    assert repeatability(points, moved, _views(), 3.0).repeatability == 1.0  # distance <= ε repeats


def test_points_leaving_the_view_are_not_in_the_denominator():
    # the second camera 1 m to the right (x1 = x0 − 1 m): at 5 m and f = 64 px the wall moves 12.8 px left
    views = _views(translation=(-1.0, 0.0, 0.0))
    points0 = np.array([[5.5, 32.5], [30.5, 32.5], [40.5, 10.5]])  # the first leaves view 1 (x = −7.3)
    carried, seen = transfer(points0, views)
    assert seen.tolist() == [False, True, True] and np.allclose(carried[1:, 0], points0[1:, 0] - 12.8)
    points1 = np.vstack([carried[1:], [[60.5, 60.5]]])  # the last one left view 0 (x = 73.3)
    result = repeatability(points0, points1, views, 1.0)
    assert (result.repeated, result.common, result.repeatability) == (2, 2, 1.0)
    # no surface under a point (sky) takes it out too; an empty side repeats nothing
    sky = ViewPair(np.zeros((SIZE, SIZE)), views.depth1, views.k0, views.k1, views.rotation, views.translation, SIZE)
    assert not transfer(points0, sky)[1].any()
    assert repeatability(points0, np.empty((0, 2)), views, 1.0).repeatability == 0.0


def test_a_nearer_surface_in_the_second_view_hides_a_point():
    views = _views()
    screen = views.depth1.copy()
    screen[:, 32:] = 2.0  # something 2 m away covers the right half of view 1
    hidden = ViewPair(views.depth0, screen, views.k0, views.k1, views.rotation, views.translation, SIZE)
    assert transfer(np.array([[10.5, 10.5], [50.5, 10.5]]), hidden)[1].tolist() == [True, False]


def test_true_corners_repeat_under_the_true_pose(pairs):
    by_path = {item.path: item for item in pairs.items}
    rates = []
    for pair in pairs.extra["pairs"]:
        items = [by_path[pair[view]] for view in ("view0", "view1")]
        truth = [np.asarray(load_target(pairs, item, "corners"), dtype=np.float64)[:, :2] for item in items]
        views = ViewPair.from_pair(pair, *(load_target(pairs, item, "depth") for item in items), SIZE)
        result = repeatability(truth[0], truth[1], views, 4.0)
        assert result.common > 0, pair["id"]
        rates.append(result.repeatability)
    assert np.mean(rates) > 0.6, rates


# -- the probe ----------------------------------------------------------------------------------------------------


def test_heatmap_peaks_decode_to_their_corners():
    points = np.array([[10.0, 12.0], [44.0, 40.0]])
    heatmap = corner_heatmap(points, SIZE, 16, 4.0)
    assert heatmap.shape == (16, 16) and heatmap.dtype == np.float32 and heatmap.max() <= 1.0
    found = detect_corners(heatmap, SIZE, 0.5, 6.0, 10)
    assert len(found) == 2 and detection_score(found, points, 4.0).f1 == 1.0
    assert len(detect_corners(heatmap, SIZE, 0.5, 6.0, 1)) == 1


def test_probe_is_deterministic_and_its_columns_are_its_metrics(pairs, fake_dense_features):
    block = validate_probe_params("corners", PROBE_PARAMS)
    spec = get_probe("corners")
    results = [spec.run(ProbeInputs(pairs, fake_dense_features(pairs), block, 0)) for _ in range(2)]
    result = results[0]
    check_result(spec, result)
    assert set(result.samples) == set(COLUMNS) and result.unit == "pair"
    assert result.sample_ids == ["val/pair_00000", "val/pair_00001"]
    for name, column in result.samples.items():
        assert result.metrics[name] == float(np.mean(column))
        assert np.array_equal(column, results[1].samples[name])
    assert result.metrics == results[1].metrics and "train_loss" in result.metrics
    assert 0.6 < result.metrics["oracle_repeatability"] <= 1.0
    assert all(0.0 <= result.metrics[m] <= 1.0 for m in ("precision", "recall", "f1", "repeatability"))
    assert spec.resolve_headline(block) == "f1"
    assert spec.resolve_headline(validate_probe_params("corners", {**PROBE_PARAMS, "headline": "repeatability"})) \
        == "repeatability"


def test_params_are_validated_and_a_split_without_pairs_is_refused(pairs, fake_dense_features):
    with pytest.raises(ValueError):
        validate_probe_params("corners", {**PROBE_PARAMS, "epsilonn": 4.0})
    with pytest.raises(ValueError):
        validate_probe_params("corners", {k: v for k, v in PROBE_PARAMS.items() if k != "sigma"})
    block = validate_probe_params("corners", {**PROBE_PARAMS, "eval_split": "test"})
    with pytest.raises(ValueError, match="no pairs in split 'test'"):
        get_probe("corners").run(ProbeInputs(pairs, fake_dense_features(pairs), block, 0))
