"""Failed attempts, kept apart from what succeeded: `failures/<stage>.jsonl` (git-tracked, never a DVC out).

This module is the one owner of those files: the stages, the CLI, the API and the executors write, read, clear
and move them through it, and no other module builds a failure file's path (tests/test_failure_files.py holds
that). A stage that fails writes its attempt here and exits 1; the ok record it may have had stays where it was.
A stage that succeeds clears its file. The CLI turns the failure of an upstream stage (prepare, extract) into a
failed record for each run that needed it; `collect` gathers the failed records into
leaderboard/failures.jsonl, which the site shows on each task page with the command that retries.

One format: one JSON object a line, saying what it is by its `kind`, and the format's `version`:

- `{"kind": "record", "record": {...}, "upstream": null | STAGE, "version": 1}`: a failed run of a probe stage,
  a whole record (harness.runs.failed_records turns it into a `Record`); `upstream` names the stage whose failure
  it stands for when the run never started.
- `{"kind": "stage_failure", "failure": {...}, "version": 1}`: a stage that makes no record (prepare, extract)
  failed: a `StageFailure`.

Readers dispatch on `kind`, never on which fields a line happens to have. The record's schema stays out of this
module on purpose: every prepare and extract stage imports it, and its code fingerprint (codedeps/) must not
move, re-extracting every feature, when the record schema does.
"""

from __future__ import annotations

import json
import shutil
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.core.atomic import write_bytes_atomic, write_text_atomic
from harness.core.paths import failure_path

VERSION = 1
RECORD, STAGE_FAILURE = "record", "stage_failure"


class FailureFileError(ValueError):
    """A failure file line this format does not describe: edited by hand, cut short, or another version's."""


class StageFailure(BaseModel):
    """A failed stage that makes no record (prepare, extract), or a job that never returned (`phase="executor"`):
    what each run that needed it gets as its failure."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stage: str  # the stage (or the executor's job) that failed
    phase: str
    error_type: str
    message: str
    traceback: str = ""  # the end of it; an executor's job has none


@dataclass(frozen=True)
class RecordEntry:
    """A `record` line: the failed record's JSON as its writer serialised it, and where it was read (for errors)."""

    record_json: str
    upstream: str | None
    source: str


# --- writing: the one writer of failure files ---------------------------------------------------------------

def _line(kind: str, **payload: Any) -> str:
    return json.dumps({"kind": kind, "version": VERSION, **payload}, sort_keys=True, separators=(",", ":"))


def _write(stage: str, lines: list[str]) -> Path:
    path = failure_path(stage)
    write_text_atomic(path, "".join(line + "\n" for line in lines))
    return path


def write_record_entries(stage: str, records_json: list[str], upstream: str | None = None) -> Path:
    """The probe stage's failed attempt, replacing whatever was there: one `record` line per failed record
    (`records_json`: each as `dump_record` wrote it, carried unchanged)."""
    return _write(stage, [_line(RECORD, record=json.loads(text), upstream=upstream) for text in records_json])


def record_stage_failure(stage: str, phase: str, error: BaseException) -> Path:
    """A stage that makes no record failed with `error` (called while it is handled, for its traceback)."""
    failure = StageFailure(stage=stage, phase=phase, error_type=type(error).__name__, message=str(error)[:2000],
                           traceback=traceback.format_exc(limit=-3)[-4000:])
    return _write(stage, [_line(STAGE_FAILURE, failure=failure.model_dump())])


def clear(stage: str) -> None:
    """The stage succeeded, or the failure its file stood for healed: its failed attempt goes."""
    failure_path(stage).unlink(missing_ok=True)


# --- reading ------------------------------------------------------------------------------------------------

def exists(stage: str) -> bool:
    return failure_path(stage).is_file()


def location(stage: str) -> Path:
    """Where the stage's failed attempt is kept, for a message that names it (it is written only here)."""
    return failure_path(stage)


def read(stage: str) -> list[RecordEntry | StageFailure]:
    """Every entry of the stage's failure file, in order; none when it has no file. A line this format does not
    describe is a FailureFileError naming the file and line."""
    path = failure_path(stage)
    if not path.is_file():
        return []
    return [_entry(line, f"{path}:{number}")
            for number, line in enumerate(path.read_text().splitlines(), start=1) if line.strip()]


def _entry(line: str, source: str) -> RecordEntry | StageFailure:
    try:
        entry = json.loads(line)
    except json.JSONDecodeError as error:
        raise FailureFileError(f"{source}: not JSON: {error}") from None
    if not isinstance(entry, dict) or entry.get("version") != VERSION:
        raise FailureFileError(f"{source}: not a failure entry of version {VERSION} (written by hand or by another "
                               "version of the harness)")
    kind = entry.get("kind")
    if kind == RECORD and set(entry) == {"kind", "version", "record", "upstream"}:
        return RecordEntry(json.dumps(entry["record"]), entry["upstream"], source)
    if kind == STAGE_FAILURE and set(entry) == {"kind", "version", "failure"}:
        try:
            return StageFailure.model_validate(entry["failure"])
        except ValidationError as error:
            raise FailureFileError(f"{source}: invalid stage failure: {error.errors()[0]['msg']}") from None
    raise FailureFileError(f"{source}: unknown failure entry (kind {kind!r}, fields {sorted(entry)})")


def record_entries(stage: str) -> list[RecordEntry]:
    """The probe stage's failed records, as entries; a FailureFileError when its file holds anything else."""
    entries = read(stage)
    records = [entry for entry in entries if isinstance(entry, RecordEntry)]
    if len(records) != len(entries):
        raise FailureFileError(f"{failure_path(stage)}: a stage failure where failed records belong")
    return records


def stage_failure(stage: str) -> StageFailure | None:
    """The failure of a stage that makes no record, when its file holds one."""
    entries = read(stage)
    return entries[0] if entries and isinstance(entries[0], StageFailure) else None


# --- moving between workspaces (the executors): the file as the job's harness wrote it -----------------------

def ship(stage: str, root: Path) -> None:
    """Copy the stage's failure file, when it has one, under `root` at the same relative path (a job's result)."""
    path = failure_path(stage)
    if path.is_file():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, root / path)


def adopt(stage: str, root: Path) -> bool:
    """Make the stage's failure file the one shipped under `root`, when there is one; whether there was."""
    shipped = root / failure_path(stage)
    if not shipped.is_file():
        return False
    write_bytes_atomic(failure_path(stage), shipped.read_bytes())
    return True
