"""The anomaly probes (`knn-patch-anomaly/v1`, `gaussian-patch-anomaly/v1`): each piece against an independent
reference (the upsampling against torch, the nearest distance against scipy's cdist, Ledoit–Wolf against
scikit-learn, Mahalanobis against scipy), every image score against a map recomputed from those references, the
run's metrics against scikit-learn on its own columns, and the probes end to end: through `harness.run` on a
generated dataset (one extraction for both, a valid record and samples file), on a user's folder with and without
masks, and as k-shot runs of the few-shot stage."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image
from scipy import ndimage
from scipy.spatial.distance import cdist, mahalanobis
from sklearn.covariance import ledoit_wolf as sklearn_ledoit_wolf
from sklearn.metrics import average_precision_score, roc_auc_score

import harness
from harness.core import paths
from harness.core.config import ConfigError, load_params
from harness.datasets.dense_targets import save_npy
from harness.datasets.manifest import Item, Manifest
from harness.probes import get_probe, resampled
from harness.probes.anomaly import maps
from harness.probes.anomaly.detector import AnomalyParams
from harness.probes.anomaly.gaussian import mahalanobis_distance
from harness.probes.anomaly.knn import nearest_distance
from harness.probes.base import ProbeInputs, validate_probe_params
from harness.probes.statistics.anomaly import ANOMALOUS, DEFECT_TYPE, SCORE
from harness.runs.fewshot import Shot, fewshot_manifest
from harness.runs.own_data import folder_spec
from harness.runs.probe_run import check_result
from harness.runs.samples import read_samples
from harness.stages import calls as stages

CONTROL = "cifar_resnet20@random"  # random-init, 32-px inputs: a fast, offline backbone
TASKS = ("anomaly_knn", "anomaly_gaussian")
TINY = {"kind": "procedural_defects", "texture": "tiles", "size": 48, "train_good": 6, "test_good": 4,
        "test_per_type": 2, "seed": 0}


@pytest.mark.parametrize(("h", "w", "size"), [(7, 7, 112), (3, 5, 16), (14, 14, 56), (4, 4, 4)])
def test_upsampling_is_torchs_bilinear(h, w, size):
    cells = np.random.default_rng(h).normal(size=(h, w))
    want = torch.nn.functional.interpolate(torch.from_numpy(cells)[None, None], size=(size, size), mode="bilinear",
                                           align_corners=False)[0, 0].numpy()
    np.testing.assert_allclose(maps.upsample(cells, size), want, rtol=0, atol=1e-12)


def test_nearest_distance_is_the_brute_force_minimum():
    rng = np.random.default_rng(0)
    bank, cells = rng.normal(size=(300, 12)), rng.normal(size=(40, 12))
    np.testing.assert_allclose(nearest_distance(bank)(cells), cdist(cells, bank).min(axis=1), rtol=0, atol=1e-9)
    np.testing.assert_allclose(nearest_distance(bank)(bank[:5]), 0.0, atol=1e-6)  # a cell of the bank


@pytest.mark.parametrize(("n", "c"), [(200, 10), (30, 60)])  # more samples than channels, and fewer
def test_mahalanobis_to_the_ledoit_wolf_gaussian_matches_scipy(n, c):
    rng = np.random.default_rng(n)
    samples = rng.normal(size=(n, c)) @ rng.normal(size=(c, c)) + 3.0
    want_covariance, _ = sklearn_ledoit_wolf(samples)
    cells = rng.normal(size=(7, c)) + 3.0
    inverse = np.linalg.inv(want_covariance)
    want = [mahalanobis(cell, samples.mean(axis=0), inverse) for cell in cells]
    np.testing.assert_allclose(mahalanobis_distance(samples)(cells), want, rtol=1e-8)


def _manifest(tmp_path, rng, n_train=8, n_good=5, per_type=3, masks=True):
    """Items with 6×6 feature maps: good cells are noise, a defect lifts channel 0 of the cells its square covers;
    masks (24 px) mark the square. Returns (manifest, features by path)."""
    classes = ["good", "dent", "spot"]
    items, features, targets = [], {}, {}
    with paths.workspace(tmp_path):
        prepared = paths.dataset_dir("toy")
        rows = [("train", 0)] * n_train + [("test", 0)] * n_good + [("test", 1)] * per_type + [("test", 2)] * per_type
        for index, (split, label) in enumerate(rows):
            path = f"{split}/{classes[label]}/{index:03d}.png"
            dense = rng.normal(size=(5, 6, 6))
            if label:
                r, c = rng.integers(0, 5, size=2)
                dense[0, r:r + 2, c:c + 2] += 2.0 + label
                mask = np.zeros((24, 24), np.uint8)
                mask[4 * r:4 * r + 8, 4 * c:4 * c + 8] = 1
                if masks:
                    targets[path] = {"mask": save_npy(prepared, f"masks/{index}.npy", mask)}
            items.append(Item(path, f"{index:064d}", split, label))
            features[path] = dense.astype(np.float32)
    return Manifest("toy", str(prepared), items, classes, {}, {"targets": targets}), features


PARAMS = {"train_split": "train", "eval_split": "test", "target_size": 24, "smooth_sigma": 1.5}


def _reference_maps(manifest, features, task):
    """Each test image's map, from the references: standardise with the training cells, cdist / sklearn + scipy,
    torch's bilinear, scipy's Gaussian."""
    def rows(item):
        return features[item.path].astype(np.float64).reshape(5, -1).T

    bank = np.concatenate([rows(item) for item in manifest.split("train")])
    mean, std = bank.mean(axis=0), bank.std(axis=0) + 1e-6  # the floor does not bind on these features
    bank = (bank - mean) / std
    if task == "anomaly_gaussian":
        covariance, _ = sklearn_ledoit_wolf(bank)
        inverse = np.linalg.inv(covariance)
        centre = bank.mean(axis=0)
    out = []
    for item in manifest.split("test"):
        cells = (rows(item) - mean) / std
        if task == "anomaly_knn":
            scores = cdist(cells, bank).min(axis=1)
        else:
            scores = np.array([mahalanobis(cell, centre, inverse) for cell in cells])
        up = torch.nn.functional.interpolate(torch.from_numpy(scores.reshape(1, 1, 6, 6)), size=(24, 24),
                                             mode="bilinear", align_corners=False)[0, 0].numpy()
        out.append(ndimage.gaussian_filter(up, 1.5, mode="reflect", truncate=4.0))
    return np.stack(out)


@pytest.mark.parametrize("task", TASKS)
def test_the_run_scores_images_by_their_maps_maximum_and_its_metrics_are_the_references(tmp_path, monkeypatch,
                                                                                        task):
    manifest, features = _manifest(tmp_path, np.random.default_rng(1))
    monkeypatch.chdir(tmp_path)
    spec = get_probe(task)
    with paths.workspace(tmp_path):
        result = spec.run(ProbeInputs(manifest, lambda item: features[item.path], dict(PARAMS), seed=0))
    check_result(spec, result)  # what a stage checks: the statistics reproduce the metrics
    test = manifest.split("test")
    assert result.sample_ids == [item.path for item in test] and result.unit == "image" and result.samples == {}
    reference = _reference_maps(manifest, features, task)
    np.testing.assert_allclose(result.auxiliary[SCORE], reference.reshape(len(test), -1).max(axis=1), rtol=1e-7)
    labels = np.array([item.label for item in test])
    assert result.auxiliary[DEFECT_TYPE].tolist() == labels.tolist()
    assert result.auxiliary[ANOMALOUS].tolist() == (labels > 0).tolist()
    scores, defective = result.auxiliary[SCORE], labels > 0
    assert result.metrics["auroc"] == pytest.approx(roc_auc_score(defective, scores), abs=1e-12)
    assert result.metrics["aupr"] == pytest.approx(average_precision_score(defective, scores), abs=1e-12)
    for label, kind in ((1, "dent"), (2, "spot")):
        keep = labels != 3 - label
        assert result.metrics[f"auroc_{kind}"] == pytest.approx(roc_auc_score(labels[keep] == label, scores[keep]))
    masks = np.stack([np.zeros((24, 24), bool) if item.label == 0 else
                      np.load(Path(manifest.root) / manifest.extra["targets"][item.path]["mask"]["path"]) > 0
                      for item in test])
    assert result.metrics["pixel_auroc"] == pytest.approx(roc_auc_score(masks.ravel(), reference.ravel()), abs=1e-6)
    assert 0.0 <= result.metrics["aupro"] <= 1.0
    assert set(result.metrics) == {"auroc", "aupr", "f1_max", "fpr95", "auroc_dent", "auroc_spot", "pixel_auroc",
                                   "aupro"}


def test_without_masks_the_pixel_metrics_are_absent(tmp_path, monkeypatch):
    manifest, features = _manifest(tmp_path, np.random.default_rng(2), masks=False)
    monkeypatch.chdir(tmp_path)
    result = get_probe("anomaly_knn").run(ProbeInputs(manifest, lambda item: features[item.path], dict(PARAMS), 0))
    assert "pixel_auroc" not in result.metrics and "aupro" not in result.metrics and "auroc" in result.metrics


def test_the_splits_must_hold_what_a_detector_needs(tmp_path, monkeypatch):
    manifest, features = _manifest(tmp_path, np.random.default_rng(3))
    monkeypatch.chdir(tmp_path)
    spec = get_probe("anomaly_gaussian")
    with pytest.raises(ValueError, match="defect-free images only"):
        spec.run(ProbeInputs(manifest, lambda item: features[item.path], {**PARAMS, "train_split": "test"}, 0))
    only_good = Manifest("toy", manifest.root, [i for i in manifest.items if i.label == 0], manifest.classes, {},
                         manifest.extra)
    with pytest.raises(ValueError, match="needs good and defective images"):
        spec.run(ProbeInputs(only_good, lambda item: features[item.path], dict(PARAMS), 0))


def test_the_probes_declare_one_protocol_each_and_share_their_read_of_the_features():
    knn, gaussian = (get_probe(task) for task in TASKS)
    assert (knn.protocol, gaussian.protocol) == ("knn-patch-anomaly/v1", "gaussian-patch-anomaly/v1")
    for spec in (knn, gaussian):
        assert (spec.headline, spec.feature_mode, spec.fit, spec.fewshot_unit) == ("auroc", "dense", "squash", "images")
        assert spec.higher_is_better({"auroc": 1, "fpr95": 0}) == {"auroc": True, "fpr95": False}
        assert spec.statistics == {"auroc": "anomaly_auroc", "aupr": "anomaly_aupr", "f1_max": "anomaly_f1_max",
                                   "fpr95": "anomaly_fpr95"}
        assert (spec.train_split_param, spec.eval_split_param, spec.folder_layout) == (
            "train_split", "eval_split", "anomaly_folder")
    assert knn.params is gaussian.params is AnomalyParams
    with pytest.raises(ValueError, match="target_size"):
        validate_probe_params("anomaly_knn", {"target_size": 0})


def test_both_probes_run_through_the_api_on_one_extraction(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no params.yaml: the probes' defaults
    results = {task: harness.run(CONTROL, task, {**TINY, "name": "tiny_defects"}) for task in TASKS}
    assert [p.name for p in (tmp_path / "user" / "features").iterdir()] == ["tiny_defects"]
    for task, result in results.items():
        record = result.record
        assert record.status == "ok" and record.protocol == get_probe(task).protocol
        assert record.samples.unit == "image" and record.samples.count == 4 + 4 * 2
        assert record.samples.columns == [] and record.samples.auxiliary == sorted([ANOMALOUS, DEFECT_TYPE, SCORE])
        _, columns = read_samples(record.samples, tmp_path)
        for metric, statistic in record.samples.statistics.items():  # what the site recomputes from the file
            assert resampled.evaluate(statistic, columns)[0] == record.metrics[metric]
        assert {"pixel_auroc", "aupro", "auroc_scratch"} <= set(record.metrics)


def test_a_users_folder_with_and_without_masks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from harness.datasets.defects import prepare_procedural_defects

    prepare_procedural_defects("g", tmp_path / "generated", "grain", seed=1, size=48, train_good=4, test_good=3,
                               test_per_type=2, defect_types=["blob", "missing"])
    folder = tmp_path / "my_parts"
    for part in ("train", "test", "ground_truth"):
        shutil.copytree(tmp_path / "generated" / part, folder / part)
    with_masks = harness.run(CONTROL, "anomaly_knn", folder)
    assert with_masks.record.dataset.name == "my_parts" and "aupro" in with_masks.metrics
    shutil.rmtree(folder / "ground_truth")
    without = harness.run(CONTROL, "anomaly_knn", folder, limit=2)
    assert without.record.status == "ok" and "aupro" not in without.metrics
    assert "ground_truth" in without.record.dataset.params["pixel_metrics"]
    assert without.record.dataset.size == 2 + 2 + 2  # limit=2 per folder: good, blob, missing


def test_data_dir_is_an_anomaly_folder_and_a_bad_one_is_refused_before_a_backbone_loads(tmp_path):
    root = tmp_path / "parts"
    for folder in ("train/good", "test/good", "test/crack"):
        (root / folder).mkdir(parents=True)
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(root / folder / "0.png")
    for task in TASKS:
        assert folder_spec(root, task) == {"kind": "anomaly_folder", "root": str(root)}
    with pytest.raises(ConfigError, match="stems= is for dense and detection data"):
        folder_spec(root, "anomaly_knn", stems=tmp_path)
    (root / "train" / "crack").mkdir()
    with pytest.raises(ConfigError, match=r"train/ holds only good/.*move crack out of it"):
        folder_spec(root, "anomaly_knn")


def test_a_k_shot_run_trains_on_k_good_images_and_evaluates_on_the_whole_test_split(tmp_path, monkeypatch):
    manifest, features = _manifest(tmp_path, np.random.default_rng(4))
    monkeypatch.chdir(tmp_path)
    spec = get_probe("anomaly_knn")

    def run(m):
        return spec.run(ProbeInputs(m, lambda item: features[item.path], dict(PARAMS), 0))

    sub, described = fewshot_manifest(manifest, "train", "images", Shot(2, seed=3))
    assert described["subset_size"] == 2 and len(sub.split("train")) == 2
    few = run(sub)
    assert few.sample_ids == [item.path for item in manifest.split("test")]
    everything, _ = fewshot_manifest(manifest, "train", "images", Shot(8, seed=3))
    assert run(everything).metrics == run(manifest).metrics
    assert few.auxiliary[SCORE].tolist() != run(manifest).auxiliary[SCORE].tolist()  # a smaller bank: other scores


def test_the_few_shot_stage_writes_a_record_per_k_and_seed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = {
        "settings": {"precision": "fp32", "batch_size": 8, "seed": 0},
        "datasets": {"tiny": TINY},
        "probes": {task: {"layers": None, "train_split": "train", "eval_split": "test", "target_size": 24,
                          "smooth_sigma": 1.0} for task in TASKS},
        "grids": {"g": {"backbones": ["cifar_resnet20.random"], "tasks": dict.fromkeys(TASKS, "tiny"),
                        "fewshot": {"k_shots": [1, 6], "seeds": [0, 1]}}},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(config))
    params = load_params()
    stages.prepare("tiny", params)
    stages.extract("g", "cifar_resnet20.random", "tiny", params)
    for task in TASKS:
        records = stages.probe("g", task, "cifar_resnet20.random", params)
        assert [(r.k_shot, r.seed) for r in records] == [(1, 0), (1, 1), (6, 0), (6, 1)]
        assert all(r.status == "ok" and r.samples.count == 12 for r in records)
        assert [r.protocol_params["subset_size"] for r in records] == [1, 1, 6, 6]
        assert records[0].protocol_params["k_shot_unit"] == "images"
        assert records[2].metrics == records[3].metrics  # k = 6 is the whole training split, whatever the seed


def test_help_says_what_the_anomaly_probes_declare(capsys, monkeypatch):
    from harness.cli import main as cli
    from harness.runs.own_data import LAYOUTS

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    for task in TASKS:
        assert cli.main(["help", task]) == 0
        out = capsys.readouterr().out
        assert f"protocol {get_probe(task).protocol}" in out and "headline: auroc (higher is better)" in out
        assert "few-shot: k counts images" in out and "aupr, auroc, f1_max, fpr95" in out
        assert LAYOUTS["anomaly_folder"] in out
