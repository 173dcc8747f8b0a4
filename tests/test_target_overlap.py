"""The training-free target-overlap probe (`knn-target-overlap/v1`, Geary's contiguity ratio over a kNN graph):
by hand on a tiny example, against loops over sklearn's neighbour search, against its chance value (features that
carry the target, features that do not, and the identity with k = every reference image), and end to end on a
tiny scenes manifest read the way counting and the illuminant read theirs."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from PIL import Image
from sklearn.neighbors import NearestNeighbors

from harness.core import paths
from harness.datasets.manifest import Item, Manifest
from harness.probes import neighbours, resampled
from harness.probes.base import ProbeInputs, column_means, get_probe, validate_probe_params
from harness.probes.statistics.target_overlap import r_squared
from harness.probes.target_overlap import TARGET_OVERLAP, overlap_columns
from harness.runs.probe_run import check_result

PARAMS = {"reference_split": "train", "eval_split": "val", "k": 10, "target": "count"}


def _r2(auxiliary: dict) -> float:
    return 1.0 - auxiliary["squared_error"].sum() / auxiliary["squared_deviation"].sum()


def test_overlap_by_hand():
    # one feature channel (standardising it keeps the order of distances); targets 0, 2, 4, 6: mean 3, σ² = 5
    reference, y_reference = np.array([[0.0], [1.0], [2.0], [3.0]]), np.array([0.0, 2.0, 4.0, 6.0])
    queries, y = np.array([[0.4], [2.9]]), np.array([1.0, 0.0])
    scores, auxiliary = overlap_columns(reference, y_reference, queries, y, k=2)
    # query 0's neighbours: targets 0 and 2, |1 − 0|² = |1 − 2|² = 1, mean 1, over 2σ² = 10
    # query 1's neighbours: targets 6 and 4, 36 and 16, mean 26
    np.testing.assert_allclose(scores["overlap"], [0.1, 2.6], rtol=0, atol=1e-15)
    # chance: (|y − 3|² + 5) / 10
    np.testing.assert_allclose(scores["overlap_chance"], [0.9, 1.4], rtol=0, atol=1e-15)
    # the neighbours' mean targets 1 and 5: squared errors 0 and 25 against deviations 4 and 9
    np.testing.assert_allclose(auxiliary["squared_error"], [0.0, 25.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(auxiliary["squared_deviation"], [4.0, 9.0], rtol=0, atol=1e-15)
    assert float(r_squared(auxiliary, np.ones((1, 2)))[0]) == pytest.approx(1 - 25 / 13, abs=1e-15)


def test_overlap_is_its_definition_over_sklearns_neighbour_search():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(170, 6)), rng.normal(size=(170, 3)) * [1.0, 2.0, 0.5]
    scores, auxiliary = overlap_columns(x[:120], y[:120], x[120:], y[120:], k=7)
    ref, q = neighbours.standardised(x[:120], x[120:])
    _, index = NearestNeighbors(n_neighbors=7, algorithm="brute").fit(ref).kneighbors(q)
    variance = sum(np.var(y[:120, d]) for d in range(3))
    for i, row in enumerate(index):
        pairs = [np.sum((y[120 + i] - y[r]) ** 2) for r in row]
        assert scores["overlap"][i] == pytest.approx(np.mean(pairs) / (2 * variance), rel=1e-12)
        assert auxiliary["squared_error"][i] == pytest.approx(np.sum((y[120 + i] - y[row].mean(axis=0)) ** 2),
                                                              rel=1e-12)


def _chance_tolerance(x: np.ndarray, y: np.ndarray, n: int, k: int) -> float:
    """Four standard deviations of mean(overlap − overlap_chance) when targets are independent of features.

    With the neighbour graph fixed, 2σ²·(overlap_i − chance_i) = mean over i's neighbours r of
    (‖y_r − μ‖² − σ²) − 2 (y_i − μ)·(y_r − μ): linear in each reference target, so the mean over the Q queries is
    Σ_r w_r (‖y_r − μ‖² − σ²) − 2 Σ_r b_r·(y_r − μ), w_r = (times r is a neighbour) / (Qk) and b_r = Σ over the
    queries that have r of (y_i − μ) / (Qk). With the reference targets drawn independently (symmetric, so no
    third moments), its variance is Σ w_r² Var‖y − μ‖² + 4 Σ b_rᵀ Cov(y) b_r: n enters through w and b (each of
    order 1/n), and a reference image many queries share (a hub) counts as much as its weight says.
    """
    reference, queries = neighbours.standardised(x[:n], x[n:])
    index = neighbours.nearest(reference, queries, k)
    weights = np.zeros((len(queries), n))
    np.put_along_axis(weights, index, 1.0 / (len(queries) * k), axis=1)
    deviation = y[:n] - y[:n].mean(axis=0)
    variance = float(np.sum(deviation ** 2, axis=1).mean())
    w, b = weights.sum(axis=0), weights.T @ (y[n:] - y[:n].mean(axis=0))
    spread = np.sum(w ** 2) * np.var(np.sum(deviation ** 2, axis=1))
    spread += 4 * np.einsum("rd,de,re->", b, np.cov(deviation.T, bias=True), b)
    return 4 * float(np.sqrt(spread)) / (2 * variance)


def test_features_that_carry_the_target_overlap_little_and_independent_ones_at_chance():
    rng = np.random.default_rng(1)
    n, k = 1000, 10
    y = rng.normal(size=(2 * n, 3))
    copy_scores, copy_aux = overlap_columns(*_split(y + 0.1 * rng.normal(size=y.shape), y, n), k=k)
    # chance ≈ 1 (evaluation targets distributed as the reference ones); the copy is far below it
    assert copy_scores["overlap_chance"].mean() == pytest.approx(1.0, abs=0.1)
    assert copy_scores["overlap"].mean() < 0.15 and _r2(copy_aux) > 0.9
    x = rng.normal(size=(2 * n, 8))  # independent of y
    scores, auxiliary = overlap_columns(*_split(x, y, n), k=k)
    gap = scores["overlap"].mean() - scores["overlap_chance"].mean()
    tolerance = _chance_tolerance(x, y, n, k)
    assert tolerance < 0.1 and abs(gap) < tolerance
    # R² of image-blind neighbours: E Σ‖y − ŷ‖² = Σ‖y − μ‖² + Q·σ²/k·(N − k)/(N − 1) (k distinct draws of N)
    sigma2 = np.var(y[:n], axis=0).sum()
    expected = -n * sigma2 / k * (n - k) / (n - 1) / auxiliary["squared_deviation"].sum()
    assert expected == pytest.approx(-0.1, abs=0.02) and _r2(auxiliary) == pytest.approx(expected, abs=0.05)


def _split(x: np.ndarray, y: np.ndarray, n: int):
    return x[:n], y[:n], x[n:], y[n:]


@pytest.mark.parametrize("dims", [1, 3])
def test_with_every_reference_image_as_a_neighbour_overlap_is_its_chance_value(dims):
    """Geary's identity: the mean of ‖y_i − y_r‖² over all r is ‖y_i − μ‖² + σ², whatever the features."""
    rng = np.random.default_rng(2 + dims)
    x, y = rng.normal(size=(90, 5)), rng.normal(size=(90, dims)) * 3 + 1
    scores, _ = overlap_columns(x[:60], y[:60], x[60:], y[60:], k=60)
    np.testing.assert_allclose(scores["overlap"], scores["overlap_chance"], rtol=0, atol=1e-12)
    assert abs(scores["overlap"].mean() - scores["overlap_chance"].mean()) < 1e-12


