"""`python -m harness.executors.worker JOB_DIR`: the body of one SLURM job, run by the job's sbatch script in
the job's own checkout of the coordinator's tree (JOB_DIR/checkout).

1. `dvc repro --pull --keep-going CACHED_STAGES` (the prepare and extract stages). Their outputs come
   from the DVC remote (what another job or the coordinator pushed; a stage whose run-cache entry is there is
   restored, never recomputed); a stage whose outputs are in neither runs here.
   Then `dvc repro --keep-going PROBE_STAGES`, without `--pull`, for the probe stages whose upstream stages are
   now up to date. Not with `--pull`: a stage whose dependencies are unchanged but whose outputs are missing
   is then only pulled, never run, and a probe's outputs (`cache: false`) are never in the remote, so a
   deleted record would stay missing ("Pulling data for stage", then "Data and pipelines are up to date").
   Without it, DVC runs such a stage, exactly as the coordinator's `dvc repro` would.
2. `dvc push --run-cache` of the cached stages that are now up to date: their outputs and run-cache entries
   reach the remote, from which the coordinator restores them.
3. The job's result goes to JOB_DIR/returned, written under a temporary name and renamed when complete, so
   a job killed at any point leaves either a whole result or none: `outcome.json` (each stage ok or
   failed, as `dvc status` says afterwards), this checkout's lock entries (every lock file's, as one
   `dvc.lock`-shaped file: stage names are unique across them), the outputs of the probe stages and of the
   extract stages the coordinator found stale that are up to date (records and metrics are `cache: false` +
   `persist: true` outputs and features folders `persist`, which the run-cache skips, so they travel as files)
   and the failure file of every stage of the job (failures/<stage>.jsonl).

Exit status 1 when any stage is not up to date or the push failed: SLURM then marks the job FAILED, and
jobs waiting on it (afterok) are cancelled instead of running on missing inputs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from harness.core import dvcfiles
from harness.executors.checkout import link_outside_paths
from harness.pipeline.dvc_runner import dvc_command, stale_stages
from harness.pipeline.stage_model import addresses
from harness.runs import failures

RETURNED = "returned"
LOCK = "dvc.lock"  # in RETURNED: the entries of every lock file of the job's checkout
_STARTED = time.monotonic()


def _dvc(args: list[str], stages: list[str]) -> int:
    """One DVC command on `stages` (names), its output in the job's log, stamped with the seconds since the job
    started."""
    print(f"[{time.monotonic() - _STARTED:.0f}s] $ dvc {' '.join([*args, *stages])}", flush=True)
    return subprocess.run(dvc_command([*args, *addresses(stages)]), check=False).returncode


def _copy(source: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, destination)
    else:
        shutil.copy2(source, destination)


def _outputs(lock: dict, stage: str) -> list[str]:
    return [out["path"] for out in lock.get(stage, {}).get("outs", [])]


def write_returned(job_dir: Path, outcome: dict, returned_stages: list[str], all_stages: list[str],
                   copy_always: list[str], before: dict | None = None) -> Path:
    """JOB_DIR/returned, complete or absent: built in a temporary folder beside it, then renamed. The outputs of
    `returned_stages` (`persist` outputs, which the run-cache skips) go in as files: those of `copy_always` (probe
    stages, extract stages stale at the coordinator) whenever the stage is up to date, the others (features
    folders) only where the job changed the stage's lock entry from `before`, so an extraction the coordinator
    already has is not copied."""
    import yaml

    lock = dvcfiles.read_locks()
    staging = job_dir / f".{RETURNED}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "files").mkdir(parents=True)
    for stage in returned_stages:
        changed = stage in copy_always or before is None or before.get(stage) != lock.get(stage)
        if outcome["stages"].get(stage) == "ok" and changed:
            for path in _outputs(lock, stage):
                _copy(Path(path), staging / "files" / path)
    for stage in all_stages:
        failures.ship(stage, staging / "files")
    (staging / LOCK).write_text(yaml.safe_dump({"stages": lock}, sort_keys=False))
    (staging / "outcome.json").write_text(json.dumps(outcome, indent=1, sort_keys=True))
    final = job_dir / RETURNED
    shutil.rmtree(final, ignore_errors=True)  # an earlier attempt of a requeued job
    os.rename(staging, final)
    return final


def reproduce(stages: list[str], probe_stages: list[str], needs: dict[str, list[str]]) -> int:
    """Bring the job's stages up to date: the cached ones with `dvc repro --pull` (restored from the remote where
    they can be), then the probe stages with plain `dvc repro` (run where their outputs are missing or stale).
    `needs`: probe stage → its prepare and extract stages; a probe whose upstream stage failed is not started
    (DVC's --keep-going skips it the same way). DVC's first non-zero exit status, else 0."""
    upstream = [stage for stage in stages if stage not in probe_stages]
    probes = [stage for stage in stages if stage in probe_stages]
    code = _dvc(["repro", "--pull", "--keep-going"], upstream) if upstream else 0
    if not probes:
        return code
    needed = list(dict.fromkeys(stage for probe in probes for stage in needs.get(probe, [])))
    stale = stale_stages(needed) if needed else set()
    if stale is None:
        return code or 1
    ready = [probe for probe in probes if not stale & set(needs.get(probe, []))]
    if len(ready) < len(probes):
        print(f"worker: not running {', '.join(p for p in probes if p not in ready)}: "
              f"{', '.join(sorted(stale))} not up to date", flush=True)
    probed = _dvc(["repro", "--keep-going"], ready) if ready else 1
    return code or probed


def run(job_dir: Path) -> int:
    spec = json.loads((job_dir / "spec.json").read_text())
    started = time.time()
    link_outside_paths(spec["links"])  # ../shared/… as from the coordinator
    if (job_dir / "config.local").is_file():  # the coordinator's remote settings (and credentials' paths)
        shutil.copy2(job_dir / "config.local", ".dvc/config.local")
    stages: list[str] = spec["stages"]
    print(f"[0s] worker on {socket.gethostname()}: GPUs granted: {os.environ.get('SLURM_JOB_GPUS') or 'none'} "
          f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})", flush=True)
    checked = list(dict.fromkeys([*spec["prepare"], *stages]))
    before = dvcfiles.read_locks()
    repro = reproduce(stages, spec["probe_stages"], spec.get("needs", {}))
    stale = stale_stages(checked)
    status = {stage: "ok" if stale is not None and stage not in stale else "failed" for stage in checked}
    cached_ok = [s for s in checked if status[s] == "ok" and s not in spec["probe_stages"]]
    push = _dvc(["push", "--run-cache"], cached_ok) if cached_ok else 0
    if push != 0:  # outputs that never reached the remote cannot be restored by the coordinator
        status.update({stage: "failed" for stage in cached_ok})
    # the GPU(s) SLURM granted this job (its stages' records name the one each computed on)
    outcome = {"stages": status, "repro_exit": repro, "push_exit": push, "host": socket.gethostname(),
               "job_id": os.environ.get("SLURM_JOB_ID"), "started": started, "finished": time.time(),
               "gpus": os.environ.get("SLURM_JOB_GPUS") or os.environ.get("CUDA_VISIBLE_DEVICES")}
    write_returned(job_dir, outcome, spec["returned_stages"], checked, spec["always_returned"], before)
    failed = sorted(stage for stage, state in status.items() if state != "ok")
    print(f"[{time.monotonic() - _STARTED:.0f}s] worker: {len(status) - len(failed)} of {len(status)} stages up to date"
          + (f"; not: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m harness.executors.worker JOB_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(Path(sys.argv[1]).resolve()))
