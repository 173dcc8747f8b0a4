"""`visbench-harness executor=slurm …`: the selected stages as SLURM jobs, DVC as the ledger.

The coordinator (this process, in the project) asks DVC which of the selected stages are not up to date,
submits one job per backbone holding them (`harness.executors.jobs`), each in its own checkout of this
working tree (`harness.executors.checkout`) where the job runs `dvc repro` and pushes to the project's
default DVC remote (`harness.executors.worker`). While jobs run it shows queued/running/done/failed counts
and an ETA; as each job ends it restores that job's stages here through DVC (`harness.executors.restore`),
so this workspace is the only one where `dvc` touches the project. A job that never returned a result
(cancelled, node failure, preempted) leaves its runs missing: re-running the same command submits exactly
those again. Settings, all optional (docs/cluster.md): VISBENCH_SLURM_PARTITION, VISBENCH_SLURM_OPTIONS
(extra sbatch options, e.g. "--account=vision --qos=normal"), VISBENCH_SLURM_SCRATCH (job folders; default
.dvc/tmp/slurm), VISBENCH_SLURM_CONTAINER (a command prefix running the job's Python in an image, e.g.
"apptainer exec --nv visbench.sif"), VISBENCH_SLURM_POLL_S (seconds between polls; default 10),
VISBENCH_SLURM_STUCK_S (give up on jobs that no node can run, every node drained say, after this many seconds;
default 1800).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.core.config import ConfigError
from harness.core.paths import CODE_STAGE
from harness.executors import sbatch
from harness.executors.checkout import Snapshot, job_script, outside_links, take_snapshot
from harness.executors.jobs import Job, Partition, plan_jobs, sbatch_options
from harness.executors.restore import commit_returned_stages, mirror_failure_files, read_lock, restore_cached_stages
from harness.executors.worker import LOCK as RETURNED_LOCK
from harness.executors.worker import RETURNED
from harness.pipeline.dvc_runner import dvc_command, run_dvc, stale_stages
from harness.pipeline.plan import Run
from harness.pipeline.stage_model import addresses
from harness.runs import failures

log = logging.getLogger("visbench")
DEFAULT_SCRATCH = Path(".dvc/tmp/slurm")  # inside the project: the nodes see it wherever they see the project


@dataclass
class Submitted:
    job: Job
    job_dir: Path
    job_id: str
    state: sbatch.JobState | None = None  # the last state squeue reported
    result: str = ""  # set once handled: what came back, for the final table
    ok: bool = False

    @property
    def handled(self) -> bool:
        return bool(self.result)


def run_on_slurm(runs: list[Run]) -> int:
    sbatch.require_slurm()
    if _dvc_output(["remote", "default"]) is None:
        raise ConfigError("executor=slurm needs a default DVC remote that the coordinator and the nodes both reach: "
                          "`dvc remote add -d NAME /shared/path` (or s3://…); see docs/cluster.md")
    # the code fingerprints are this checkout's own (the CLI has just written them): lock them here, so neither the
    # jobs nor the restore below, which computes nothing on the coordinator, find their stage out of date
    if run_dvc(["repro", "--single-item", "--quiet", CODE_STAGE]):
        log.error("executor=slurm: the %s stage failed here (output above); nothing was submitted", CODE_STAGE)
        return 1
    stages = list(dict.fromkeys(s for r in runs for s in (r.prepare_stage, r.extract_stage, r.stage)))
    stale = stale_stages(stages)
    if stale is None:
        log.error("executor=slurm: `dvc status` failed here (output above); nothing was submitted")
        return 1
    jobs = plan_jobs(runs, stale)
    if not jobs:
        log.info("slurm: all %d stages are up to date; nothing to submit", len(stages))
        return 0
    partition = sbatch.partition(os.environ.get("VISBENCH_SLURM_PARTITION") or None)
    snapshot = take_snapshot()
    scratch = Path(os.environ.get("VISBENCH_SLURM_SCRATCH") or DEFAULT_SCRATCH).resolve()
    run_dir = scratch / f"{time.strftime('%Y%m%d-%H%M%S')}-{snapshot.tree[:8]}"
    _push_inputs(jobs, stale)
    submitted = _submit(jobs, run_dir, partition, snapshot)
    started = time.monotonic()
    _watch(submitted, started)
    kept = [s.job.key for s in submitted if s.job_dir.exists()]
    if not kept:
        _remove(run_dir)  # empty by now: each job's folder went once the job was handled
    where = f"the failed jobs' folders ({', '.join(kept)}) kept under {run_dir}" if kept else "job folders removed"
    log.info("slurm: %d jobs in %.0fs (%s)\n%s", len(submitted), time.monotonic() - started, where,
             sbatch.job_table([(s.job_id, s.job.name, s.state, s.result) for s in submitted]))
    return 0 if all(s.ok for s in submitted) else 1


def _dvc_output(args: list[str]) -> str | None:
    out = subprocess.run(dvc_command(args), capture_output=True, text=True, check=False)
    return out.stdout.strip() or None if out.returncode == 0 else None


def _push_inputs(jobs: list[Job], stale: set[str]) -> None:
    """Upstream outputs already up to date here go to the remote, so the jobs restore them instead of
    recomputing (a job that cannot pull them recomputes them: slower, still correct)."""
    inputs = [stage for job in jobs for run in job.runs for stage in (run.prepare_stage, run.extract_stage)]
    fresh = [stage for stage in dict.fromkeys(inputs) if stage not in stale]
    if fresh and run_dvc(["push", "--quiet", *addresses(fresh)]) != 0:
        log.warning("slurm: could not push the up-to-date inputs %s; the jobs will recompute them", ", ".join(fresh))


def _submit(jobs: list[Job], run_dir: Path, partition: Partition, snapshot: Snapshot) -> list[Submitted]:
    root = Path.cwd().resolve()
    raw_params = yaml.safe_load(Path("params.yaml").read_text())
    config_local = Path(".dvc/config.local")
    extra = shlex.split(os.environ.get("VISBENCH_SLURM_OPTIONS", ""))
    ids: dict[str, str] = {}
    submitted = []
    for job in jobs:  # prepare jobs come first, so their ids exist when the jobs waiting on them are submitted
        job_dir = run_dir / job.key
        job_dir.mkdir(parents=True)
        prepare = list(dict.fromkeys(run.prepare_stage for run in job.runs))
        spec = {"stages": job.stages, "probe_stages": job.probe_stages, "returned_stages": job.returned_stages,
                "always_returned": job.always_returned, "prepare": prepare,
                "needs": {run.stage: [run.prepare_stage, run.extract_stage] for run in job.runs},
                "links": outside_links(raw_params, root, job_dir / "checkout")}
        (job_dir / "spec.json").write_text(json.dumps(spec, indent=1))
        if config_local.is_file():
            shutil.copy2(config_local, job_dir / "config.local")
        script = job_script([*sbatch_options(job, partition), *extra], job_dir, root, snapshot,
                            os.environ.get("VISBENCH_SLURM_CONTAINER", "").strip())
        (job_dir / "job.sh").write_text(script)
        try:
            job_id = sbatch.submit(script, [ids[key] for key in job.after])
        except RuntimeError as error:  # e.g. a bad VISBENCH_SLURM_OPTIONS: leave no job of this run behind
            sbatch.cancel(list(ids.values()))
            raise ConfigError(f"{error} (submitting {job.name}; the {len(ids)} jobs submitted before it were "
                              f"cancelled; the script is {job_dir / 'job.sh'})") from None
        ids[job.key] = job_id
        submitted.append(Submitted(job, job_dir, job_id))
        log.info("slurm: submitted %s as job %s: %s", job.name, job_id, ", ".join(job.stages))
    return submitted


def _seconds(elapsed: str) -> float:
    """squeue's elapsed time ([D-]H:MM:SS or M:SS) in seconds."""
    days, _, clock = elapsed.rpartition("-")
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part or 0)
    return total + 86400 * float(days or 0)


