"""Probes against independent references: sklearn's AP, brute-force recall, separable data, and
correspondence features whose best possible answer is known. Every probe's per-sample columns average
to its metrics and are keyed by the evaluation items they score."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score

from harness.core.preprocessing import Preprocess
from harness.datasets.homography import apply_homography, prepare_homography_photos, random_homography
from harness.datasets.manifest import Item, Manifest
from harness.probes import PROBES, ProbeInputs, ProbeResult, get_probe
from harness.probes.base import validate_probe_params
from harness.probes.classification import topk_accuracy, topk_correct
from harness.probes.correspondence import evaluation_points
from harness.probes.retrieval import retrieval_metrics, retrieval_scores
from harness.runs.probe_run import check_result


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """The linear probe runs hundreds of tiny steps; with a busy CPU, multi-threaded torch spends ~40×
    longer synchronising threads than computing (measured: 3.6 s vs 0.09 s per run on 2 loaded cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def assert_samples_consistent(result: ProbeResult, ids: list[str], unit: str, columns: set[str]) -> None:
    """The ProbeResult contract: unique ids for the eval items, one float64 row each, means = metrics."""
    assert result.unit == unit
    assert result.sample_ids == ids
    assert len(set(result.sample_ids)) == len(result.sample_ids)
    assert set(result.samples) == columns
    assert columns <= set(result.metrics)
    for name, column in result.samples.items():
        assert column.shape == (len(ids),) and column.dtype == np.float64, name
        assert np.isclose(column.mean(), result.metrics[name], rtol=0, atol=1e-12), name
        if name == "mean_error_px":
            assert (column >= 0).all(), name
        elif name.startswith("auc@"):  # a share of the PCK curve's area
            assert ((column >= 0) & (column <= 1)).all(), name
        else:
            assert set(np.unique(column)) <= {0.0, 1.0}, name


# -- retrieval ------------------------------------------------------------------------------------------


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return a @ b.T


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_retrieval_map_matches_sklearn_and_recall_brute_force(seed):
    rng = np.random.default_rng(seed)
    queries, gallery = rng.standard_normal((25, 6)), rng.standard_normal((60, 6))
    q_labels = rng.integers(0, 4, size=25)
    g_labels = np.concatenate([np.arange(4), rng.integers(0, 4, size=56)])  # every label has a match
    rng.shuffle(g_labels)
    ks = [1, 3, 10]
    metrics = retrieval_metrics(queries, q_labels, gallery, g_labels, ks)
    similarity = _cosine(queries, gallery)
    expected_map = np.mean(
        [average_precision_score(g_labels == q_labels[i], similarity[i]) for i in range(len(queries))]
    )
    assert metrics["map"] == pytest.approx(expected_map, abs=1e-9)
    for k in ks:
        hits = [
            any(g_labels[j] == q_labels[i] for j in np.argsort(-similarity[i])[:k]) for i in range(len(queries))
        ]
        assert metrics[f"recall@{k}"] == pytest.approx(np.mean(hits), abs=1e-12)
    assert set(metrics) == {"map", "recall@1", "recall@3", "recall@10"}
    # per query: each row is that query's AP and hit, against the same references
    scores = retrieval_scores(queries, q_labels, gallery, g_labels, ks)
    for i in range(len(queries)):
        assert scores["map"][i] == pytest.approx(
            average_precision_score(g_labels == q_labels[i], similarity[i]), abs=1e-9)
        for k in ks:
            hit = any(g_labels[j] == q_labels[i] for j in np.argsort(-similarity[i])[:k])
            assert scores[f"recall@{k}"][i] == float(hit)
    assert {name: float(column.mean()) for name, column in scores.items()} == metrics


def test_retrieval_perfect_and_scale_invariant():
    centres = np.eye(3) * 10
    gallery = np.repeat(centres, 4, axis=0) + 0.01 * np.random.default_rng(0).standard_normal((12, 3))
    g_labels = np.repeat(np.arange(3), 4)
    queries, q_labels = centres * np.array([[1.0], [7.0], [0.1]]), np.arange(3)  # norms must not matter
    metrics = retrieval_metrics(queries, q_labels, gallery, g_labels, [1, 4])
    assert metrics == {"map": 1.0, "recall@1": 1.0, "recall@4": 1.0}


def test_retrieval_refuses_queries_without_any_relevant_item():
    """A query whose label is absent from the gallery has no AP: the run fails rather than averaging
    mAP and recall over different sets of queries."""
    rng = np.random.default_rng(0)
    queries, gallery = rng.standard_normal((4, 5)), rng.standard_normal((10, 5))
    g_labels = rng.integers(0, 2, size=10)
    g_labels[:2] = [0, 1]
    q_labels = np.array([0, 1, 0, 7])  # label 7 is not in the gallery
    with pytest.raises(ValueError, match=r"1 of 4 queries.*labels absent from the gallery: 7"):
        retrieval_metrics(queries, q_labels, gallery, g_labels, [10])
    assert retrieval_metrics(queries[:3], q_labels[:3], gallery, g_labels, [10])["recall@10"] == 1.0


def test_retrieval_probe_scores_every_query():
    manifest, table = _separable(3, per_class={"gallery": 6, "query": 3}, classes=3)
    inputs = ProbeInputs(manifest, lambda item: table[item.path],
                         {"query_split": "query", "gallery_split": "gallery", "recall_at": [1, 5]}, 0)
    result = get_probe("retrieval").run(inputs)
    queries = manifest.split("query")
    assert_samples_consistent(result, [item.path for item in queries], "query", {"map", "recall@1", "recall@5"})
    assert set(result.metrics) == {"map", "recall@1", "recall@5"}
    assert result.metrics["map"] == float(result.samples["map"].mean())  # exactly the mean of the AP column
    assert (result.samples["recall@1"] <= result.samples["recall@5"]).all()
    similarity = _cosine(np.stack([table[i.path] for i in queries]),
                         np.stack([table[i.path] for i in manifest.split("gallery")]))
    g_labels = np.array([i.label for i in manifest.split("gallery")])
    for row, item in enumerate(queries):
        expected = average_precision_score(g_labels == item.label, similarity[row])
        assert result.samples["map"][row] == pytest.approx(expected, abs=1e-9)


# -- classification -----------------------------------------------------------------------------------

CLASSIFICATION_PARAMS = {"train_split": "train", "eval_split": "val", "epochs": 30, "lr": 0.01,
                         "weight_decay": 1e-4, "batch_size": 16}


def _separable(seed: int = 0, per_class: dict[str, int] | None = None, dim: int = 12, classes: int = 4):
    """Items and a feature table: class centres 8σ apart in random directions, plus unit noise."""
    per_class = per_class or {"train": 20, "val": 10}
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((classes, dim))
    centres *= 8 / np.linalg.norm(centres, axis=1, keepdims=True)
    items, table = [], {}
    for split, count in per_class.items():
        for label in range(classes):
            for i in range(count):
                item = Item(f"{split}/{label}/{i}.png", f"{split}{label}{i}".ljust(64, "0"), split, label)
                items.append(item)
                table[item.path] = (centres[label] + rng.standard_normal(dim)).astype(np.float32)
    manifest = Manifest("toy", "/nowhere", items, [f"c{i}" for i in range(classes)])
    return manifest, table


def _classification_inputs(manifest, table, seed=0, **params) -> ProbeInputs:
    return ProbeInputs(manifest, lambda item: table[item.path], {**CLASSIFICATION_PARAMS, **params}, seed)


def test_classification_on_separable_data():
    manifest, table = _separable()
    result = get_probe("classification").run(_classification_inputs(manifest, table))
    metrics = result.metrics
    assert set(metrics) == {"top1", "top5", "macro_f1", "train_top1"}
    # macro-F1 and train top-1 do not decompose over eval images: no column
    assert_samples_consistent(result, [item.path for item in manifest.split("val")], "image", {"top1", "top5"})
    assert (result.samples["top1"] <= result.samples["top5"]).all()
    assert metrics["top1"] >= 0.95
    assert metrics["train_top1"] >= 0.95
    assert metrics["macro_f1"] >= 0.95
    assert metrics["top5"] == 1.0  # k is capped at the number of classes


def test_classification_is_deterministic_per_seed():
    manifest, table = _separable(1)
    run = get_probe("classification").run
    first = run(_classification_inputs(manifest, table, seed=0))
    again = run(_classification_inputs(manifest, table, seed=0))
    assert again.metrics == first.metrics and again.sample_ids == first.sample_ids
    assert set(again.samples) == set(first.samples)
    for name, column in first.samples.items():
        assert np.array_equal(again.samples[name], column)
    other = run(_classification_inputs(manifest, table, seed=5)).metrics
    for value in other.values():
        assert 0.0 <= value <= 1.0
    assert other["top1"] >= 0.95


def test_classification_learns_from_the_train_split_only():
    """Train labels shuffled, eval labels true: a probe that learns only from `train` is near chance."""
    manifest, table = _separable(2, per_class={"train": 30, "val": 30})
    train_labels = np.random.default_rng(0).permutation([i.label for i in manifest.split("train")])
    relabelled, k = [], 0
    for item in manifest.items:
        if item.split == "train":
            item = Item(item.path, item.sha256, item.split, int(train_labels[k]))
            k += 1
        relabelled.append(item)
    noisy = Manifest("toy", "/nowhere", relabelled, manifest.classes)
    metrics = get_probe("classification").run(_classification_inputs(noisy, table, epochs=10)).metrics
    assert metrics["top1"] <= 0.5  # chance is 0.25; the clean probe gets ≥ 0.95


def test_topk_accuracy_by_hand():
    logits = np.array([
        [0.1, 0.5, 0.5],  # tie between classes 1 and 2: the lower index ranks first
        [0.9, 0.05, 0.05],  # tie between 1 and 2 again, below class 0
        [0.2, 0.2, 0.6],
        [0.0, 0.0, 0.0],  # all tied: ranking 0, 1, 2
    ])
    labels = np.array([2, 2, 1, 0])
    assert topk_accuracy(logits, labels, 1) == 0.25  # only row 3 (all tied → class 0)
    assert topk_accuracy(logits, labels, 2) == 0.5  # rows 0 (1,2) and 3 (0,1); row 1 has (0,1); row 2 (2,0)
    assert topk_accuracy(logits, labels, 3) == 1.0
    assert topk_accuracy(logits, labels, 5) == 1.0  # k beyond the class count is capped
    assert topk_correct(logits, labels, 1).tolist() == [0.0, 0.0, 0.0, 1.0]
    assert topk_correct(logits, labels, 2).tolist() == [1.0, 0.0, 0.0, 1.0]


def test_registered_probes():
    assert set(PROBES.names()) == {
        "classification", "correspondence", "retrieval", "depth", "surface_normal", "generic_segmentation",
        "semantic_segmentation", "edge", "keypoints2d", "occlusion_edge", "similarity",
        "detection", "edge_bsds", "finetune_classification", "counting", "illuminant", "relative_depth",
        "anomaly_knn", "anomaly_gaussian", "class_overlap", "head_family", "orientation", "albedo", "shading",
        "instance_segmentation", "relative_pose", "corners", "target_overlap"}
    assert get_probe("correspondence").higher_is_better({"pck@8": 1, "mean_error_px": 2}) == {
        "pck@8": True, "mean_error_px": False}


# -- correspondence -------------------------------------------------------------------------------------

SIZE = 256
GEOMETRY = Preprocess(crop=224, resize=256, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
# validated as the stage validates params.yaml's block: the thresholds become floats (8.0), and the metric names
# must still read pck@8 (the headline is pck@16; a run once failed on "pck@16.0")
CORRESPONDENCE_PARAMS = validate_probe_params(
    "correspondence", {"thresholds_px": [8, 16, 32], "points_per_side": 12, "margin": 0.1})


def _pair_manifest(homographies: list[np.ndarray]) -> Manifest:
    items, pairs = [], []
    for index, homography in enumerate(homographies):
        source, target = f"p{index}/source.png", f"p{index}/warp0.png"
        items += [Item(source, f"s{index}".ljust(64, "0"), "test", index),
                  Item(target, f"t{index}".ljust(64, "0"), "test", index)]
        pairs.append({"source": source, "target": target, "homography": homography.tolist()})
    return Manifest("pairs", "/nowhere", items, [f"p{i}" for i in range(len(homographies))], {"size": SIZE},
                    extra={"pairs": pairs})


def _run_correspondence(manifest: Manifest, table: dict) -> dict[str, float]:
    """The metrics, after checking the per-point columns against the points the probe must score."""
    inputs = ProbeInputs(manifest, lambda item: table[item.path], CORRESPONDENCE_PARAMS, 0, GEOMETRY)
    result = get_probe("correspondence").run(inputs)
    p = CORRESPONDENCE_PARAMS
    ids = [f"{pair['target']}#{index}" for pair in manifest.extra["pairs"] for index in range(len(
        evaluation_points(SIZE, p["points_per_side"], p["margin"], np.asarray(pair["homography"]))))]
    thresholds = p["thresholds_px"]
    assert get_probe("correspondence").headline in result.metrics
    columns = {f"pck@{t:g}" for t in thresholds} | {f"ceiling_pck@{t:g}" for t in thresholds} | {"mean_error_px"}
    columns |= {f"auc@{max(thresholds):g}"}
    assert_samples_consistent(result, ids, "point", columns)
    assert set(result.metrics) == columns
    error = result.samples["mean_error_px"]
    assert (error >= 0).all()
    # auc@T: the PCK curve over [0, T] px integrated numerically, per point, divided by T
    top = max(thresholds)
    steps = np.linspace(0.0, top, 4001)
    curve = (error[:, None] <= steps[None, :]).astype(np.float64)
    integral = ((curve[:, 1:] + curve[:, :-1]) / 2 * np.diff(steps)).sum(axis=1) / top
    assert np.allclose(result.samples[f"auc@{top:g}"], integral, atol=2 * top / 4000 / top)
    for t in thresholds:
        assert np.array_equal(result.samples[f"pck@{t:g}"], (error <= t).astype(np.float64))
        # a prediction within t px is a cell centre within t px, so no point beats its ceiling
        assert (result.samples[f"pck@{t:g}"] <= result.samples[f"ceiling_pck@{t:g}"]).all()
    return result.metrics


def _cell_centres(grid: int) -> np.ndarray:
    """(grid*grid, 2) source-image pixel centres of the feature cells under GEOMETRY."""
    return GEOMETRY.grid_centres_in_image((grid, grid), SIZE, SIZE).reshape(-1, 2)


def _encode(points: np.ndarray, sigma: float = 10.0) -> np.ndarray:
    """Positional features: Gaussian bumps on an 8-px anchor lattice; cosine falls with distance."""
    axis = np.arange(-16, SIZE + 17, 8.0)
    anchors = np.stack(np.meshgrid(axis, axis), axis=-1).reshape(-1, 2)
    d2 = ((points[:, None, :] - anchors[None, :, :]) ** 2).sum(-1)
    return np.exp(-d2 / (2 * sigma**2))


def test_identity_pairs_with_identical_features_reach_the_ceiling():
    grid = 14  # 16-px cells, like a patch-16 ViT
    one_hot = np.eye(grid * grid, dtype=np.float32).reshape(grid * grid, grid, grid)  # feature = cell index
    manifest = _pair_manifest([np.eye(3), np.eye(3)])
    table = {item.path: one_hot for item in manifest.items}
    metrics = _run_correspondence(manifest, table)
    for t in (8, 16, 32):
        assert metrics[f"pck@{t}"] == metrics[f"ceiling_pck@{t}"]
    # with 16-px cells every point is within 8·√2 px of a cell centre; not all are within 8 px
    assert metrics["ceiling_pck@16"] == metrics["ceiling_pck@32"] == 1.0
    assert 0.0 < metrics["ceiling_pck@8"] < 1.0
    assert metrics["mean_error_px"] <= 8 * np.sqrt(2)


def _filtered(manifest: Manifest, table: dict, **filters) -> ProbeResult:
    params = validate_probe_params("correspondence", {**CORRESPONDENCE_PARAMS, **filters})
    return get_probe("correspondence").run(ProbeInputs(manifest, lambda item: table[item.path], params, 0, GEOMETRY))


def test_mutual_and_ratio_filters_keep_unambiguous_matches_and_leave_the_unfiltered_scores():
    grid = 14
    one_hot = np.eye(grid * grid, dtype=np.float32).reshape(grid * grid, grid, grid)  # every cell unique
    manifest = _pair_manifest([np.eye(3), np.eye(3)])
    unique = {item.path: one_hot for item in manifest.items}
    plain = _run_correspondence(manifest, unique)
    both = _filtered(manifest, unique, mutual=True, ratio=0.95)
    for name, value in plain.items():  # the unfiltered scores are the same numbers
        assert both.metrics[name] == value
    points = len(both.sample_ids)
    kept = both.samples["match_rate"].astype(bool)
    assert kept.any()
    for t in (8, 16, 32):
        correct = kept & (both.samples["mean_error_px"] <= t)
        assert np.array_equal(both.samples[f"matched_pck@{t}"], correct.astype(np.float64))
        assert both.metrics[f"precision@{t}"] == correct.sum() / kept.sum()
    assert both.metrics["num_matches"] == kept.sum() / 2 and both.metrics["match_rate"] == kept.sum() / points
    # the same features everywhere: every match ties with every other, so the ratio test accepts none, and the
    # mutual check only the points in the one cell every query falls back to
    constant = {item.path: np.ones((8, grid, grid), np.float32) for item in manifest.items}
    assert _filtered(manifest, constant, ratio=0.9).metrics["match_rate"] == 0.0
    assert _filtered(manifest, constant, mutual=True).metrics["match_rate"] < 0.05
    # filters left out of params.yaml are left out of the recorded parameters: the board keeps its key
    assert "mutual" not in CORRESPONDENCE_PARAMS and "ratio" not in CORRESPONDENCE_PARAMS


def test_identical_random_features_reach_the_ceiling():
    grid = 7  # 32-px cells: ceiling@16 is below 1
    dense = np.random.default_rng(0).standard_normal((256, grid, grid)).astype(np.float32)
    manifest = _pair_manifest([np.eye(3)])
    metrics = _run_correspondence(manifest, {item.path: dense for item in manifest.items})
    assert metrics["ceiling_pck@16"] < 1.0
    for t in (8, 16, 32):
        assert metrics[f"pck@{t}"] == pytest.approx(metrics[f"ceiling_pck@{t}"], abs=0.05)


def test_positional_features_under_real_homographies_approach_the_ceiling():
    """Target cell j carries the encoding of the source pixel it shows, H⁻¹·c_j: a perfect descriptor."""
    grid = 14
    rng = np.random.default_rng(0)
    homographies = [random_homography(rng, SIZE, 0.12) for _ in range(3)]
    manifest = _pair_manifest(homographies)
    centres = _cell_centres(grid)

    def as_map(features: np.ndarray) -> np.ndarray:
        return features.T.reshape(-1, grid, grid).astype(np.float32)

    table, wrong_way = {}, {}
    for pair, homography in zip(manifest.extra["pairs"], homographies, strict=True):
        table[pair["source"]] = wrong_way[pair["source"]] = as_map(_encode(centres))
        table[pair["target"]] = as_map(_encode(apply_homography(np.linalg.inv(homography), centres)))
        wrong_way[pair["target"]] = as_map(_encode(apply_homography(homography, centres)))
    metrics = _run_correspondence(manifest, table)
    assert metrics["ceiling_pck@16"] == 1.0
    assert metrics["pck@16"] >= 0.95  # measured: 1.0
    assert metrics["pck@32"] == 1.0
    assert metrics["pck@8"] >= metrics["ceiling_pck@8"] - 0.1  # measured: 0.75 vs 0.78
    # features that encode the homography backwards must do clearly worse (measured: pck@16 = 0.25)
    backwards = _run_correspondence(manifest, wrong_way)
    assert backwards["pck@16"] < 0.5
    assert backwards["mean_error_px"] > 2 * metrics["mean_error_px"]


def test_noise_features_are_far_below_the_ceiling(tmp_path):
    """Through the real dataset builder: pure-noise features match almost nothing."""
    manifest = prepare_homography_photos(
        "hp", tmp_path, photos=["skimage:astronaut", "skimage:coffee"], size=SIZE, warps_per_photo=2,
        max_shift=0.12, seed=0,
    )
    rng = np.random.default_rng(0)
    table = {item.path: rng.standard_normal((64, 14, 14)).astype(np.float32) for item in manifest.items}
    metrics = _run_correspondence(manifest, table)
    assert metrics["ceiling_pck@16"] == 1.0
    assert metrics["pck@16"] < 0.2 * metrics["ceiling_pck@16"]
    assert metrics["mean_error_px"] > 40


def test_evaluation_points_stay_inside_the_margin():
    homography = random_homography(np.random.default_rng(1), SIZE, 0.12)
    points = evaluation_points(SIZE, 12, 0.1, homography)
    lo, hi = 0.1 * SIZE, 0.9 * SIZE
    assert 0 < len(points) <= 144
    for p in (points, apply_homography(homography, points)):
        assert (p >= lo - 1e-9).all() and (p <= hi + 1e-9).all()
    assert len(evaluation_points(SIZE, 12, 0.1, np.eye(3))) == 144


def test_floored_std_keeps_near_constant_features_from_exploding():
    from harness.probes.base import STD_FLOOR, floored_std

    std = np.array([1.0, 2.0, 1e-9, 0.0])
    floor = STD_FLOOR * np.sqrt(np.mean(std**2))
    out = floored_std(std)
    assert out.dtype == np.float32
    assert np.allclose(out, np.maximum(std, floor) + 1e-6, rtol=1e-6)
    assert out[2] == out[3] and out[2] > 0.1  # the floor, not 1e-9
    assert np.allclose(floored_std(np.full(5, 3.0)), 3.0 + 1e-6)  # no effect on a uniform scale


def test_patch_thresholds_are_each_backbones_cell_pitch_in_pixels():
    """Under GEOMETRY a 7×7 map's cells are 224/7 = 32 px of the resized image, 32·256/256 px of the photo: PCK at
    1 patch is PCK at 32 px, and a 14×14 map's 1 patch is 16 px."""
    rng = np.random.default_rng(3)
    manifest = _pair_manifest([np.eye(3), np.array([[1.0, 0.02, 5.0], [0.01, 1.0, -7.0], [0.0, 0.0, 1.0]])])
    for grid, pixels in ((7, 32), (14, 16)):
        table = {item.path: rng.normal(size=(8, grid, grid)).astype(np.float32) for item in manifest.items}
        in_px = _filtered(manifest, table, thresholds_px=[pixels / 2, pixels, 2 * pixels], headline=f"pck@{pixels}")
        in_patch = _filtered(manifest, table, thresholds_px=[0.5, 1, 2], units="patch", headline="pck@1patch")
        for t, px in ((0.5, pixels / 2), (1, pixels), (2, 2 * pixels)):
            np.testing.assert_array_equal(in_patch.samples[f"pck@{t:g}patch"], in_px.samples[f"pck@{px:g}"])
            np.testing.assert_array_equal(in_patch.samples[f"ceiling_pck@{t:g}patch"],
                                          in_px.samples[f"ceiling_pck@{px:g}"])
        np.testing.assert_array_equal(in_patch.samples["auc@2patch"], in_px.samples[f"auc@{2 * pixels:g}"])
        check_result(get_probe("correspondence"), in_patch, "pck@1patch")


def test_a_headline_the_thresholds_do_not_give_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"headline 'pck@16' is not among the PCKs these thresholds give "
                                         r"\(pck@0.5patch, pck@1patch\): set headline to one of them"):
        validate_probe_params("correspondence", {**CORRESPONDENCE_PARAMS, "thresholds_px": [0.5, 1],
                                                 "units": "patch"})


def test_a_warp_sweep_reports_pck_per_strength(tmp_path):
    photos = ["skimage:astronaut", "skimage:coffee"]
    sweep = prepare_homography_photos("sweep", tmp_path / "sweep", photos, 64, 2, [0.05, 0.2], seed=1)
    single = prepare_homography_photos("one", tmp_path / "one", photos, 64, 2, 0.05, seed=1)
    assert [p["max_shift"] for p in sweep.extra["pairs"]] == [0.05, 0.05, 0.2, 0.2] * 2
    assert all("max_shift" not in p for p in single.extra["pairs"])  # a single level writes what it always did
    assert [i.path for i in single.items] == ["astronaut/source.png", "astronaut/warp0.png", "astronaut/warp1.png",
                                             "coffee/source.png", "coffee/warp0.png", "coffee/warp1.png"]
    # the first level's warps are the single-level dataset's: the same draws in the same order
    assert sweep.extra["pairs"][0]["homography"] == single.extra["pairs"][0]["homography"]
    with pytest.raises(ValueError, match="each in"):
        prepare_homography_photos("bad", tmp_path / "bad", photos, 64, 2, [0.05, 0.6], seed=1)
    rng = np.random.default_rng(4)
    manifest = Manifest("sweep", str(tmp_path), sweep.items, sweep.classes, {"size": SIZE}, sweep.extra)
    table = {item.path: rng.normal(size=(4, 8, 8)).astype(np.float32) for item in manifest.items}
    result = _filtered(manifest, table)
    level = np.array([float(p["max_shift"]) for p in manifest.extra["pairs"]
                      for _ in range(len(evaluation_points(SIZE, 12, 0.1, np.asarray(p["homography"]))))])
    for shift in (0.05, 0.2):
        for t in (8, 16, 32):
            assert result.metrics[f"pck@{t}_shift{shift:g}"] == pytest.approx(
                result.samples[f"pck@{t}"][level == shift].mean(), abs=1e-15)
    check_result(get_probe("correspondence"), result)
