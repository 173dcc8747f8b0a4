"""Probe-parameter overrides as DVC experiments: bookkeeping that needs no DVC run; which runs an override reaches,
and names that keep one experiment from replacing another."""

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
    runs = [Run("cifar10", "classification", "cifar_resnet20", "cifar10", "cifar10")]
    ref = experiment_ref(experiment_name(settings, [runs[0].stage]))
    subprocess.run(["git", "update-ref", ref, head], check=True)  # the earlier, successful run of this override
    asked = []
    monkeypatch.setattr(dvc_runner, "run_dvc", lambda args: asked.append(args) or 1)  # this run fails
    assert run_experiment(runs, settings) == 1
    assert asked and asked[0][:3] == ["exp", "run", "--temp"]
    kept = subprocess.run(["git", "rev-parse", "--verify", ref], capture_output=True, text=True)
    assert kept.returncode == 0 and kept.stdout.strip() == head  # not removed by the failed run
    # DVC's copy runs at .dvc/tmp/exps/standalone/<random>/: ../shared from there is the link beside it
    link = EXPERIMENT_COPIES / "shared"
    assert link.is_symlink() and (EXPERIMENT_COPIES / "anycopy" / "../shared/data/cifar").resolve() == (
        tmp_path / "shared" / "data" / "cifar").resolve()


def test_an_override_reaches_only_the_runs_that_read_it(repo_root):
    """`probes.classification.seed=3` without grid=: the seed1/seed2 grids set their own seed, so the override
    would change nothing there; they are left out rather than listed as tied."""
    import pytest

    from harness.core.config import ConfigError, load_params
    from harness.executors.experiments import scoped_runs
    from harness.pipeline.plan import select_runs

    params = load_params()
    runs, _ = select_runs(params, task="classification")
    own_seed = {grid for grid, spec in params.grids.items() if "seed" in spec.probes.get("classification", {})}
    reached, others = scoped_runs(params, runs, {"classification.seed": 3})
    assert own_seed and {run.grid for run in others} == own_seed & {run.grid for run in runs}
    assert not {run.grid for run in reached} & own_seed and len(reached) + len(others) == len(runs)
    reached, others = scoped_runs(params, runs, {"classification.lr": 0.01})
    assert reached == runs and others == []  # no grid sets lr itself
    seeded = [run for run in runs if run.grid in own_seed]
    with pytest.raises(ConfigError, match="reaches no run"):
        scoped_runs(params, seeded, {"classification.seed": 3})


def test_experiments_are_named_by_their_override_and_scope():
    settings = ["probes.classification.lr=0.01"]
    one, other = ["g-classification@a"], ["g-classification@b"]
    name = experiment_name(settings, one)
    assert name.startswith("override-classification.lr-0.01-")
    assert name == experiment_name(settings, one)  # the same experiment again: it replaces its earlier run
    assert name != experiment_name(settings, other)  # another scope never replaces this one
    assert name != experiment_name(["probes.classification.lr=0.02"], one)
    assert experiment_name(["+probes.correspondence.mutual=true"], one).startswith("override-correspondence.mutual")
