"""The Python API: `harness.run` gives the DVC stage's numbers bit for bit, on a folder of your own, a pair of
datasets (train on one, evaluate on another), and `probe.evaluate` on arrays."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import write_image_folder

import harness
from harness.api import RunFailed
from harness.core import paths
from harness.core.config import ConfigError, load_params
from harness.probes import get_probe
from harness.runs.samples import read_samples
from harness.stages import calls as stages

CONTROL = "cifar_resnet20@random"  # random-init, 32-px inputs: a fast, offline backbone


@pytest.fixture
def project(image_project):
    return image_project


def test_the_api_gives_the_stage_numbers_bit_for_bit(project):
    params = load_params()
    stages.prepare("tiny", params)
    stages.extract("g", "cifar_resnet20.random", "tiny", params)
    for task in ("classification", "retrieval"):
        [staged] = stages.probe("g", task, "cifar_resnet20.random", params)
        result = harness.run(CONTROL, task, "tiny")
        assert result.record.status == "ok"
        assert result.metrics == staged.metrics  # exact float equality, every metric
        staged_ids, staged_columns = read_samples(staged.samples)
        assert result.sample_ids == staged_ids
        assert result.samples.keys() == staged_columns.keys()
        for name, column in staged_columns.items():
            assert np.array_equal(result.samples[name], column)
        assert result.record.protocol_params == staged.protocol_params
        assert result.record.dataset.identity == staged.dataset.identity
        assert result.record.backbone.identity == staged.backbone.identity
        assert result.record_path.is_relative_to(Path("user"))  # the workspace, never results/
    assert not Path("leaderboard").exists()


def test_probe_parameters_override_the_params_yaml_block(project):
    result = harness.run(CONTROL, "classification", "tiny", epochs=3, lr=0.05)
    assert result.record.protocol_params["epochs"] == 3 and result.record.protocol_params["lr"] == 0.05
    with pytest.raises(ConfigError, match=r"unknown key 'epoch'.*valid keys"):
        harness.run(CONTROL, "classification", "tiny", epoch=3)


def test_a_folder_of_class_folders_is_split_in_halves(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = write_image_folder(tmp_path / "flowers", per_split=6, splits=(None,), classes=3)
    result = harness.run(CONTROL, "classification", folder, epochs=2, train_split="train", eval_split="val",
                         lr=0.01, weight_decay=0.0, batch_size=8, limit=2)  # no params.yaml here: all given
    assert result.record.dataset.name == "flowers_limit2"  # the subset is in the name: its own run id
    # halves: 3 train and 3 val images per class, of which limit=2 are kept per class in each split
    assert result.record.dataset.size == 3 * 2
    assert result.record.dataset.params["split_fractions"] == {"train": 0.5, "val": 0.5}
    assert len(result.samples["top1"]) == 6


def test_train_on_one_dataset_and_evaluate_on_another(project, tmp_path):
    other = write_image_folder(tmp_path / "other", per_split=3, splits=("val",))
    result = harness.run(CONTROL, "classification", other, train_dataset="tiny", epochs=5)
    record = result.record
    assert record.dataset.name == "other_from_tiny"
    assert record.dataset.split == "eval" and record.dataset.size == 6
    assert record.dataset.params["train"]["split"] == "train" and record.dataset.params["eval"]["split"] == "val"
    assert record.protocol_params["train_split"] == "train" and record.protocol_params["eval_split"] == "eval"
    assert all(sample.startswith("other/val/") for sample in result.sample_ids)


def test_a_failed_run_raises_with_its_record(project):
    with pytest.raises(RunFailed, match="resnet18") as caught:  # no pretrained resnet18 weights offline
        harness.run("resnet18", "classification", "tiny")
    assert caught.value.record is None or caught.value.record.status == "failed"


def test_probe_evaluate_on_arrays_equals_the_run_on_the_same_features(project):
    result = harness.run(CONTROL, "classification", "tiny")
    manifest_items = {}
    from harness.datasets.manifest import Manifest
    from harness.runs.feature_cache import FeatureCache, entry_keys, read_extraction

    with paths.workspace(Path("user")):
        manifest = Manifest.load(paths.manifest_path("tiny"))
        feature_dir = paths.features_dir("tiny", "cifar_resnet20.random", "tiny")
        extraction = read_extraction(feature_dir)
    cache = FeatureCache(feature_dir / "entries")
    request = extraction["requests"][0]
    for split in ("train", "val"):
        items = manifest.split(split)
        manifest_items[split] = (np.stack([cache.get(entry_keys(extraction["backbone"], [request], i)[0])
                                           for i in items]), np.array([i.label for i in items]))
    features = {split: x for split, (x, _) in manifest_items.items()}
    targets = {split: y for split, (_, y) in manifest_items.items()}
    probe = get_probe("classification")
    evaluated = probe.evaluate(features, targets, **load_params().probes["classification"])
    assert evaluated.metrics == result.metrics
    assert np.array_equal(evaluated.samples["top1"], result.samples["top1"])


def test_probe_evaluate_on_arrays_for_similarity_and_a_dense_task(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no params.yaml: every parameter is given
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(5, 8))
    near, far = reference + 0.01 * rng.normal(size=(5, 8)), rng.normal(size=(5, 8))
    triplets = np.stack([reference, near, far], axis=1)  # left is always the near one
    similarity = get_probe("similarity").evaluate({"test": triplets}, {"test": np.ones(5)}, eval_split="test",
                                                  min_votes=6)
    assert similarity.metrics["accuracy"] == 1.0 and similarity.unit == "triplet"
    features = {s: rng.normal(size=(4, 6, 4, 4)).astype(np.float32) for s in ("train", "val")}
    depth = {s: rng.uniform(1.0, 5.0, size=(4, 16, 16)).astype(np.float32) for s in ("train", "val")}
    result = get_probe("depth").evaluate(features, depth, head="linear", train_split="train", eval_split="val",
                                         target_size=8, epochs=2, lr=0.01, weight_decay=0.0, batch_size=2)
    assert {"delta1", "abs_rel", "rmse", "train_loss"} <= set(result.metrics)
    assert result.sample_ids == [f"val/{i:06d}" for i in range(4)]
    with pytest.raises(ValueError, match="run it on a dataset"):
        get_probe("correspondence").evaluate({}, {})


def test_variations_keep_their_own_records_and_share_the_features(project):
    default = harness.run(CONTROL, "classification", "tiny")
    variant = harness.run(CONTROL, "classification", "tiny", epochs=3)
    assert default.record.run_id == "tiny-classification@cifar_resnet20.random"
    assert variant.record.run_id.startswith("tiny_p") and variant.record_path != default.record_path
    assert default.record_path.is_file() and default.head_path.read_bytes() != variant.head_path.read_bytes()
    assert [p.name for p in Path("user/features").iterdir()] == ["tiny"]  # one feature folder per dataset


def test_an_explicit_device_beats_a_handed_on_one_and_settings_beat_an_inherited_one(project, monkeypatch):
    """`harness.run(device="cpu")` computes on the CPU although an outer entry point handed on device=cuda (as the
    CLI's `device=` reaches the stages DVC starts), and the environment is as it was afterwards. Without the
    argument the handed-on cuda decides (on a machine without a GPU that run is refused); the same variable merely
    inherited from a shell does not beat settings.device (tests/test_device_precedence.py: the rule itself)."""
    from harness.core.devices import DEVICE_ENV, EXPLICIT_DEVICE_ENV

    monkeypatch.setenv(DEVICE_ENV, "cuda")
    monkeypatch.setenv(EXPLICIT_DEVICE_ENV, "1")
    result = harness.run(CONTROL, "classification", "tiny", device="cpu")
    assert result.record.status == "ok" and result.record.environment.device.startswith("cpu:")
    assert result.record.environment.features_device is None
    assert (os.environ[DEVICE_ENV], os.environ[EXPLICIT_DEVICE_ENV]) == ("cuda", "1")
    if not torch.cuda.is_available():
        with pytest.raises((RunFailed, ConfigError)):
            harness.run(CONTROL, "retrieval", "tiny")
        monkeypatch.delenv(EXPLICIT_DEVICE_ENV)  # VISBENCH_DEVICE=cuda as a shell exports it: settings (auto) win
        assert harness.run(CONTROL, "retrieval", "tiny").record.environment.device.startswith("cpu:")
