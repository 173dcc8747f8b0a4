"""dvc.yaml, params.yaml, dvc.lock and the committed corpus agree with each other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import paths
from harness.config import canonical_backbone, load_params
from harness.records import read_records

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def params():
    return load_params(ROOT / "params.yaml")


@pytest.fixture(scope="module")
def lock():
    return yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]


def test_every_grid_run_has_a_locked_stage_and_a_record(params, lock):
    corpus = {r.run_id: r for r in read_records(ROOT / paths.CORPUS)}
    for grid_name, grid in params.grids.items():
        for task in grid.tasks:
            for backbone in grid.backbones:
                stage = paths.stage_name(grid_name, task, backbone)
                assert stage in lock, f"{stage} has never run: dvc.lock lacks it"
                assert stage in corpus, f"{stage} has no record in the corpus"
                assert corpus[stage].backbone_name == canonical_backbone(backbone)


def test_locked_record_hashes_match_committed_files(lock):
    import hashlib

    checked = 0
    for name, stage in lock.items():
        for out in stage.get("outs", []):
            path = ROOT / out["path"]
            if out["path"].endswith(".json") or out["path"].endswith(".jsonl"):
                assert path.is_file(), f"{out['path']} (out of {name}) is not committed"
                assert hashlib.md5(path.read_bytes()).hexdigest() == out["md5"], f"{out['path']} changed since {name}"
                checked += 1
    assert checked > 0


def test_corpus_is_exactly_the_collected_results(params):
    collected = []
    for grid_name, grid in params.grids.items():
        for task in grid.tasks:
            for backbone in grid.backbones:
                collected += read_records(ROOT / paths.record_path(grid_name, task, backbone))
    corpus = read_records(ROOT / paths.CORPUS)
    assert sorted(r.run_id for r in collected) == [r.run_id for r in corpus]


def test_metrics_files_match_records(params):
    for record in read_records(ROOT / paths.CORPUS):
        grid, rest = record.run_id.split("-", 1)
        task, backbone = rest.split("@", 1)
        metrics = json.loads((ROOT / paths.metrics_path(grid, task, backbone)).read_text())
        assert metrics == record.metrics


def test_controls_are_marked_and_pretrained_are_not():
    for record in read_records(ROOT / paths.CORPUS):
        if record.backbone is not None:
            assert record.backbone.control == record.backbone_name.endswith("@random")
            assert (record.backbone.weights["kind"] == "random") == record.backbone.control


def test_dvc_sees_nothing_to_reproduce():
    """A no-op `dvc repro`: code, params and committed outputs all match dvc.lock.

    --allow-missing skips stages whose only change is data absent from this checkout (DVC-cached
    features on a fresh clone, or ../shared where it is not mounted).
    """
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "dvc", "repro", "--dry", "--allow-missing"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )
    assert result.returncode == 0, result.stderr
    running = [line for line in result.stdout.splitlines() if line.startswith("Running stage")]
    assert not running, "stages out of date with dvc.lock:\n" + "\n".join(running)
