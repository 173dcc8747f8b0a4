"""A run's identity as values (harness.core.run_key): a backbone reference prints both spellings of a control, and a
run key prints the stage name, run id, files and DVC address the pipeline has always used."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core import paths
from harness.core.run_key import BackboneRef, RunKey, Shot

CONTROL = BackboneRef("net", control=True)


@pytest.mark.parametrize("spelling", ["net@random", "net.random"])
def test_both_spellings_of_a_control_are_one_reference(spelling):
    assert BackboneRef.parse(spelling) == CONTROL
    assert (CONTROL.name, CONTROL.spelled) == ("net@random", "net.random")


def test_a_pretrained_name_is_spelled_as_it_stands():
    ref = BackboneRef.parse("timm--convnext_tiny.fb_in1k")
    assert ref == BackboneRef("timm--convnext_tiny.fb_in1k") and not ref.control
    assert ref.name == ref.spelled == "timm--convnext_tiny.fb_in1k"


def test_a_control_takes_no_checkpoint():
    checkpoints = {"net": "weights/net.pt"}
    assert CONTROL.checkpoint(checkpoints) is None
    assert BackboneRef.parse("net").checkpoint(checkpoints) == "weights/net.pt"
    assert BackboneRef.parse("other").checkpoint(checkpoints) is None


def test_a_stage_key_prints_the_pipelines_names_and_files():
    key = RunKey("g", "t", CONTROL)
    assert key.stage == key.run_id == "g-t@net.random"
    assert key.record_path.as_posix() == "results/g/t/net.random.json"
    assert key.samples_path.as_posix() == "results/g/t/net.random.samples.csv"
    assert key.head_path.as_posix() == "results/g/t/net.random.head.safetensors"
    assert key.metrics_path.as_posix() == "results/g/t/net.random.metrics.json"
    assert key.fewshot_dir.as_posix() == "results/g/t/net.random"
    assert key.address == "pipelines/g/net.random/dvc.yaml:g-t@net.random"


def test_a_fewshot_key_names_k_and_seed():
    key = RunKey("g", "t", CONTROL, Shot(5, 1))
    assert key.stage == "g-t@net.random" and key.run_id == "g-t@net.random.k5.s1"
    assert key.record_path.as_posix() == "results/g/t/net.random/k5-s1.json"
    assert key.samples_path.as_posix() == "results/g/t/net.random/k5-s1.samples.csv"
    assert key.head_path.as_posix() == "results/g/t/net.random/k5-s1.head.safetensors"
    # one metrics file and DVC stage per stage, whatever the shot
    assert key.metrics_path.as_posix() == "results/g/t/net.random.metrics.json"
    assert key.address == "pipelines/g/net.random/dvc.yaml:g-t@net.random"
    assert key.at(None) == RunKey("g", "t", CONTROL) and RunKey("g", "t", CONTROL).at(Shot(5, 1)) == key


@pytest.mark.parametrize("key", [
    RunKey("g", "t", CONTROL), RunKey("g", "t", CONTROL, Shot(5, 1)), RunKey("default", "depth", BackboneRef("sobel")),
    RunKey("fewshot", "classification", BackboneRef("timm--vit_small.augreg_in21k"), Shot(16, 0)),
])
def test_a_run_id_reads_back_as_its_key(key):
    k_shot, seed = (None, 0) if key.shot is None else key.shot
    assert RunKey.from_run_id(key.run_id, k_shot, seed) == key
    assert RunKey.from_stage(key.stage) == key.at(None)


@pytest.mark.parametrize("text", ["no_task_here", "g-t", "g-t@net@random"])
def test_text_that_names_no_stage_is_refused(text):
    with pytest.raises(ValueError):
        RunKey.from_stage(text)


def test_a_keys_files_move_with_the_workspace(tmp_path):
    key = RunKey("g", "t", CONTROL, Shot(5, 1))
    with paths.workspace(tmp_path):
        assert key.record_path == tmp_path / "results/g/t/net.random/k5-s1.json"
    with paths.scratch_outputs(tmp_path):
        assert key.metrics_path == tmp_path / "results/g/t/net.random.metrics.json"
    assert key.record_path == Path("results/g/t/net.random/k5-s1.json")