def _progress(submitted: list[Submitted], started: float) -> str:
    waiting = [s for s in submitted if not s.handled]
    queued = [s for s in waiting if s.state is None or s.state.state == "PENDING"]
    running = [s for s in waiting if s not in queued]
    done = sum(1 for s in submitted if s.handled and s.ok)
    failed = len(submitted) - len(waiting) - done
    line = f"slurm: {len(queued)} queued · {len(running)} running · {done} done · {failed} failed"
    finished = [s for s in submitted if s.handled and s.state and s.state.elapsed]
    if waiting and finished:
        # seconds per stage of the finished jobs, times the stages each job left has, less what the running
        # ones have done already, spread over as many jobs as are running now
        per_stage = sum(_seconds(s.state.elapsed) for s in finished) / sum(len(s.job.stages) for s in finished)
        done_already = {id(s): _seconds(s.state.elapsed) for s in running if s.state and s.state.elapsed}
        left = sum(max(0.0, per_stage * len(s.job.stages) - done_already.get(id(s), 0.0)) for s in waiting)
        line += f" · ETA ~{left / max(1, len(running)):.0f}s"
    elif waiting:
        line += " · ETA once a job has finished"
    reasons = {s.state.reason for s in queued if s.state} - {"None", "Priority", "Resources", "Dependency", ""}
    if reasons:  # e.g. a drained node: ReqNodeNotAvail, or PartitionDown
        line += f" · pending because: {', '.join(sorted(reasons))}"
    return line + f" ({time.monotonic() - started:.0f}s elapsed)"


