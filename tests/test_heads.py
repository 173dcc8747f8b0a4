"""Probe heads as artifacts: saved beside each trained record, reloaded only onto the features they fit (a
mismatch is refused field by field), evaluated on new data with the record naming the head's SHA-256."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import image_project_params, write_image_folder

import harness
from harness.api import RunFailed, load_probe
from harness.core import paths
from harness.core.config import load_params
from harness.core.hashing import sha256_file
from harness.heads.file import HeadMismatchError, read_head
from harness.leaderboard.queries.comparability import comparability_key
from harness.probes import ProbeInputs, get_probe
from harness.runs.samples import read_samples
from harness.stages import calls as stages

CONTROL = "cifar_resnet20.random"


def _trained(params, task="classification"):
    stages.prepare("tiny", params)
    stages.extract("g", CONTROL, "tiny", params)
    [record] = stages.probe("g", task, CONTROL, params)
    return record, paths.head_path("g", task, CONTROL)


def test_a_trained_run_saves_its_head_beside_its_record_with_its_identity(image_project):
    record, head_path = _trained(load_params())
    assert head_path == Path("results/g/classification/cifar_resnet20.random.head.safetensors")
    first = head_path.read_bytes()
    loaded = read_head(head_path)
    identity = loaded.identity
    assert identity["backbone_identity"] == record.backbone.identity and identity["run_id"] == record.run_id
    assert identity["pooling_resolved"] == "avg" and identity["feature_mode"] == "pooled"
    assert identity["layers_resolved"] == [2] and identity["protocol"] == record.protocol
    assert identity["protocol_params"] == record.protocol_params and identity["metrics"] == record.metrics
    assert identity["trained_on"] == {"dataset": "tiny", "identity": record.dataset.identity, "split": "train"}
    assert loaded.head.config == {"kind": "linear", "classes": ["class0", "class1"]}
    assert loaded.head.tensors["weight"].shape == (2, 64) and loaded.head.tensors["mean"].dtype == np.float32
    [again] = stages.probe("g", "classification", CONTROL, load_params())
    assert head_path.read_bytes() == first and again.metrics == record.metrics  # deterministic bytes
    [retrieval] = stages.probe("g", "retrieval", CONTROL, load_params())  # trains nothing: no head
    assert retrieval.status == "ok" and not paths.head_path("g", "retrieval", CONTROL).exists()


def test_load_probe_accepts_the_same_backbone_and_refuses_another_naming_the_field(image_project):
    _, head_path = _trained(load_params())
    assert load_probe(head_path, backbone="cifar_resnet20@random").comparable
    with pytest.raises(HeadMismatchError, match=r"backbone_identity: the head was fitted on cifar_resnet20@random "
                                                r"\(identity \w+\); asked for cifar_resnet32@random"):
        load_probe(head_path, backbone="cifar_resnet32@random")
    with pytest.raises(HeadMismatchError, match=r"layers_resolved: the head was fitted on \[2\]; asked for \[1\]"):
        load_probe(head_path, backbone="cifar_resnet20@random", layers=[1])
    with pytest.warns(UserWarning, match="backbone_identity"):
        loose = load_probe(head_path, backbone="cifar_resnet32@random", strict=False)
    assert not loose.comparable and loose.mismatches[0].startswith("backbone_identity")


def test_a_reloaded_head_reproduces_its_numbers_and_scores_new_data(image_project, tmp_path):
    record, head_path = _trained(load_params())
    loaded = load_probe(head_path, backbone="cifar_resnet20@random")
    same = loaded.evaluate("tiny")  # the data it was trained on: its own eval split, its own numbers
    assert same.metrics == {k: v for k, v in record.metrics.items() if k != "train_top1"}
    ids, columns = read_samples(record.samples)
    assert same.sample_ids == ids and all(np.array_equal(same.samples[c], columns[c]) for c in columns)
    head = same.record.protocol_params["head"]
    assert head["sha256"] == sha256_file(head_path) and head["run_id"] == record.run_id and head["comparable"]
    assert head["trained_on"]["identity"] == record.dataset.identity
    # new data: three more images per class, never seen in training
    other = write_image_folder(tmp_path / "other", per_split=3, splits=("val",))
    new = loaded.evaluate(other)
    assert new.record.status == "ok" and new.record.dataset.size == 6
    assert new.record.protocol_params["head"]["sha256"] == sha256_file(head_path)
    assert new.record_path.is_relative_to(Path("user")) and new.head_path is None
    # the same numbers as the head scored on arrays of those images' features
    again = load_probe(head_path).evaluate(other)
    assert again.metrics == new.metrics


def test_a_head_on_other_features_is_refused_when_evaluated(image_project, tmp_path):
    _, head_path = _trained(load_params())
    with pytest.raises(RunFailed, match="backbone_identity") as caught:
        harness.run("cifar_resnet32@random", "classification", "tiny", head_file=head_path)
    failed = caught.value.record
    assert failed.status == "failed" and failed.failure.phase == "check_head"
    assert failed.protocol_params["head"]["sha256"] == sha256_file(head_path)


def test_cls_and_mean_tokens_of_one_vit_are_different_features(tmp_path, monkeypatch):
    """The issue's case: a head fitted on CLS tokens, scored on mean-pooled tokens of the same backbone."""
    images = write_image_folder(tmp_path / "images", per_split=3)
    monkeypatch.chdir(tmp_path)
    params = image_project_params(images, ["dinov2_vits14.random"])
    params["probes"]["classification"]["pooling"] = "cls"
    Path("params.yaml").write_text(yaml.safe_dump(params))
    params = load_params()
    stages.prepare("tiny", params)
    stages.extract("g", "dinov2_vits14.random", "tiny", params)
    [record] = stages.probe("g", "classification", "dinov2_vits14.random", params)
    head_path = paths.head_path("g", "classification", "dinov2_vits14.random")
    with pytest.raises(HeadMismatchError, match=r"pooling_resolved: the head was fitted on 'cls'; asked for 'mean'"):
        load_probe(head_path, backbone="dinov2_vits14@random", pooling="mean")
    with pytest.warns(UserWarning, match="pooling_resolved"):
        loose = load_probe(head_path, backbone="dinov2_vits14@random", pooling="mean", strict=False)
    mean_scored = loose.evaluate("tiny", pooling="mean")
    marked = mean_scored.record.protocol_params["head"]
    assert marked["comparable"] is False and marked["mismatches"][0].startswith("pooling_resolved")
    cls_scored = load_probe(head_path).evaluate("tiny")
    assert cls_scored.metrics["top1"] == record.metrics["top1"]
    # not comparable: never on one board with the strict evaluation of the same head
    assert comparability_key(mean_scored.record) != comparability_key(cls_scored.record)