def test_r_squared_under_weights_is_the_r_squared_of_the_repeated_rows():
    rng = np.random.default_rng(4)
    columns = {"squared_error": rng.random(12), "squared_deviation": rng.random(12) + 0.5}
    weights = rng.integers(0, 3, size=(5, 12)).astype(np.float64)
    for row, value in zip(weights, r_squared(columns, weights), strict=True):
        repeated = {name: np.repeat(column, row.astype(int)) for name, column in columns.items()}
        assert value == pytest.approx(_r2(repeated), rel=1e-12)
    assert np.isnan(r_squared({"squared_error": np.ones(2), "squared_deviation": np.zeros(2)}, np.ones((1, 2)))[0])


def test_a_bad_target_is_one_line_naming_the_valid_ones_before_any_work():
    with pytest.raises(ValueError) as refused:
        validate_probe_params("target_overlap", {**PARAMS, "target": "colour"})
    message = str(refused.value)
    assert "\n" not in message and "target" in message and "'count'" in message and "'illuminant'" in message

    def no_features(item):
        raise AssertionError("features were read before the target was checked")

    manifest = Manifest("scenes", "/nowhere", [Item("train/0", "h0", "train"), Item("val/0", "h1", "val")])
    with pytest.raises(ValueError, match=r"^target_overlap: target 'colour' is not one of count, illuminant$"):
        TARGET_OVERLAP.run(ProbeInputs(manifest, no_features, {**PARAMS, "target": "colour"}, seed=0))
    with pytest.raises(ValueError, match="two different splits"):
        TARGET_OVERLAP.run(ProbeInputs(manifest, no_features, {**PARAMS, "eval_split": "train"}, seed=0))


