"""After `dvc repro`: which selected runs failed, why, and the command that retries them.

A probe stage that failed wrote its failed records to failures/<stage>.jsonl. A run whose upstream stage
(prepare, extract) failed never started: it gets a failed record here, built from that stage's failure
file, so it is listed, collected and shown like any other failure.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import re

import yaml

from harness.core import dvcfiles, paths
from harness.core.atomic import write_text_atomic
from harness.core.config import Params, canonical_backbone, load_params, probe_block
from harness.pipeline.plan import Run
from harness.runs.fewshot import stage_shots
from harness.runs.records import Failure, Record, dump_record, read_records
from harness.stages.failures import read_stage_failure

log = logging.getLogger("visbench")


def stages_for(runs: list[Run]) -> list[str]:
    """Every stage the runs need, in an order DVC can run one by one (`--single-item`): the code fingerprints,
    the datasets' prepare stages, the features' extract stages, then the probe stages."""
    prepare = [run.prepare_stage for run in runs]
    extract = [run.extract_stage for run in runs]
    return list(dict.fromkeys([paths.CODE_STAGE, *prepare, *extract, *(run.stage for run in runs)]))


def retry_command(run: Run) -> str:
    return f"visbench-harness grid={run.grid} task={run.task} backbone={canonical_backbone(run.backbone)}"


def _upstream_failure(run: Run) -> dict | None:
    for stage in (run.prepare_stage, run.extract_stage):
        failure = read_stage_failure(stage)
        if failure is not None:
            return failure
    return None


def _probe_spec(run: Run):
    """The run's task spec, importing only the module its probe stage runs (`--code` in dvc.yaml), as the stage
    itself does, instead of every probe module with torch and torchvision (~3 s of the CLI's time after a
    failed run, and ~1 s more at its exit). Anything unexpected: the registry's own discovery."""
    from harness.probes import get_probe

    # a dvc.yaml without that stage (or unreadable), or a module that will not import: get_probe discovers
    with contextlib.suppress(OSError, KeyError, TypeError, ImportError, yaml.YAMLError):
        stages = yaml.load(dvcfiles.dvc_file(run.stage).read_text(),
                           Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        code = re.search(r"--code (\S+)\.py\b", stages["stages"][f"{run.grid}-{run.task}"]["do"]["cmd"])
        module = code.group(1).replace("/", ".") if code else ""
        if module.startswith("harness.probes."):
            importlib.import_module(module)
    return get_probe(run.task)


def record_upstream_failure(run: Run, upstream: dict, params: Params | None = None) -> None:
    """failures/<probe stage>.jsonl for a run that never started because `upstream` failed."""
    from harness.runs.environment import environment_fingerprint

    params = params or load_params()
    spec = _probe_spec(run)
    block = probe_block(params, run.grid, run.task)
    pooling = block.pop("pooling", "default") if spec.feature_mode == "pooled" else "default"
    layers = block.pop("layers", None)
    failure = Failure(phase=upstream["phase"], error_type=upstream["error_type"],
                      message=f"{upstream['stage']} failed: {upstream['message']}"[:2000])
    records = [Record(
        run_id=paths.run_id(run.grid, run.task, run.backbone, shot), backbone=None,
        backbone_name=canonical_backbone(run.backbone), task=run.task, level=spec.level, protocol=spec.protocol,
        protocol_params=block, dataset=None, pooling_requested=pooling, pooling_resolved=None,
        feature_mode=spec.feature_mode, layers=layers, precision=params.settings.precision, image_size=None,
        seed=params.settings.seed if shot is None else shot.seed, metrics={},
        headline_metric=spec.resolve_headline(block),
        higher_is_better={}, tolerances={}, status="failed", failure=failure, duration_s=0.0,
        environment=environment_fingerprint(), k_shot=None if shot is None else shot.k,
    ) for shot in stage_shots(params, run.grid)]
    write_text_atomic(paths.failure_path(run.stage), "".join(dump_record(r) + "\n" for r in records))


def find_failures(runs: list[Run], dvc_failed: bool) -> tuple[list[tuple[Run, str, str]], bool]:
    """(run, phase, message) of every selected run that failed, and whether any of them never started
    because an upstream stage failed: those get their failed records here (failures/<stage>.jsonl), and
    collect must run again so the site shows them."""
    failed, upstream_failed = [], False
    for run in runs:
        own = paths.failure_path(run.stage)
        upstream = _upstream_failure(run)
        if upstream is not None:
            record_upstream_failure(run, upstream)
            upstream_failed = True
            failed.append((run, upstream["phase"], f"{upstream['error_type']}: {upstream['message']}"))
        elif own.is_file():
            record = read_records(own)[0]
            failed.append((run, record.failure.phase, f"{record.failure.error_type}: {record.failure.message}"))
    if dvc_failed and not failed:
        failed = [(run, "dvc", "not brought up to date: DVC could not run it, or its job ended early (output above)")
                  for run in runs
                  if not _locked_and_fresh(run)]
    return failed, upstream_failed


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

    out = subprocess.run(dvc_command(["status", "--json", dvcfiles.address(run.stage)]), capture_output=True,
                         text=True, check=False)
    try:
        return out.returncode == 0 and not json.loads(out.stdout or "{}")
    except json.JSONDecodeError:
        return False