def _counts(line: str) -> str:
    return line.split(" · ETA")[0] + (line.split("pending because:")[1].split(" (")[0] if "pending" in line else "")


def _unschedulable(waiting: list[Submitted]) -> bool:
    """Every waiting job pends because the nodes it needs are down, drained or their partition is down."""
    return bool(waiting) and all(s.state is not None and s.state.state == "PENDING"
                                 and s.state.reason.startswith(sbatch.UNAVAILABLE) for s in waiting)


def _watch(submitted: list[Submitted], started: float) -> None:
    poll = float(os.environ.get("VISBENCH_SLURM_POLL_S") or 10)
    stuck_limit = float(os.environ.get("VISBENCH_SLURM_STUCK_S") or 1800)
    shown, shown_at, stuck_since = "", 0.0, None
    # a coordinator stopped by SIGTERM (a session ending, `timeout`) cancels its jobs as Ctrl-C does: nobody
    # would restore what they return, and a re-run submits them again
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while not all(s.handled for s in submitted):
            waiting = [s for s in submitted if not s.handled]
            states = sbatch.job_states([s.job_id for s in waiting])
            if states is not None:
                for s in waiting:
                    s.state = states.get(s.job_id, s.state)
                # gone from squeue (forgotten after MinJobAge) counts as ended: its result, or lack of one, says how
                ended = [s for s in waiting if s.job_id not in states or not states[s.job_id].active]
                if ended:
                    _handle(ended)
            line = _progress(submitted, started)
            # a new line when the counts or a pending reason change, else once a minute (not every ETA tick)
            if _counts(line) != _counts(shown) or time.monotonic() - shown_at > 60:
                log.info("%s", line)
                shown, shown_at = line, time.monotonic()
            waiting = [s for s in submitted if not s.handled]
            stuck_since = (stuck_since or time.monotonic()) if _unschedulable(waiting) else None
            if stuck_since is not None and time.monotonic() - stuck_since > stuck_limit:
                log.error("slurm: no node can run the %d waiting jobs for %.0fs (%s); cancelling them", len(waiting),
                          stuck_limit, waiting[0].state.reason if waiting[0].state else "")
                _cancel_and_handle(waiting)
            elif waiting:
                time.sleep(poll)
    except KeyboardInterrupt:
        waiting = [s for s in submitted if not s.handled]
        log.error("slurm: interrupted; cancelling %d jobs (their runs stay missing until re-run)", len(waiting))
        _cancel_and_handle(waiting)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _cancel_and_handle(waiting: list[Submitted]) -> None:
    """scancel the jobs, then restore whatever some of them may have returned just before."""
    ids = [s.job_id for s in waiting]
    sbatch.cancel(ids)
    time.sleep(1)  # let the controller record the cancellation, so the table shows it
    states = sbatch.job_states(ids) or {}
    for s in waiting:
        s.state = states.get(s.job_id, s.state)
    _handle(waiting)


def _handle(ended: list[Submitted]) -> None:
    """Restore what the ended jobs returned; their runs that did not come back become failed or missing."""
    with_result = {s.job.key: s for s in ended if (s.job_dir / RETURNED / "outcome.json").is_file()}
    outcomes = {key: json.loads((s.job_dir / RETURNED / "outcome.json").read_text())["stages"]
                for key, s in with_result.items()}
    cached = [stage for key, s in with_result.items() for stage in s.job.upstream_stages
              if outcomes[key].get(stage) == "ok"]
    restored = restore_cached_stages(list(dict.fromkeys(cached)))
    returned = {}
    for key, s in with_result.items():
        lock = read_lock(s.job_dir / RETURNED / RETURNED_LOCK)
        files = s.job_dir / RETURNED / "files"
        ok = {stage for stage in s.job.returned_stages if outcomes[key].get(stage) == "ok" and stage in lock}
        for run in s.job.runs:
            # its features come back as files, as the probes' records do, where the job ran the extraction
            if run.extract_stage in ok and all((files / out["path"]).exists()
                                               for out in lock[run.extract_stage].get("outs", [])):
                returned[run.extract_stage] = (files, lock[run.extract_stage])
            if run.stage in ok and outcomes[key].get(run.extract_stage) == "ok":
                returned[run.stage] = (files, lock[run.stage])
    verdict = commit_returned_stages(returned)
    restored |= {stage for stage, differences in verdict.items() if not differences}
    for s in ended:
        if s.job.key in with_result:
            outcome = outcomes[s.job.key]
            mirror_failure_files(outcome, s.job_dir / RETURNED / "files")
            problems = _record_lost_runs(s, outcome, restored, verdict)
            ok = sum(1 for state in outcome.values() if state == "ok")
            s.result = f"{ok}/{len(outcome)} stages ok" + (f", {problems} not restored" if problems else "")
            s.ok = ok == len(outcome) and not problems
        else:
            _report_without_result(s)
        clean_up(s)


