"""After `dvc repro`: which selected runs failed, why, and the command that retries them.

A probe stage that failed wrote its failed records to failures/<stage>.jsonl. A run whose upstream stage
(prepare, extract) failed never started: it gets a failed record here, built from that stage's failure
file, so it is listed, collected and shown like any other failure. Failure files are read and written through
harness.runs.failures (their one owner) and harness.runs.failed_records.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import re
from pathlib import Path

import yaml

from harness.core import dvcfiles, paths
from harness.core.atomic import write_text_atomic
from harness.core.config import ConfigError, Params, load_params, probe_block
from harness.pipeline.plan import Run
from harness.pipeline.stage_model import read_stages
from harness.runs import failed_records, failures
from harness.runs.failed_records import FailedRun, failed_record
from harness.runs.failures import StageFailure
from harness.runs.fewshot import stage_shots
from harness.runs.records import Failure

log = logging.getLogger("visbench")


def stages_for(runs: list[Run]) -> list[str]:
    """Every stage the runs need, in an order DVC can run one by one (`--single-item`): the code fingerprints,
    the datasets' prepare stages, the features' extract stages, then the probe stages."""
    prepare = [run.prepare_stage for run in runs]
    extract = [run.extract_stage for run in runs]
    return list(dict.fromkeys([paths.CODE_STAGE, *prepare, *extract, *(run.stage for run in runs)]))


LOCKED_OUTS = Path(".dvc/tmp/visbench-locked-outs.json")  # locked_outs(), kept while no lock file changes


def readable_locks() -> dict[str, dict]:
    """Every lock file's entries (dvcfiles.read_locks); a lock file cut short or edited by hand is a one-line
    ConfigError naming it and the fix, before DVC starts (DVC's own refusal is a traceback of its parser)."""
    entries: dict[str, dict] = {}
    for lock in dvcfiles.lock_files():
        try:
            entries.update(dvcfiles.read_lock_file(lock))
        except (yaml.YAMLError, AttributeError, UnicodeDecodeError) as error:
            mark = getattr(error, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise ConfigError(f"{lock} is not a lock file DVC can read{where}: restore it with `git checkout -- "
                              f"{lock}`, or delete it (every stage it locked then runs again)") from None
    return entries


def locked_outs() -> dict[str, list[list]]:
    """Each locked stage's outputs as [path, size or None (a folder)], read through readable_locks (so a lock
    file that will not parse is refused in one line) only when a lock file changed since the last time: parsing
    every lock file costs the repository's CLI ~0.5 s, its no-op run ~1.3 s in all."""
    files = dvcfiles.lock_files()
    key = [[str(path), stat.st_mtime_ns, stat.st_size] for path in files for stat in [path.stat()]]
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        cached = json.loads(LOCKED_OUTS.read_text())
        if cached["key"] == key:
            return cached["outs"]
    outs = {stage: [[out.get("path", ""), None if "nfiles" in out else out.get("size")]
                    for out in entry.get("outs", []) or []]
            for stage, entry in readable_locks().items() if isinstance(entry, dict)}
    with contextlib.suppress(OSError):  # a read-only workspace: read again next time
        LOCKED_OUTS.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(LOCKED_OUTS, json.dumps({"key": key, "outs": outs}))
    return outs


def damaged_runs(params: Params, selected: list[Run], outs: dict[str, list[list]]) -> list[tuple[Run, str]]:
    """The runs outside `selected` whose probe stage's outputs, as its dvc.lock entry names them, are missing or
    not the size it records (a record deleted or cut short by hand), each with the first such path. Collect
    refuses to write a corpus without them, so every run brings their stages back up to date (DVC finds them
    stale) instead of failing until someone runs exactly that one. `outs`: locked_outs(). Stat calls only: no
    file is read or hashed."""
    from harness.pipeline.plan import select_runs

    chosen = {run.stage for run in selected}
    broken = {}
    for stage, stage_outs in outs.items():
        if stage in chosen or "@" not in stage or stage.startswith(("prepare-", "extract-")):
            continue
        for path, size in stage_outs:
            found = Path(path)
            if not found.exists() or (size is not None and found.is_file() and found.stat().st_size != size):
                broken[stage] = path
                break
    if not broken:
        return []
    return [(run, broken[run.stage]) for run in select_runs(params)[0] if run.stage in broken]


def retry_command(run: Run) -> str:
    return f"visbench-harness grid={run.grid} task={run.task} backbone={run.key.backbone.name}"


def _upstream_failure(run: Run) -> StageFailure | None:
    for stage in (run.prepare_stage, run.extract_stage):
        failure = failures.stage_failure(stage)
        if failure is not None:
            return failure
    return None


def _probe_spec(run: Run):
    """The run's task spec, importing only the module its probe stage runs (`--code` in dvc.yaml), as the stage
    itself does, instead of every probe module with torch and torchvision (~3 s of the CLI's time after a
    failed run, and ~1 s more at its exit). Anything unexpected: the registry's own discovery."""
    from harness.probes import get_probe

    # a dvc.yaml without that stage (or unreadable), or a module that will not import: get_probe discovers
    with contextlib.suppress(OSError, KeyError, TypeError, ValueError, ImportError, yaml.YAMLError):
        document = yaml.load(run.file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        code = re.search(r"--code (\S+)\.py\b", read_stages({run.file: document})[run.stage].cmd)
        module = code.group(1).replace("/", ".") if code else ""
        if module.startswith("harness.probes."):
            importlib.import_module(module)
    return get_probe(run.task)


def record_upstream_failure(run: Run, upstream: StageFailure, params: Params | None = None) -> None:
    """failures/<probe stage>.jsonl for a run that never started because `upstream` failed."""
    from harness.runs.environment import environment_fingerprint

    params = params or load_params()
    spec = _probe_spec(run)
    block = probe_block(params, run.grid, run.task)
    pooling = block.pop("pooling", "default") if spec.feature_mode == "pooled" else "default"
    layers = block.pop("layers", None)
    failure = Failure(phase=upstream.phase, error_type=upstream.error_type,
                      message=f"{upstream.stage} failed: {upstream.message}"[:2000])
    records = [failed_record(
        failure, run_id=run.key.at(shot).run_id, backbone=None,
        backbone_name=run.key.backbone.name, task=run.task, level=spec.level, protocol=spec.protocol,
        protocol_params=block, dataset=None, pooling_requested=pooling, pooling_resolved=None,
        feature_mode=spec.feature_mode, layers=layers, precision=params.settings.precision, image_size=None,
        seed=params.settings.seed if shot is None else shot.seed, headline_metric=spec.resolve_headline(block),
        duration_s=0.0, environment=environment_fingerprint(), k_shot=None if shot is None else shot.k,
    ) for shot in stage_shots(params, run.grid)]
    failed_records.record_failed_runs(run.stage, records, upstream=upstream.stage)


def find_failures(runs: list[Run], dvc_failed: bool) -> tuple[list[tuple[Run, str, str]], bool]:
    """(run, phase, message) of every selected run that failed, and whether failures/ changed here, so that
    collect must run again for the site: a run that never started because an upstream stage failed gets its
    failed record (failures/<stage>.jsonl), and one whose upstream failure has healed loses it
    (clear_healed_upstream_failures)."""
    failed, changed = [], bool(clear_healed_upstream_failures(runs))
    for run in runs:
        upstream = _upstream_failure(run)
        if upstream is not None:
            record_upstream_failure(run, upstream)
            changed = True
            failed.append((run, upstream.phase, f"{upstream.error_type}: {upstream.message}"))
        elif failures.exists(run.stage):
            record = failed_records.failed_records(run.stage)[0]
            failed.append((run, record.failure.phase, f"{record.failure.error_type}: {record.failure.message}"))
    if dvc_failed and not failed:
        failed = [(run, "dvc", "not brought up to date: DVC could not run it, or its job ended early (output above)")
                  for run in runs
                  if not _locked_and_fresh(run)]
    return failed, changed


def _upstream_cause(run: Run, failed: FailedRun) -> str | None:
    """The upstream stage (prepare, extract) whose failure `failed` stands for (record_upstream_failure wrote
    it), or None: the probe stage's own failure, or a job of an executor that never returned."""
    return failed.upstream if failed.upstream in (run.prepare_stage, run.extract_stage) else None


def clear_healed_upstream_failures(runs: list[Run]) -> list[Run]:
    """Remove failures/<probe stage>.jsonl where it stands for an upstream stage's failure that has healed: that
    stage is ok again (its own failure file cleared) and the probe stage is up to date. Only the probe stage
    itself ever cleared the file, and DVC skips it when the upstream stage, re-run once the disk was freed,
    gives the same outputs: every later run then exited 1 and the site listed a failure that was gone. The
    runs whose file was removed."""
    from harness.pipeline.dvc_runner import stale_stages

    healed: dict[str, tuple[Run, str]] = {}
    for run in runs:
        if not failures.exists(run.stage) or _upstream_failure(run) is not None:
            continue
        try:
            causes = {_upstream_cause(run, failed) for failed in failed_records.failed_runs(run.stage)}
        except (OSError, ValueError):  # not a file the harness wrote: left for the probe stage to replace
            continue
        if len(causes) == 1 and None not in causes:
            healed[run.stage] = (run, causes.pop())
    asked = list(dict.fromkeys([*healed, *(cause for _, cause in healed.values())]))
    stale = stale_stages(asked, echo=False) if healed else set()
    if stale is None:  # DVC could not tell: the files stay, and the next run looks again
        return []
    cleared = []
    for stage, (run, cause) in healed.items():
        if stage in stale or cause in stale:  # the upstream stage too: ok again means it ran since, and is locked
            continue
        failures.clear(stage)
        log.info("%s: %s is ok again and the run is up to date; its failed attempt is cleared", stage, cause)
        cleared.append(run)
    return cleared


def print_failures(failed: list[tuple[Run, str, str]], selected: int) -> None:
    """The table that ends a run with failures."""
    if not failed:
        return
    log.error("FAILED: %d of %d selected runs (their earlier ok records, if any, are kept)", len(failed), selected)
    width = max(len(run.stage) for run, _, _ in failed)
    for run, phase, message in failed:
        first = message.splitlines()[0] if message else ""
        log.error("  %-*s  %-13s  %s", width, run.stage, phase, first[:160])
    log.error("retry exactly these with the same command, or one at a time, e.g.: %s", retry_command(failed[0][0]))


def report_failures(runs: list[Run], dvc_failed: bool) -> list[tuple[Run, str, str]]:
    failed, _ = find_failures(runs, dvc_failed)
    print_failures(failed, len(runs))
    return failed


def _locked_and_fresh(run: Run) -> bool:
    """Whether DVC considers the run's stage done (used only when DVC failed without a failure file)."""
    import subprocess

    from harness.pipeline.dvc_runner import dvc_command

    out = subprocess.run(dvc_command(["status", "--json", run.address]), capture_output=True,
                         text=True, check=False)
    try:
        return out.returncode == 0 and not json.loads(out.stdout or "{}")
    except json.JSONDecodeError:
        return False
