"""Probe-parameter overrides as DVC experiments: bookkeeping that needs no DVC run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from harness.executors.experiments import EXPERIMENT_COPIES, experiment_name, experiment_ref, run_experiment
from harness.pipeline import dvc_runner
from harness.pipeline.plan import Run


def _repo(path: Path) -> str:
    path.mkdir()
    (path / "params.yaml").write_text(yaml.safe_dump({"datasets": {"cifar10": {"root": "../shared/data/cifar"}}}))
    for command in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"]):
        subprocess.run(command, cwd=path, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True).stdout.strip()


def test_a_failed_rerun_keeps_the_earlier_experiment_and_paths_outside_resolve_from_dvcs_copy(tmp_path, monkeypatch):
    head = _repo(tmp_path / "project")
    (tmp_path / "shared" / "data" / "cifar").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "project")
    settings = ["probes.classification.lr=0.01"]
    ref = experiment_ref(experiment_name(settings))
    subprocess.run(["git", "update-ref", ref, head], check=True)  # the earlier, successful run of this override
    asked = []
    monkeypatch.setattr(dvc_runner, "run_dvc", lambda args: asked.append(args) or 1)  # this run fails
    runs = [Run("cifar10", "classification", "cifar_resnet20", "cifar10", "cifar10")]
    assert run_experiment(runs, settings) == 1
    assert asked and asked[0][:3] == ["exp", "run", "--temp"]
    kept = subprocess.run(["git", "rev-parse", "--verify", ref], capture_output=True, text=True)
    assert kept.returncode == 0 and kept.stdout.strip() == head  # not removed by the failed run
    # DVC's copy runs at .dvc/tmp/exps/standalone/<random>/: ../shared from there is the link beside it
    link = EXPERIMENT_COPIES / "shared"
    assert link.is_symlink() and (EXPERIMENT_COPIES / "anycopy" / "../shared/data/cifar").resolve() == (
        tmp_path / "shared" / "data" / "cifar").resolve()