def test_evaluations_of_different_backbones_heads_share_a_board(image_project):
    """The head's file is provenance; how it was trained and what it is scored on decide the board."""
    record, head_path = _trained(load_params())
    a = load_probe(head_path).evaluate("tiny")
    other = a.record.model_copy(update={"protocol_params": {**a.record.protocol_params, "head": {
        **a.record.protocol_params["head"], "sha256": "0" * 64, "run_id": "g-classification@other"}}})
    assert comparability_key(other) == comparability_key(a.record) != comparability_key(record)


def test_loading_never_unpickles(tmp_path):
    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('pickle executed')",))

    bad = tmp_path / "evil.head.safetensors"
    bad.write_bytes(pickle.dumps(Boom()))
    with pytest.raises(HeadMismatchError, match="not a readable safetensors head file"):
        read_head(bad)
    from safetensors.numpy import save_file

    plain = tmp_path / "plain.safetensors"
    save_file({"w": np.zeros(2, np.float32)}, str(plain))
    with pytest.raises(HeadMismatchError, match="without a visbench head identity"):
        read_head(plain)


@pytest.mark.parametrize("task", ["depth", "semantic_segmentation"])
def test_a_dense_head_scores_its_own_numbers_again(scenes, fake_dense_features, task):
    spec = get_probe(task)
    params = {"train_split": "train", "eval_split": "val", "epochs": 2, "lr": 0.01, "weight_decay": 0.0,
              "batch_size": 2, "head": "linear", "target_size": 16}
    result = spec.run(ProbeInputs(scenes, fake_dense_features(scenes), params, seed=0))
    assert result.head is not None and result.head.config["target_size"] == 16
    scored = spec.score_head(ProbeInputs(scenes, fake_dense_features(scenes), params, seed=0), result.head)
    assert scored.metrics == {k: v for k, v in result.metrics.items() if k != "train_loss"}
    assert scored.sample_ids == result.sample_ids


