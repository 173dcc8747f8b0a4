"""Opt-in fine-tuning of the last N blocks (`finetune_classification`, `finetune-last-n/v1`): its own protocol and
board, the frozen prefix read from the feature cache, only the trained blocks recomputed, the schedule recorded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

import harness
from harness.api import load_probe
from harness.backbones.cifar_resnet import CifarResNet
from harness.core import paths
from harness.core.config import load_params
from harness.leaderboard.queries.comparability import comparability_key
from harness.probes import validate_probe_params
from harness.stages import calls as stages

CONTROL = "cifar_resnet20.random"
FINETUNE = {"finetune_blocks": 1, "layers": [-2], "train_split": "train", "eval_split": "val", "epochs": 4,
            "lr": 0.01, "block_lr": 0.001, "weight_decay": 0.0, "batch_size": 4, "schedule": "cosine"}


@pytest.fixture
def finetune_project(image_project):
    data = yaml.safe_load(Path("params.yaml").read_text())
    data["probes"]["finetune_classification"] = FINETUNE
    data["grids"]["g"]["tasks"]["finetune_classification"] = "tiny"
    Path("params.yaml").write_text(yaml.safe_dump(data))
    params = load_params()
    stages.prepare("tiny", params)
    stages.extract("g", CONTROL, "tiny", params)
    return params


def test_a_finetuned_run_lands_on_its_own_board(finetune_project, monkeypatch):
    params = finetune_project
    [frozen] = stages.probe("g", "classification", CONTROL, params)

    def no_prefix(*args, **kwargs):
        raise AssertionError("the frozen prefix was recomputed")

    monkeypatch.setattr(CifarResNet, "stages", no_prefix)  # the stem and the first stages never run again
    [tuned] = stages.probe("g", "finetune_classification", CONTROL, params)
    assert tuned.status == "ok" and tuned.protocol == "finetune-last-n/v1"
    assert tuned.protocol_params["finetune_blocks"] == 1 and tuned.protocol_params["schedule"] == "cosine"
    assert tuned.protocol_params["block_lr"] == 0.001 and tuned.layers == [-2] and tuned.feature_mode == "dense"
    assert {"top1", "top5", "macro_f1", "train_top1"} == set(tuned.metrics)
    assert comparability_key(tuned) != comparability_key(frozen)  # never one board, never averaged
    records = stages.collect(params)
    stages.site()
    assert {r.task for r in records} >= {"classification", "finetune_classification"}
    board = Path("docs/tasks/finetune_classification.md").read_text()
    assert "finetune-last-n/v1" in board and "linear-probe-adamw" not in board
    [again] = stages.probe("g", "finetune_classification", CONTROL, params)
    assert again.metrics == tuned.metrics  # seeded, one thread: a re-run reproduces it


def test_the_cache_holds_the_prefix_and_the_head_holds_the_trained_blocks(finetune_project):
    from harness.backbones import create_backbone
    from harness.runs.feature_cache import read_extraction

    [tuned] = stages.probe("g", "finetune_classification", CONTROL, finetune_project)
    extraction = read_extraction(paths.features_dir("g", CONTROL, "tiny"))
    dense = [r for r in extraction["requests"] if r["mode"] == "dense"]
    assert [r["layers_resolved"] for r in dense] == [[1]]  # the output of stage 2: what the last stage reads
    head = load_probe(paths.head_path("g", "finetune_classification", CONTROL), backbone="cifar_resnet20@random")
    assert head.head.config["blocks"] == 1
    original = create_backbone("cifar_resnet20@random").model.layer3.state_dict()
    trained = {k.removeprefix("suffix.stages.0."): v for k, v in head.head.tensors.items()
               if k.startswith("suffix.")}
    assert trained.keys() == original.keys()
    assert any(not np.array_equal(trained[k], original[k].numpy()) for k in original)  # the blocks did train
    again = head.evaluate("tiny")
    assert again.metrics == {k: v for k, v in tuned.metrics.items() if k != "train_top1"}


def test_the_prefix_layer_must_match_the_blocks_trained():
    with pytest.raises(ValueError, match=r"layers must be \[-3\]"):
        validate_probe_params("finetune_classification", {**FINETUNE, "finetune_blocks": 2})
    with pytest.raises(ValueError, match="schedule"):
        validate_probe_params("finetune_classification", {**FINETUNE, "schedule": "linear"})


def test_fine_tuning_from_python_and_a_backbone_that_cannot_be_cut(image_project):
    result = harness.run("cifar_resnet20@random", "finetune_classification", "tiny", **FINETUNE)
    assert result.record.protocol == "finetune-last-n/v1" and result.head_path.is_file()
    with pytest.raises(harness.api.RunFailed, match="cannot be fine-tuned block by block"):
        harness.run("efficientnet_lite0@random", "finetune_classification", "tiny", **FINETUNE)
    # a diverged model is a failed run, not chance-level metrics from NaN logits
    with pytest.raises(harness.api.RunFailed, match=r"fine-tuned model diverged .* lower probes"):
        harness.run("cifar_resnet20@random", "finetune_classification", "tiny", **{**FINETUNE, "lr": 1e37})
