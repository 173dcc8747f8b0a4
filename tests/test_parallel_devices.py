"""`devices=…`: extraction in one process per device, then DVC as always; the same outputs as one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.config import load_params
from harness.core.dvcfiles import row_address
from harness.executors.parallel import deal
from harness.pipeline.documents import documents
from harness.pipeline.stage_model import load_stages
from harness.pipeline.targets import stage_commands, stage_names

REPO = Path(__file__).resolve().parents[1]


def test_backbones_are_dealt_largest_first_to_the_least_loaded_device():
    stages = {"a": ["a1"], "b": ["b1", "b2", "b3"], "c": ["c1", "c2"], "d": ["d1"]}
    assert deal(stages, ["cuda:0", "cuda:1"]) == [("cuda:0", ["b1", "b2", "b3", "d1"]), ("cuda:1", ["c1", "c2", "a1"])]
    assert deal(stages, ["cpu", "cpu", "cpu"]) == [("cpu", ["b1", "b2", "b3"]), ("cpu", ["c1", "c2"]),
                                                   ("cpu", ["a1", "d1"])]
    assert deal({}, ["cuda:0"]) == [("cuda:0", [])]


def test_stage_commands_are_the_committed_dvc_yaml_commands(repo_root):
    """What the parallel executor starts is exactly what DVC would: the committed dvc.yaml's commands."""
    import yaml

    commands = stage_commands(load_stages(repo_root))
    assert set(commands) == set().union(*map(stage_names, documents(load_params()).values()))
    committed = yaml.safe_load((repo_root / "pipelines/default/efficientnet_lite0/dvc.yaml").read_text())["stages"]
    assert commands["extract-default-fashion_mnist@efficientnet_lite0"] == (
        committed["extract-default-fashion_mnist"]["do"]["cmd"])
    assert commands["default-retrieval@resnet18.random"].startswith(
        "python -m harness.stages.probe default retrieval resnet18.random ")
    assert "$" not in "".join(commands.values())


@pytest.mark.dvc
def test_two_cpu_processes_extract_and_dvc_locks_what_they_made(tmp_path):
    """A fresh clone's default-grid retrieval with two backbones on `devices=cpu,cpu`: both extractions ran in
    parallel processes, DVC locked them (nothing left to run), and the committed records stayed as they are."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(clone)], check=True, timeout=120)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "harness.cli.main", "grid=default", "task=retrieval",
                          "backbone=efficientnet_lite0,resnet18.random", "devices=cpu,cpu", "build_site=false"],
                         cwd=clone, capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "extracting 2 stages in 2 parallel processes: cpu: 1; cpu: 1" in out.stdout
    for backbone in ("efficientnet_lite0", "resnet18.random"):
        assert f"[cpu] extract-default-fashion_mnist@{backbone} ok" in out.stdout
        # locked by `dvc commit`, so the one `dvc repro` after it did not extract again
        stage = row_address("default", backbone, f"extract-default-fashion_mnist@{backbone}")
        assert f"Running stage '{stage}'" not in out.stdout
    status = subprocess.run([sys.executable, "-m", "dvc", "status",
                             *(row_address("default", b, f"extract-default-fashion_mnist@{b}")
                               for b in ("efficientnet_lite0", "resnet18.random"))], cwd=clone,
                            capture_output=True, text=True, timeout=300, env=env)
    assert "up to date" in status.stdout, status.stdout + status.stderr
    for backbone in ("efficientnet_lite0", "resnet18.random"):  # the numbers are the committed ones
        path = f"results/default/retrieval/{backbone}.metrics.json"
        committed = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=clone, capture_output=True, text=True,
                                   check=True).stdout
        assert json.loads((clone / path).read_text()) == json.loads(committed)