def test_the_probe_declares_its_protocol():
    spec = get_probe("target_overlap")
    assert (spec.protocol, spec.headline, spec.feature_mode, spec.fit, spec.level) == (
        "knn-target-overlap/v1", "overlap", "dense", "squash", "mid")
    assert spec.higher_is_better({"overlap": 1.0, "overlap_chance": 1.0, "knn_r2": 0.5}) == {
        "overlap": False, "overlap_chance": False, "knn_r2": True}
    assert dict(spec.statistics) == {"knn_r2": "r_squared"} and spec.train_split_param is None


def _scenes(root, counts: np.ndarray, directions: np.ndarray, splits: list[str]) -> Manifest:
    """A manifest of scenes with only the two files the targets come from: instance.png (objects 1..count, each
    with a visible pixel) and annotations.json (a camera whose axes are the world's, so the light is as given)."""
    items, targets = [], {}
    for index, (count, direction, split) in enumerate(zip(counts, directions, splits, strict=True)):
        path = f"{split}/{index:04d}"
        folder = root / path
        folder.mkdir(parents=True)
        instance = np.zeros((8, 8), np.uint8)
        instance.flat[: int(count)] = np.arange(1, int(count) + 1)
        Image.fromarray(instance, mode="L").save(folder / "instance.png")
        annotations = {"camera": {"right": [1, 0, 0], "down": [0, 1, 0], "forward": [0, 0, 1]},
                       "light": {"direction": direction.tolist(), "ambient": 0.2}}
        (folder / "annotations.json").write_text(json.dumps(annotations))
        items.append(Item(path, f"{index:064d}", split))
        targets[path] = {"instance": {"path": f"{path}/instance.png", "sha256": "0" * 64},
                         "annotations": {"path": f"{path}/annotations.json", "sha256": "0" * 64}}
    return Manifest("tiny_scenes", str(root), items, [], {"source": "test"}, {"targets": targets})