def test_publish_bundles_the_head_its_record_and_a_model_card(image_project, tmp_path, capsys):
    from harness.cli.main import main

    record, head_path = _trained(load_params())
    run_id = "g-classification@cifar_resnet20.random"
    assert main(["publish", f"run={run_id}", f"to={tmp_path / 'bundle'}"]) == 0
    bundle = tmp_path / "bundle"
    assert sorted(p.name for p in bundle.iterdir()) == ["README.md", "head.safetensors", "record.json", "samples.csv"]
    card = (bundle / "README.md").read_text()
    assert sha256_file(head_path) in card and record.backbone.identity in card and "| top1 |" in card
    assert load_probe(bundle / "head.safetensors", backbone="cifar_resnet20@random").comparable
    # the hub is an optional extra that needs network: here it fails with a clear message, exit 1
    assert main(["publish", f"run={run_id}", "to=hub:someone/heads"]) == 1
    assert "hub upload to someone/heads failed" in capsys.readouterr().err
    assert main(["publish", f"run={run_id}"]) == 2
    assert main(["publish", "run=g-retrieval@cifar_resnet20.random", f"to={tmp_path / 'x'}"]) == 2  # no head
    capsys.readouterr()
    # not a run id at all: the one-line error names the form and the runs that have a head, no traceback
    assert main(["publish", "run=classification", f"to={tmp_path / 'x'}"]) == 2
    error = capsys.readouterr().err
    assert "GRID-TASK@BACKBONE" in error and error.endswith(f"Runs with a head: {run_id}\n")
    (tmp_path / "a_file").write_text("kept")
    assert main(["publish", f"run={run_id}", f"to={tmp_path / 'a_file'}"]) == 2
    assert (tmp_path / "a_file").read_text() == "kept"
    # another run's bundle is never overwritten; the same run's is replaced, readable by others (not mkstemp's 0600)
    record_json = bundle / "record.json"
    record_json.write_text(record_json.read_text().replace(run_id, "g-classification@other"))
    assert main(["publish", f"run={run_id}", f"to={bundle}"]) == 2
    assert "already holds the bundle of g-classification@other" in capsys.readouterr().err
    record_json.write_text(record_json.read_text().replace("g-classification@other", run_id))
    assert main(["publish", f"run={run_id}", f"to={bundle}"]) == 0
    assert all(path.stat().st_mode & 0o044 == 0o044 for path in bundle.iterdir())
    # a README.md publish did not write (a repository's, a card by hand) is refused in one line, never overwritten
    capsys.readouterr()
    own = tmp_path / "repo"
    own.mkdir()
    (own / "README.md").write_text("# my project\n")
    assert main(["publish", f"run={run_id}", f"to={own}"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "README.md was not written by publish" in error
    assert (own / "README.md").read_text() == "# my project\n" and sorted(own.iterdir()) == [own / "README.md"]
    # a folder holding a head of its own, without a bundle's record: refused too
    (own / "README.md").unlink()
    (own / "head.safetensors").write_bytes(b"mine")
    assert main(["publish", f"run={run_id}", f"to={own}"]) == 2
    assert "holds head.safetensors but no bundle's record.json" in capsys.readouterr().err
    assert (own / "head.safetensors").read_bytes() == b"mine"


def test_publish_to_a_dvc_remote(image_project, tmp_path):
    import subprocess
    import sys

    from harness.user.publish import publish

    _trained(load_params())
    remote = tmp_path / "remote"
    for command in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"],
                    [sys.executable, "-m", "dvc", "remote", "add", "shelf", str(remote)]):
        subprocess.run(command, check=True, capture_output=True)
    where = publish("g-classification@cifar_resnet20.random", "dvc:shelf")
    assert "dvc remote shelf" in where and Path("published/g-classification-at-cifar_resnet20.random.dvc").is_file()
    assert sum(1 for p in remote.rglob("*") if p.is_file()) >= 4  # the bundle's files, content-addressed
