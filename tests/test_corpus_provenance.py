"""Records come from committed code: the committed corpus holds none that says otherwise, and a run from code that
differs from HEAD is refused before any work (unless `allow_dirty=true`, whose records say so)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.cli.main import main as cli_main
from harness.core.config import ConfigError
from harness.runs import environment
from harness.stages import probe as probe_stage

ROOT = Path(__file__).resolve().parents[1]


def test_a_committed_record_from_uncommitted_code_is_only_one_a_plain_run_rewrites():
    """No current record came from uncommitted code: a record that says git_dirty may stand only in a stage owed a
    re-run after a committed code change (harness.pipeline.owed: a re-run split across sessions by grid), which the
    next plain run reruns and, the reproduced rule never keeping a dirty record, rewrites."""
    from harness.core.run_key import RunKey
    from harness.pipeline.owed import owed_stages

    owed = owed_stages(ROOT)
    records = [json.loads(line) for line in (ROOT / "leaderboard" / "corpus.jsonl").read_text().splitlines()
               if line.strip()]
    for path in sorted((ROOT / "results").rglob("*.json")):
        if not path.name.endswith("metrics.json"):
            record = json.loads(path.read_text())
            if isinstance(record, dict) and "run_id" in record:
                records.append(record)
    dirty = {r["run_id"]: RunKey.from_run_id(r["run_id"], r.get("k_shot"), r["seed"]).stage for r in records
             if (r.get("environment") or {}).get("git_dirty")}
    current = sorted(run_id for run_id, stage in dirty.items() if stage not in owed)
    assert not current, f"{len(current)} records say git_dirty in stages up to date (re-run them): {current[:5]}"


def _git(folder: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """A git checkout holding a committed harness/ module, as the working directory."""
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "probe_code.py").write_text("VALUE = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "code")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(environment.ALLOW_DIRTY_ENV, raising=False)
    return tmp_path


def test_committed_code_runs(checkout):
    assert environment.uncommitted_code() == []
    environment.require_committed_code()


def test_an_edit_or_a_new_module_is_refused_in_one_line_naming_the_file_and_the_fix(checkout, monkeypatch):
    (checkout / "harness" / "probe_code.py").write_text("VALUE = 2\n")
    with pytest.raises(ConfigError) as refused:
        environment.require_committed_code()
    message = str(refused.value)
    assert "harness/probe_code.py" in message and "commit" in message and "allow_dirty=true" in message
    assert "\n" not in message
    _git(checkout, "checkout", "--", "harness/probe_code.py")
    (checkout / "harness" / "new_module.py").write_text("x = 1\n")  # imported by a stage, never committed
    assert environment.uncommitted_code() == ["harness/new_module.py"]
    with pytest.raises(ConfigError, match=r"new_module\.py"):
        environment.require_committed_code()
    environment.require_committed_code(allow_dirty=True)
    monkeypatch.setenv(environment.ALLOW_DIRTY_ENV, "1")  # what the CLI's allow_dirty=true hands the stages
    environment.require_committed_code()
    assert environment.environment_fingerprint.__wrapped__().git_dirty is True


def test_outside_a_checkout_nothing_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(environment.ALLOW_DIRTY_ENV, raising=False)
    assert environment.uncommitted_code() is None
    environment.require_committed_code()


def test_the_probe_stage_and_the_cli_refuse_before_any_work(checkout, capsys):
    """Exit 2 and one line, before params.yaml is even read (this checkout has none)."""
    (checkout / "harness" / "probe_code.py").write_text("VALUE = 3\n")
    assert probe_stage.main(["default", "classification", "resnet18.random", "--dataset", "d",
                             "--features", "default"]) == 2
    assert cli_main(["grid=default"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(errors) == 2 and all("differs from HEAD (harness/probe_code.py)" in line for line in errors)
