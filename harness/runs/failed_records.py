"""A failed run's record: made one way (`failed_record`), kept in its probe stage's failure file.

Three places end with a failed record: a run that raised (`harness.runs.probe_run`), a stage whose outputs could
not be written (`harness.stages.probe`), and a run that never started because its prepare or extract stage
failed (`harness.executors.report`). All build it here, so a failed record never carries a metric, a per-sample
file or a warning, and all keep it through harness.runs.failures, the failure files' one owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.runs import failures
from harness.runs.records import Failure, Record, RecordError, dump_record, parse_record

# what a failed run never has: nothing it measured can reach a board
_NOTHING_MEASURED: dict[str, Any] = {"status": "failed", "metrics": {}, "higher_is_better": {}, "tolerances": {},
                                     "samples": None, "warnings": []}


@dataclass(frozen=True)
class FailedRun:
    """One failed run of a probe stage and, when it never started, the stage whose failure it stands for."""

    record: Record
    upstream: str | None = None


def failed_record(failure: Failure, **fields: Any) -> Record:
    """The failed record of the run `fields` describe (run id, backbone, task, protocol, duration, ...)."""
    return Record(**fields, **_NOTHING_MEASURED, failure=failure)


def as_failed(record: Record, failure: Failure) -> Record:
    """`record` (an ok run whose outputs could not be written, say) as a failed attempt with `failure`."""
    return failed_record(failure, **record.model_dump(exclude={*_NOTHING_MEASURED, "failure"}))


def record_failed_runs(stage: str, records: list[Record], upstream: str | None = None) -> Path:
    """The probe stage's failed attempt: `records` (all failed), replacing whatever attempt it had. `upstream`: the
    stage whose failure they stand for (their runs never started)."""
    return failures.write_record_entries(stage, [dump_record(r) for r in records], upstream)


def failed_runs(stage: str) -> list[FailedRun]:
    """The probe stage's failed runs (none without a failure file); a RecordError for a file that does not read,
    as for any record file."""
    try:
        entries = failures.record_entries(stage)
    except failures.FailureFileError as error:
        raise RecordError(str(error)) from None
    return [FailedRun(parse_record(e.record_json, e.source), e.upstream) for e in entries]


def failed_records(stage: str) -> list[Record]:
    return [run.record for run in failed_runs(stage)]
