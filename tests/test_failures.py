"""A failure never destroys good data and never reports success: on a clone, a corrupt checkpoint fails its
stage, the CLI exits 1 with a table of failures, the committed record, corpus and run page stay as they were,
the failed attempt is kept apart and shown with its retry command, and the same command retries it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.core.dvcfiles import row_address

REPO = Path(__file__).resolve().parents[1]
RUN = "default-classification@efficientnet_lite0"
pytestmark = pytest.mark.dvc


def _cli(clone: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "harness.cli.main", *args], cwd=clone, capture_output=True, text=True,
                          timeout=900, env=env)


def test_a_corrupt_checkpoint_keeps_the_committed_record_and_exits_non_zero(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(clone)], check=True, timeout=120)
    (clone / "corrupt.pth").write_bytes(os.urandom(4096))
    params = yaml.safe_load((clone / "params.yaml").read_text())
    params["checkpoints"]["efficientnet_lite0"] = "corrupt.pth"
    (clone / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    kept = ["results/default/classification", "leaderboard/corpus.jsonl", "docs/runs"]

    first = _cli(clone, "grid=default", "task=classification", "backbone=efficientnet_lite0", "build_site=false")
    assert first.returncode == 1, first.stdout[-2000:] + first.stderr[-2000:]
    assert "FAILED: 1 of 1 selected runs" in first.stdout and RUN in first.stdout
    assert "SHA-256" in first.stdout and "retry" in first.stdout
    assert "results (headline metric" not in first.stdout  # the kept record's number is not this run's result
    assert subprocess.run(["git", "diff", "--quiet", "--", *kept], cwd=clone).returncode == 0, "good data changed"
    [attempt] = [json.loads(line) for line in (clone / "leaderboard" / "failures.jsonl").read_text().splitlines()]
    assert attempt["run_id"] == RUN and attempt["status"] == "failed"
    assert attempt["failure"]["phase"] == "load_backbone" and "refusing to run on different weights" in \
        attempt["failure"]["message"]
    task_page = (clone / "docs" / "tasks" / "classification.md").read_text()
    assert "visbench-harness grid=default task=classification backbone=efficientnet_lite0" in task_page

    again = _cli(clone, "grid=default", "task=classification", "backbone=efficientnet_lite0", "build_site=false")
    assert again.returncode == 1  # DVC did not lock the failure: the same command retried it
    extract = row_address("default", "efficientnet_lite0", "extract-default-fashion_mnist@efficientnet_lite0")
    assert f"Running stage '{extract}'" in again.stdout


def test_a_workspace_another_dvc_command_holds_is_one_line_and_no_failures(tmp_path):
    """DVC refuses a second command in one workspace; that is not a failure of any run (none was checked)."""
    import zc.lockfile

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(clone)], check=True, timeout=120)
    (clone / ".dvc" / "tmp").mkdir(parents=True, exist_ok=True)
    held = zc.lockfile.LockFile(str(clone / ".dvc" / "tmp" / "lock"))  # what a running `dvc repro` holds
    try:
        busy = _cli(clone, "grid=default", "task=classification", "backbone=efficientnet_lite0", "build_site=false")
    finally:
        held.close()
    assert busy.returncode == 1, busy.stdout[-2000:] + busy.stderr[-2000:]
    assert busy.stderr.strip().splitlines() == [
        "visbench-harness: another DVC command holds this workspace's lock (.dvc/tmp/lock), so nothing ran: run the "
        "same command again once it has finished (DVC runs one command per workspace)"]
    assert "FAILED" not in busy.stdout and "results (headline metric" not in busy.stdout
    # no failed record (leaderboard/failures.jsonl, failures/), no record or page touched
    assert subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True).stdout == ""


@pytest.mark.parametrize("task", ["classification", "depth"])
def test_a_run_whose_upstream_failed_gets_its_record_without_importing_every_probe(task):
    """The failed record of a run that never started needs its task's spec: the CLI imports only the module its
    probe stage runs (dvc.yaml's `--code`), not every probe with torch and torchvision; the spec is the one the
    registry's full discovery finds."""
    code = ("import sys; from harness.pipeline.plan import Run; from harness.executors.report import _probe_spec; "
            f"spec = _probe_spec(Run('default', {task!r}, 'efficientnet_lite0', 'x', 'default')); "
            "heavy = sorted(m for m in ('torch', 'torchvision') if m in sys.modules); "
            "from harness.probes import PROBES; PROBES.discover(); "
            f"from harness.probes import get_probe; print(spec is get_probe({task!r}), heavy)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    is_same, heavy = done.stdout.strip().split(" ", 1)
    assert is_same == "True"
    if task == "classification":  # a NumPy probe: nothing heavy at all
        assert heavy == "[]"
