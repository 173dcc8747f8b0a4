"""Failure files (`failures/<stage>.jsonl`) have one owner, harness.runs.failures, and one tagged format (issue 45
item 3): no other module of harness/ builds their path or writes one, every line says what it is by its `kind`,
and a failed record is made one way (harness.runs.failed_records)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from test_records import FAILED, make_record

from harness.core import paths
from harness.runs import failed_records, failures
from harness.runs.records import Failure, RecordError, dump_record

ROOT = Path(__file__).resolve().parents[1]
OWNER = "harness/runs/failures.py"
# calls that write, copy, move or remove a file: none may be handed a failure file's path outside the owner
FILE_CHANGERS = {"write_text_atomic", "write_bytes_atomic", "write_all_atomic", "write_records", "write_text",
                 "write_bytes", "open", "unlink", "remove", "rename", "replace", "copy", "copy2", "copyfile",
                 "copytree", "move", "rmtree", "_install", "_copy"}


def _modules() -> dict[str, ast.Module]:
    return {p.relative_to(ROOT).as_posix(): ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted((ROOT / "harness").rglob("*.py"))}


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def test_only_the_owner_builds_a_failure_files_path():
    """Every failure file's path comes from paths.failure_path; only the owner calls it (paths.py defines it)."""
    naming = sorted(module for module, tree in _modules().items()
                    if module not in (OWNER, "harness/core/paths.py")
                    for node in ast.walk(tree)
                    if (isinstance(node, ast.Name) and node.id == "failure_path")
                    or (isinstance(node, ast.Attribute) and node.attr == "failure_path")
                    or (isinstance(node, ast.alias) and node.name == "failure_path"))
    assert naming == [], f"failure files are written and read through {OWNER} only: {sorted(set(naming))}"


def test_the_path_the_owner_gives_for_messages_is_never_written():
    """`failures.location` names the file in a message; no call that changes files is ever handed it, directly or
    through a local name."""
    wrong = []
    for module, tree in _modules().items():
        if module == OWNER:
            continue
        located = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                   and isinstance(node.value, ast.Call) and _called(node.value) == "location"
                   for target in node.targets if isinstance(target, ast.Name)}
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and _called(n) in FILE_CHANGERS):
            for node in ast.walk(call):
                if (isinstance(node, ast.Call) and _called(node) == "location") or (
                        isinstance(node, ast.Name) and node.id in located):
                    wrong.append(f"{module}:{call.lineno}")
    assert wrong == [], f"a failure file is changed outside {OWNER}: {wrong}"


@pytest.fixture
def failures_root(tmp_path):
    with paths.workspace(tmp_path):
        yield tmp_path / "failures"


def _lines(stage: str) -> list[dict]:
    return [json.loads(line) for line in failures.location(stage).read_text().splitlines()]


def test_failed_records_are_tagged_lines_carrying_the_record_unchanged(failures_root):
    shot = FAILED.model_copy(update={"run_id": "g-classification@b/k1-s0"})
    failed_records.record_failed_runs("g-classification@b", [FAILED, shot], upstream="extract-g-d@b")
    assert failures.location("g-classification@b") == failures_root / "g-classification-at-b.jsonl"
    for line, record in zip(_lines("g-classification@b"), [FAILED, shot], strict=True):
        assert line == {"kind": "record", "version": failures.VERSION, "upstream": "extract-g-d@b",
                        "record": json.loads(dump_record(record))}
    runs = failed_records.failed_runs("g-classification@b")
    assert [(r.record, r.upstream) for r in runs] == [(FAILED, "extract-g-d@b"), (shot, "extract-g-d@b")]
    assert failures.stage_failure("g-classification@b") is None  # a record file holds no stage failure


def test_a_stage_failure_is_its_own_kind(failures_root):
    try:
        raise OSError(28, "No space left on device")
    except OSError as error:
        failures.record_stage_failure("extract-g-d@b", "extract", error)
    [line] = _lines("extract-g-d@b")
    assert line["kind"] == "stage_failure" and line["version"] == failures.VERSION
    failure = failures.stage_failure("extract-g-d@b")
    assert (failure.stage, failure.phase, failure.error_type) == ("extract-g-d@b", "extract", "OSError")
    assert failure.message == "[Errno 28] No space left on device" and "OSError" in failure.traceback
    with pytest.raises(RecordError, match="a stage failure where failed records belong"):
        failed_records.failed_records("extract-g-d@b")
    failures.clear("extract-g-d@b")
    assert not failures.exists("extract-g-d@b") and failures.stage_failure("extract-g-d@b") is None
    assert failed_records.failed_records("extract-g-d@b") == []


@pytest.mark.parametrize("line", [dump_record(FAILED), '{"stage": "x", "phase": "p"}', '{"kind": "record"',
                                  '{"kind": "other", "version": 1}'],
                         ids=["untagged record", "untagged stage failure", "cut short", "unknown kind"])
def test_a_line_of_no_known_kind_is_refused_naming_the_file(failures_root, line):
    failures_root.mkdir(parents=True)
    failures.location("s").write_text(line + "\n")
    with pytest.raises(RecordError, match=r"s\.jsonl:1: "):
        failed_records.failed_records("s")


def test_a_failed_record_keeps_which_run_it_was_and_nothing_it_measured():
    failure = Failure(phase="write", error_type="OSError", message="disk full")
    failed = failed_records.as_failed(make_record(), failure)
    assert failed.status == "failed" and failed.failure == failure
    assert (failed.metrics, failed.higher_is_better, failed.tolerances, failed.samples, failed.warnings) == (
        {}, {}, {}, None, [])
    ok = make_record().model_dump(exclude={"status", "failure", "metrics", "higher_is_better", "tolerances",
                                           "samples", "warnings"})
    assert failed.model_dump(exclude={"status", "failure", "metrics", "higher_is_better", "tolerances", "samples",
                                      "warnings"}) == ok


def test_a_jobs_failure_file_moves_byte_for_byte(tmp_path, monkeypatch):
    """An executor's job ships its failure files (paths relative to its checkout) and the coordinator adopts them
    as they are."""
    job, returned, here = tmp_path / "job", tmp_path / "returned", tmp_path / "here"
    job.mkdir()
    here.mkdir()
    monkeypatch.chdir(job)
    failed_records.record_failed_runs("g-t@b", [FAILED])
    written = failures.location("g-t@b").read_bytes()
    failures.ship("g-t@b", returned)
    failures.ship("never-failed", returned)
    monkeypatch.chdir(here)
    assert failures.adopt("g-t@b", returned) and failures.location("g-t@b").read_bytes() == written
    assert not failures.adopt("never-failed", returned) and not failures.exists("never-failed")
