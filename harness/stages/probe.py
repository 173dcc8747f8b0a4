"""`python -m harness.stages.probe GRID TASK BACKBONE --code PROBE_MODULE --dataset D --features GRID`:
run one probe stage on cached features and write its record(s), per-sample scores and DVC metrics file.

A grid with a `fewshot` spec runs every (k, seed) into the stage's folder (`RunKey.fewshot_dir`). The stage's
outputs are written only when every run in it succeeded: otherwise its failed records go to
failures/<stage>.jsonl, whatever ok record the stage had stays untouched, and the process exits 1.

From Python (`harness.run(..., head_file=...)`), the stage scores a saved head instead of training one: the same
record, samples and metrics files, written the same way, and no head file.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.atomic import write_all_atomic
from harness.core.config import ConfigError, Params, load_params, probe_block
from harness.core.registry import load_code
from harness.runs import failed_records, failures
from harness.runs.environment import require_committed_code
from harness.runs.fewshot import stage_shots
from harness.runs.intervals import metric_interval
from harness.runs.probe_run import ProbeJob, run_probe
from harness.runs.records import Failure, Record, dump_record, parse_record
from harness.runs.reproduction import reproduces, same_head
from harness.runs.samples import parse_samples
from harness.stages import common

if TYPE_CHECKING:
    from harness.core.run_key import Shot
    from harness.heads.file import SavedHead

log = logging.getLogger("visbench")


def run(job: ProbeJob, params: Params, code: str | None = None, saved_head: SavedHead | None = None) -> list[Record]:
    """Every run of the stage; outputs written only if all succeeded (else `StageFailed` after recording them).
    With `saved_head`, its one run scores that head (`harness.heads.file`) instead of training one."""
    from harness.probes import validate_probe_params

    if code:
        load_code(code)
    try:
        probe_params = validate_probe_params(job.task, probe_block(params, job.grid, job.task))
    except ValueError as error:
        raise ConfigError(str(error)) from None
    shots = stage_shots(params, job.grid)
    if saved_head is not None and shots != [None]:
        raise ConfigError(f"{job.stage}: a saved head is scored by a stage without few-shot points")
    results = []
    for shot in shots:
        # A task that trains nothing has no few-shot protocol: run_probe raises ConfigError at once.
        outcome = run_probe(job, params, probe_params, shot, saved_head)
        record, samples_text, head_bytes = outcome.record, outcome.samples_text, outcome.head_bytes
        log.info("%s: %s %s", record.run_id, record.status,
                 f"{record.headline_metric}={record.headline:.4f}" if record.status == "ok" else record.failure)
        results.append((shot, record, samples_text, head_bytes))
    records = [record for _, record, _, _ in results]
    failed = [r for r in records if r.status == "failed"]
    if failed:
        failed_records.record_failed_runs(job.stage, failed)
        first = failed[0].failure
        message = first.message.splitlines()[0] if first.message else ""
        raise common.StageFailed(f"{job.stage}: {len(failed)} of {len(records)} run(s) failed; first: "
                                 f"{first.phase}: {first.error_type}: {message}")
    writes: list[tuple[Path, bytes | str]] = []
    headline_samples = None  # the single run's per-sample text, for its metrics' interval
    for index, (shot, record, samples_text, head_bytes) in enumerate(results):
        key = job.key.at(shot)
        record_path, samples_path, head_path = key.record_path, key.samples_path, key.head_path
        if reproduces(record, samples_text, record_path, samples_path) and same_head(head_path, head_bytes):
            # the checkout's record stands: same numbers, so its files stay byte for byte (harness.runs.reproduction)
            log.info("%s: reproduced: kept the committed record", record.run_id)
            records[index] = parse_record(record_path.read_text(encoding="utf-8"), str(record_path))
            headline_samples = samples_path.read_text(encoding="utf-8") if records[index].samples else None
            continue
        headline_samples = samples_text
        if samples_text is not None:
            writes.append((samples_path, samples_text))
        if head_bytes is not None:  # the trained head beside its record (harness.load_probe loads it)
            writes.append((head_path, head_bytes))
        writes.append((record_path, dump_record(record) + "\n"))
    metrics = headline_metrics(records[0], headline_samples) if shots == [None] else fewshot_metrics(records)
    writes.append((job.key.metrics_path, json.dumps(metrics, indent=1, sort_keys=True)))
    try:
        # one unit: a full or read-only disk leaves every file (an ok record above all) as it was
        write_all_atomic(writes)
    except OSError as error:
        raise common.StageFailed(_write_failed(job, records, error)) from None
    if shots != [None]:
        _remove_stale_runs(job, shots)
    failures.clear(job.stage)
    return records


def _write_failed(job: ProbeJob, records: list[Record], error: OSError) -> str:
    """Record the write that failed as the stage's failed attempt (failures/), and say in one line which file
    and what fixes it: the next plain run writes everything."""
    where = error.filename or "the stage's outputs"
    line = f"{where}: {error.strerror or error}: {_WRITE_FIXES.get(error.errno or 0, 'fix it and re-run')}"
    failure = Failure(phase="write", error_type=type(error).__name__, message=line)
    try:
        failed_records.record_failed_runs(job.stage, [failed_records.as_failed(r, failure) for r in records])
    except OSError as second:  # the same full disk, most likely: the line still says what to do
        attempt = failures.location(job.stage)
        return f"{line} (nor could the failed attempt be recorded in {attempt}: {second.strerror})"
    return line


_WRITE_FIXES = {errno.ENOSPC: "free space and re-run", errno.EDQUOT: "free space (disk quota) and re-run",
                errno.EROFS: "make the filesystem writable and re-run",
                errno.EACCES: "make the folder writable and re-run", errno.EPERM: "make the folder writable and re-run"}


def headline_metrics(record: Record, samples_text: str | None) -> dict[str, Any]:
    """The stage's DVC metrics: the headline and its 95% bootstrap interval (as the site computes it) under fixed
    keys, so `dvc metrics show` reads one row of four columns per run and `dvc metrics diff` shows which
    leaderboard numbers moved (every metric is in the record beside it). No interval without per-sample rows."""
    metrics: dict[str, Any] = {"metric": record.headline_metric, "headline": record.headline}
    if record.samples is not None and samples_text is not None:
        _, columns = parse_samples(samples_text)
        interval = metric_interval(record, record.headline_metric, columns)
        if interval is not None:
            metrics |= {"low": interval.low, "high": interval.high}
    return metrics


def _remove_stale_runs(job: ProbeJob, shots: list[Shot]) -> None:
    """Leave the stage's folder holding exactly this run's files, as DVC expects of an out (a k or seed
    dropped from params.yaml must not linger; the outs are `persist`, so DVC does not clear them)."""
    keys = [job.key.at(shot) for shot in shots]
    wanted = {path for key in keys for path in (key.record_path, key.samples_path, key.head_path)}
    for path in sorted(job.key.fewshot_dir.iterdir()):
        if path not in wanted and path.is_file() and path.name.endswith((".json", ".samples.csv", ".safetensors")):
            path.unlink()


def fewshot_metrics(records: list[Record]) -> dict[str, str | float | None]:
    """The few-shot stage's DVC metrics: the headline's name and, per k ("k4"), its mean over the seeds, or
    null when any seed failed (never a mean over the survivors)."""
    by_k: dict[int, list[Record]] = {}
    for record in records:
        by_k.setdefault(record.k_shot, []).append(record)
    summary: dict[str, str | float | None] = {"metric": records[0].headline_metric}
    for k, group in sorted(by_k.items()):
        ok = all(r.status == "ok" for r in group)
        name = group[0].headline_metric
        summary[f"k{k}"] = math.fsum(r.metrics[name] for r in group) / len(group) if ok else None
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.stages.probe", description=__doc__)
    parser.add_argument("grid")
    parser.add_argument("task")
    parser.add_argument("backbone")
    parser.add_argument("--code", help="the module that registers the task's probe")
    parser.add_argument("--dataset", required=True, help="the dataset the task reads")
    parser.add_argument("--features", required=True, help="the grid whose extract stage made the features")

    def body(a: argparse.Namespace) -> None:
        # before any work: a record written into results/ names the commit that produced it (`verify` and the
        # API call `run` into their own folders, so only the stage DVC runs is held to it)
        require_committed_code()
        run(ProbeJob(a.grid, a.task, a.backbone, a.dataset, a.features), load_params(), a.code)

    return common.stage_main("probe", parser, body, argv)


if __name__ == "__main__":
    sys.exit(main())
