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
from harness import stage_calls as stages
from harness.config import canonical_backbone, load_params
from harness.fewshot import Shot
from harness.hashing import sha256_file
from harness.plan import select_runs
from harness.records import read_records
from harness.samples import read_samples

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def params():
    return load_params(ROOT / "params.yaml")


@pytest.fixture(scope="module")
def lock():
    return yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]


def _grids_run_here(params) -> dict:
    """Grids whose data this checkout has: the declared voc2012/nyuv2/taskonomy/nights grids never ran."""
    return {name: grid for name, grid in params.grids.items()
            if all((ROOT / required).exists() for required in grid.requires)}


def _locate(record):
    """(grid, task, backbone, shot) of the stage run that wrote `record`."""
    grid, task, backbone = paths.stage_parts(paths.stage_of_run(record.run_id, record.k_shot, record.seed))
    return grid, task, backbone, None if record.k_shot is None else Shot(record.k_shot, record.seed)


def test_every_grid_run_has_a_locked_stage_and_a_record(params, lock):
    corpus = {r.run_id: r for r in read_records(ROOT / paths.CORPUS)}
    for grid_name, grid in _grids_run_here(params).items():
        for task in grid.tasks:
            for backbone in grid.backbones:
                stage = paths.stage_name(grid_name, task, backbone)
                assert stage in lock, f"{stage} has never run: dvc.lock lacks it"
                for run_id in stages.stage_run_ids(params, grid_name, task, backbone):
                    assert run_id in corpus, f"{run_id} has no record in the corpus"
                    assert corpus[run_id].backbone_name == canonical_backbone(backbone)


def test_locked_record_hashes_match_committed_files(lock):
    import hashlib

    checked = 0
    for name, stage in lock.items():
        for out in stage.get("outs", []):
            path = ROOT / out["path"]
            if out["path"].endswith((".json", ".jsonl", ".samples.csv")):
                assert path.is_file(), f"{out['path']} (out of {name}) is not committed"
                assert hashlib.md5(path.read_bytes()).hexdigest() == out["md5"], f"{out['path']} changed since {name}"
                checked += 1
    assert checked > 0


def test_corpus_is_exactly_the_collected_results(params):
    collected = []
    for grid_name, grid in _grids_run_here(params).items():
        for task in grid.tasks:
            for backbone in grid.backbones:
                for shot in stages.stage_shots(params, grid_name):
                    collected += read_records(ROOT / paths.record_path(grid_name, task, backbone, shot))
    corpus = read_records(ROOT / paths.CORPUS)
    assert sorted(r.run_id for r in collected) == [r.run_id for r in corpus]


def test_metrics_files_match_records(params):
    fewshot = {}
    for record in read_records(ROOT / paths.CORPUS):
        grid, task, backbone, shot = _locate(record)
        if shot is not None:
            fewshot.setdefault((grid, task, backbone), []).append(record)
            continue
        metrics = json.loads((ROOT / paths.metrics_path(grid, task, backbone)).read_text())
        assert metrics == record.metrics
    for (grid, task, backbone), records in fewshot.items():
        metrics = json.loads((ROOT / paths.metrics_path(grid, task, backbone)).read_text())
        assert metrics == stages.fewshot_metrics(records)


def test_ok_records_have_their_per_sample_files():
    """Every ok record points at a committed samples file with its SHA-256, whose columns average to the
    record's metrics; a failed run's file is header-only."""
    for record in read_records(ROOT / paths.CORPUS):
        grid, task, backbone, shot = _locate(record)
        path = paths.samples_path(grid, task, backbone, shot)
        if record.status != "ok":
            assert record.samples is None, record.run_id
            assert (ROOT / path).read_text() == "sample_id\n", record.run_id
            continue
        info = record.samples
        assert info is not None, f"{record.run_id} has no per-sample scores: regenerate the corpus"
        assert info.path == path.as_posix(), record.run_id
        assert (ROOT / info.path).is_file(), f"{info.path} is not committed"
        assert sha256_file(ROOT / info.path) == info.sha256, f"{info.path} does not match {record.run_id}"
        ids, columns = read_samples(info, ROOT)
        assert len(ids) == info.count and sorted(columns) == info.columns, record.run_id
        for name, column in columns.items():
            assert abs(column.mean() - record.metrics[name]) <= 1e-12, f"{record.run_id} {name}"


def test_controls_are_marked_and_pretrained_are_not():
    for record in read_records(ROOT / paths.CORPUS):
        if record.backbone is not None:
            # controls: random-init architectures (NAME@random) and fixed-filter baselines (sobel)
            fixed = record.backbone.weights["kind"] == "fixed-filter"
            assert record.backbone.control == (record.backbone_name.endswith("@random") or fixed)
            assert (record.backbone.weights["kind"] in ("random", "fixed-filter")) == record.backbone.control


def test_dvc_sees_nothing_to_reproduce(repo_root):
    """A no-op `dvc repro`: code, params and committed outputs all match dvc.lock.

    --allow-missing skips stages whose only change is data absent from this checkout (DVC-cached
    features on a fresh clone, or ../shared where it is not mounted).
    """
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    # Grids declared for data this project does not have (voc2012, nyuv2, taskonomy) have never run, so
    # they are not in dvc.lock: ask about every stage of the grids whose data is here, as the CLI runs them.
    runs, _ = select_runs(load_params())
    running = []
    for targets in ([run.stage for run in runs], ["--single-item", "collect", "site"]):
        result = subprocess.run(
            [sys.executable, "-m", "dvc", "repro", "--dry", "--allow-missing", *targets],
            cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
        )
        assert result.returncode == 0, result.stderr
        running += [line for line in result.stdout.splitlines() if line.startswith("Running stage")]
    assert not running, "stages out of date with dvc.lock:\n" + "\n".join(running)


def test_changing_one_probe_parameter_reruns_only_that_task(tmp_path):
    """Edit probes.retrieval in a clone: DVC would re-run the retrieval stages and nothing else."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(clone)], check=True, timeout=120)
    params_file = clone / "params.yaml"
    params_yaml = yaml.safe_load(params_file.read_text())
    params_yaml["probes"]["retrieval"]["recall_at"] = [1, 10]
    params_file.write_text(yaml.safe_dump(params_yaml, sort_keys=False))
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "dvc", "status", "--json"], cwd=clone, capture_output=True, text=True, timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    # A fresh clone lacks DVC-cached data (features, prepared datasets): those show as deleted/not in
    # cache. Any other change is a real reason to re-run.
    absent = {"deleted", "not in cache"}

    def real_changes(entry) -> bool:
        if isinstance(entry, dict):
            return any(real_changes(v) for v in entry.values())
        if isinstance(entry, list):
            return any(real_changes(v) for v in entry)
        return entry not in absent

    # Stages that never ran (the declared grids whose data is not here) are not in dvc.lock: `dvc status`
    # lists them as changed on any checkout, so only locked stages can tell what the edit re-runs.
    locked = set(yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"])
    changed = sorted(stage for stage, entries in json.loads(result.stdout).items()
                     if stage in locked and real_changes(entries))
    assert changed == sorted(s for s in changed if "-retrieval@" in s) and changed, changed
    assert len(changed) == sum(1 for line in (ROOT / "dvc.lock").read_text().splitlines()
                               if line.startswith("  ") and "-retrieval@" in line and line.endswith(":")
                               and not line.startswith("   "))
