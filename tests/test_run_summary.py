"""What a run prints at its end: the committed records' headline metrics, and, inside a container whose output
folders are not mounted, a warning that names the missing mounts."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from harness.cli import container_mounts, run_summary
from harness.core.config import load_params
from harness.pipeline.plan import select_runs

# A podman container's mountinfo (trimmed): an overlay root, the checkout's leaderboard/ bind-mounted, and a
# mount point whose name has a space (written as \040)
CONTAINER = """\
85 58 0:40 / / rw,relatime - overlay overlay rw,lowerdir=/l/A:/l/B,upperdir=/u/diff,workdir=/u/work
86 85 0:43 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
96 85 254:0 /tmp/co/leaderboard /app/leaderboard rw,relatime - ext4 /dev/vda rw
97 85 254:0 /tmp/co/my\\040site /app/my\\040site rw,relatime - ext4 /dev/vda rw
"""
WHOLE_CHECKOUT = """\
85 58 0:40 / / rw,relatime - overlay overlay rw,lowerdir=/l/A,upperdir=/u/diff,workdir=/u/work
96 85 254:0 /tmp/co /app rw,relatime - ext4 /dev/vda rw
"""
VFS = """\
60 55 254:0 /var/lib/containers/storage/vfs/dir/1f2e / rw,relatime - ext4 /dev/vda rw
96 60 254:0 /tmp/co/leaderboard /app/leaderboard rw,relatime - ext4 /dev/vda rw
"""
MACHINE = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
22 27 0:21 / /proc rw,relatime - proc proc rw
"""


@pytest.fixture
def mountinfo(tmp_path: Path):
    def write(text: str) -> Path:
        path = tmp_path / f"mountinfo-{len(list(tmp_path.iterdir()))}"
        path.write_text(text)
        return path

    return write


def test_folders_outside_every_mount_of_an_overlay_root_are_reported(mountinfo):
    info = mountinfo(CONTAINER)
    assert container_mounts.mounts(info)[Path("/app/my site")] == ("ext4", "/tmp/co/my site")
    # podman's vfs storage: the root is a directory of the host's disk, not an overlay
    assert container_mounts.unmounted(["/app/results", "/app/leaderboard"], mountinfo(VFS)) == ["/app/results"]
    assert container_mounts.unmounted(["/app/results", "/app/leaderboard", "/app/leaderboard/boards",
                                       "/app/my site", "/app/site"], info) == ["/app/results", "/app/site"]


def test_a_mounted_checkout_or_an_ordinary_root_reports_nothing(mountinfo):
    assert container_mounts.unmounted(["/app/results", "/app/site"], mountinfo(WHOLE_CHECKOUT)) == []
    # a VM built from an image keeps /.dockerenv, but its root is a real disk: nothing is lost there
    assert container_mounts.unmounted(["/work/results"], mountinfo(MACHINE)) == []
    assert container_mounts.unmounted(["results"], Path("/nonexistent/mountinfo")) == []


def test_the_warning_names_the_mounts_that_keep_the_outputs(monkeypatch):
    monkeypatch.setattr(container_mounts, "in_container", lambda: True)
    monkeypatch.setattr(container_mounts, "unmounted",
                        lambda folders: [f for f in folders if f != "leaderboard"])
    message = container_mounts.unmounted_outputs_warning(["results", "leaderboard", "site"], dry_run=True)
    assert message is not None and "\n" not in message
    assert "results/, site/ are not mounted" in message and "would stay in the container" in message
    assert '-v "$PWD/results:/workspace/visbench-harness/results"' in message
    assert '-v "$PWD/site:/workspace/visbench-harness/site"' in message and "leaderboard:" not in message
    real_run = container_mounts.unmounted_outputs_warning(["results"], dry_run=False)
    assert real_run is not None and "results/ is not mounted" in real_run and "writes there stays in" in real_run
    monkeypatch.setattr(container_mounts, "in_container", lambda: False)
    assert container_mounts.unmounted_outputs_warning(["results"], dry_run=False) is None


def test_the_summary_is_each_runs_committed_headline(repo_root):
    params = load_params()
    runs, _ = select_runs(params, grid="default", task="retrieval")
    rows = run_summary.summary_rows(runs, params)
    assert [row[0] for row in rows] == [run.stage for run in runs]
    for (_, metric, value), run in zip(rows, runs, strict=True):
        record = json.loads((repo_root / "results" / "default" / "retrieval" / f"{run.backbone}.json").read_text())
        assert metric == record["headline_metric"] and value == f"{record['metrics'][metric]:.4f}"


def test_few_shot_stages_are_summarised_per_k_over_seeds(repo_root):
    params = load_params()
    runs, _ = select_runs(params, grid="fewshot", task="classification", backbone="efficientnet_lite0")
    rows = run_summary.summary_rows(runs, params)
    spec = params.grids["fewshot"].fewshot
    assert [row[0] for row in rows] == [f"{runs[0].stage} k={k}" for k in spec.k_shots]
    folder = repo_root / "results" / "fewshot" / "classification" / "efficientnet_lite0"
    k = spec.k_shots[0]
    values = [json.loads((folder / f"k{k}-s{seed}.json").read_text()) for seed in spec.seeds]
    headline = values[0]["headline_metric"]
    numbers = [v["metrics"][headline] for v in values]
    assert rows[0][2] == (f"{statistics.fmean(numbers):.4f} ± {statistics.stdev(numbers):.4f} "
                          f"({len(spec.seeds)} seeds)")


def test_a_failed_or_missing_record_is_left_out_and_long_summaries_are_cut(repo_root, monkeypatch):
    params = load_params()
    runs, _ = select_runs(params, grid="default", task="retrieval")
    monkeypatch.setattr(run_summary, "MAX_ROWS", 2)
    lines = run_summary.summary_lines(runs, params)
    assert len(lines) == 4 and lines[-1] == f"  … and {len(runs) - 2} more (leaderboard/corpus.jsonl)"
    failed = run_summary._ok_record
    monkeypatch.setattr(run_summary, "_ok_record", lambda path: None if "lite" in path.name else failed(path))
    assert [row[0] for row in run_summary.summary_rows(runs, params)] == [
        run.stage for run in runs if "lite" not in run.backbone]
