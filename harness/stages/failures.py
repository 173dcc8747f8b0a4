"""Failed attempts, kept apart from what succeeded: `failures/<stage>.jsonl` (git-tracked, never a DVC out).

A stage that fails writes its attempt here and exits 1; the ok record it may have had stays where it was.
A stage that succeeds clears its file. The CLI turns the failure of an upstream stage (prepare, extract) into
a failed record for each run that needed it; `collect` gathers the failed records into
leaderboard/failures.jsonl, which the site shows on each task page with the command that retries.
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path

from harness.core.atomic import write_text_atomic
from harness.core.paths import failure_path


def record_stage_failure(stage: str, phase: str, error: BaseException) -> Path:
    """An upstream stage's failure: phase, error type, message and the end of the traceback, one JSON line."""
    entry = {"stage": stage, "phase": phase, "error_type": type(error).__name__, "message": str(error)[:2000],
             "traceback": traceback.format_exc(limit=-3)[-4000:]}
    path = failure_path(stage)
    write_text_atomic(path, json.dumps(entry, sort_keys=True) + "\n")
    return path


def read_stage_failure(stage: str) -> dict | None:
    path = failure_path(stage)
    if not path.is_file():
        return None
    first = path.read_text().splitlines()[0]
    entry = json.loads(first)
    return entry if "stage" in entry else None


def clear_failure(stage: str) -> None:
    failure_path(stage).unlink(missing_ok=True)