@pytest.mark.parametrize("target", ["count", "illuminant"])
def test_end_to_end_on_scenes_the_features_that_carry_the_target_win(tmp_path, target):
    rng = np.random.default_rng(5)
    n = 90
    counts = rng.integers(1, 6, n)
    directions = rng.normal(size=(n, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    splits = ["train"] * 60 + ["val"] * 30
    truth = counts[:, None].astype(np.float64) if target == "count" else directions
    manifest = _scenes(tmp_path, counts, directions, splits)
    maps = {}
    for informative in (True, False):
        # (C, 4, 4) maps whose mean over cells is [the target + noise, noise, …]: pooling recovers the target
        for index, item in enumerate(manifest.items):
            dense = rng.normal(size=(5, 4, 4))
            if informative:
                dense[: truth.shape[1]] += (truth[index] + 0.05 * rng.normal(size=truth.shape[1]))[:, None, None] * 3
            maps[informative, item.path] = dense.astype(np.float32)
    params = validate_probe_params("target_overlap", {**PARAMS, "k": 5, "target": target})
    results = {}
    with paths.workspace(tmp_path):
        for informative in (True, False):
            inputs = ProbeInputs(manifest, lambda item, i=informative: maps[i, item.path], params, seed=0)
            result = TARGET_OVERLAP.run(inputs)
            check_result(TARGET_OVERLAP, result)  # columns' means and the resampled R² are the metrics
            results[informative] = result
    carried, blind = results[True], results[False]
    assert carried.sample_ids == [item.path for item in manifest.split("val")] and carried.unit == "image"
    assert set(carried.samples) == {"overlap", "overlap_chance"}
    # the chance column depends on the targets alone, so the two feature sets share it exactly
    np.testing.assert_array_equal(carried.samples["overlap_chance"], blind.samples["overlap_chance"])
    assert carried.metrics["overlap"] < 0.5 * carried.metrics["overlap_chance"]
    assert carried.metrics["knn_r2"] > 0.5 > blind.metrics["knn_r2"]
    assert blind.metrics["overlap"] > 0.7 * blind.metrics["overlap_chance"]
    assert carried.metrics["knn_r2"] == float(resampled.evaluate("r_squared", {**carried.samples,
                                                                                 **carried.auxiliary})[0])


def test_the_site_keeps_it_out_of_the_cross_task_table_with_a_chance_row_and_a_resampled_r2(tmp_path):
    """Records as the probe stage writes them (metrics, columns, auxiliary columns, the R² statistic), beside a
    counting board: target overlap is a diagnostic (its own task page, no cross-task column), its board shows the
    random-neighbours row at the runs' recorded chance value, and R² gets an interval from the resampled sums."""
    from harness.leaderboard import rendered_pages
    from harness.runs.records import BackboneInfo, DatasetInfo, Environment, Record
    from harness.runs.samples import samples_file

    environment = Environment(harness_version="0.1.0", git_commit="0" * 40, git_dirty=False, python="3.11.9",
                              torch="2.4.1", timm="1.0.9", open_clip="2.26.1", numpy="2.1.1", device="cpu")
    rng = np.random.default_rng(6)
    y = rng.integers(1, 6, 80).astype(np.float64)
    ids = [f"val/{i:04d}" for i in range(20)]
    records = []
    for index, (name, noise) in enumerate([("net_a", 0.1), ("net_b", 1.0), ("net_c", 3.0), ("net_d", 30.0)]):
        x = np.concatenate([y[:, None] + noise * rng.normal(size=(80, 1)), rng.normal(size=(80, 3))], axis=1)
        scores, auxiliary = overlap_columns(x[:60], y[:60], x[60:], y[60:], k=5)
        text, info = samples_file(tmp_path / "results" / f"{name}.samples.csv", ids, scores, "image", auxiliary,
                                  {"knn_r2": "r_squared"})
        (tmp_path / "results").mkdir(exist_ok=True)
        (tmp_path / "results" / f"{name}.samples.csv").write_text(text)
        info = info.model_copy(update={"path": f"results/{name}.samples.csv"})
        metrics = {**column_means(scores), "knn_r2": _r2(auxiliary)}
        backbone = BackboneInfo(name=name, identity=f"{index:04x}", control=False,
                                weights={"kind": "pretrained", "source": "test"},
                                architecture={"family": "test", "model": name},
                                preprocess={"library": "pillow", "crop": 224})
        common = dict(backbone=backbone, backbone_name=name, level="mid", pooling_requested="default",
                      pooling_resolved=None, feature_mode="dense", layers=None, precision="fp32", image_size=224,
                      seed=0, status="ok", duration_s=1.0, environment=environment,
                      dataset=DatasetInfo(name="scenes", identity="5ce5", split="val", size=20))
        records.append(Record(
            run_id=f"scenes-target_overlap@{name}", task="target_overlap", protocol="knn-target-overlap/v1",
            protocol_params={**PARAMS, "k": 5}, metrics=metrics, headline_metric="overlap",
            higher_is_better=TARGET_OVERLAP.higher_is_better(metrics), tolerances=dict.fromkeys(metrics, 0.0),
            samples=info, **common))
        mae = {"mae": 0.5 + noise / 10}
        records.append(Record(
            run_id=f"scenes-counting@{name}", task="counting", protocol="visible-object-count/v1",
            protocol_params={"train_split": "train", "eval_split": "val"}, metrics=mae, headline_metric="mae",
            higher_is_better={"mae": False}, tolerances={"mae": 0.0}, **common))
    pages = rendered_pages(sorted(records, key=lambda r: r.run_id), tmp_path)
    overview = pages["index.md"].split("{ #cross-task }", 1)[1].split("\n## Levels", 1)[0]
    assert "tasks/counting.md#board-" in overview and "tasks/target_overlap.md#board-" not in overview
    page = pages["tasks/target_overlap.md"]
    chance = records[0].metrics["overlap_chance"]
    (row,) = [line for line in page.splitlines() if line.startswith("| chance |")]
    assert "chance: random neighbours" in row and f"| {chance:.4f} |" in row
    assert all(r.metrics["overlap_chance"] == chance for r in records if r.task == "target_overlap")
    (net_a,) = [line for line in page.splitlines() if line.startswith("| ") and "net_a" in line
                and "../backbones/" in line]
    assert re.search(rf"{records[0].metrics['knn_r2']:.4f} \[-?[0-9.]+, -?[0-9.]+\]", net_a)