def clean_up(s: Submitted) -> None:
    """A handled job's folder: removed whole when its runs came back (everything it made is in the project
    now) or when it ended without a result and without a fault of its own (cancelled, preempted, node
    failure: nothing was measured, a re-run starts afresh). A failed job keeps what explains it: its log
    (named by its failed records), job.sh and spec.json (`sbatch job.sh` re-runs it by hand), the DVC
    settings it got and its result; only its checkout goes (its DVC cache copies features: large)."""
    state = s.state.state if s.state else "UNKNOWN"
    missing = not (s.job_dir / RETURNED).exists() and state not in sbatch.FAILED
    _remove(s.job_dir if s.ok or missing else s.job_dir / "checkout")


def _remove(path: Path, attempts: int = 5) -> None:
    """rmtree, again while it fails: a cancelled job's processes may still be ending and writing there."""
    for attempt in range(attempts):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(1 + attempt)
    log.warning("slurm: could not remove %s", path)


def _record_lost_runs(s: Submitted, outcome: dict, restored: set[str], verdict: dict[str, list[str]]) -> int:
    """Failed records for the job's runs that did not come back without a failure of their own (the job
    broke between stages, or the result could not be restored here); how many there were."""
    lost = 0
    for run in s.job.runs:
        if run.stage not in s.job.stale:
            continue  # up to date before the job: nothing of it was at stake
        if any(failures.exists(stage) for stage in (run.prepare_stage, run.extract_stage, run.stage)):
            continue  # the stage's own failed records say what happened
        if verdict.get(run.stage):
            why = (f"the result of job {s.job_id} does not match this workspace ({', '.join(verdict[run.stage][:3])}"
                   " differ or are missing: edited while the job ran?); re-run to recompute")
        elif outcome.get(run.stage) != "ok":
            why = f"job {s.job_id} ended without bringing the stage up to date; see {_log(s)}"
        elif run.stage in verdict:
            continue  # committed
        else:
            why = f"the outputs of job {s.job_id} could not be restored from the DVC remote (see the dvc output above)"
        _record_executor_failure(run, s, why)
        lost += 1
    return lost


def _report_without_result(s: Submitted) -> None:
    state = s.state.state if s.state else "UNKNOWN"
    if state in sbatch.FAILED:  # the job's own doing (time limit, memory, a crash): failed records
        for run in (run for run in s.job.runs if run.stage in s.job.stale):
            _record_executor_failure(run, s, f"job {s.job_id} ended {state} before returning a result; see {_log(s)}")
        s.result = f"no result ({state}): failed records written"
    else:  # cancelled, node failure, preemption: nothing was measured, the runs are missing
        s.result = f"no result ({state}): runs missing"
        # DependencyNeverSatisfied: a prepare job it waited for failed (its failed records say why)
        reason = f" ({s.state.reason})" if s.state and s.state.reason not in ("", "None") else ""
        log.error("slurm: job %s (%s) ended %s%s without a result; missing until re-run: %s", s.job_id, s.job.name,
                  state, reason, ", ".join(s.job.stale))


def _record_executor_failure(run: Run, s: Submitted, message: str) -> None:
    from harness.executors.report import record_upstream_failure

    error = f"SlurmJob{(s.state.state if s.state else 'Unknown').title().replace('_', '')}"
    record_upstream_failure(run, failures.StageFailure(stage=s.job.name, phase="executor", error_type=error,
                                                       message=message))


def _log(s: Submitted) -> str:
    return str(s.job_dir / f"job-{s.job_id}.log")
