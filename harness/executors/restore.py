"""A finished job's result, brought into the coordinator's workspace through DVC; nothing is computed here.

- Cached stages (prepare): `dvc repro --pull` restores each from the run-cache entry the job pushed
  and writes its lock entry, DVC's own mechanism. It runs with a `python` on PATH that refuses to start
  (stage commands are `python -m harness.stages…`): a stage whose entry is missing, or whose dependencies
  here hash differently from the job's, fails instead of being silently recomputed on the login node.
- Probe stages and the extract stages a job ran: their records, per-sample scores and metrics are
  `cache: false` + `persist: true` outputs, and an extract stage's features folder is `persist` (an interrupted
  extraction keeps its finished entries), which DVC's run-cache skips. Their files come back in the job's
  result; they are installed here, `dvc commit` hashes dependencies, parameters and outputs in this workspace
  and writes the lock entry, and that entry must equal, field for field, the one DVC wrote in the job after
  running the stage. If it does not (this workspace changed while the job ran), the previous outputs and lock
  are put back.
- Failure files: failures/<stage>.jsonl of each of the job's stages is made what the job left (written,
  replaced, or removed for a stage it brought up to date), as a local `dvc repro` would have left it.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import yaml

from harness.core import dvcfiles
from harness.pipeline.dvc_runner import dvc_command, stale_stages
from harness.pipeline.stage_model import addresses, load_stages
from harness.runs import failures

log = logging.getLogger("visbench")
_REFUSE = """#!/bin/sh
echo "executor=slurm: no run-cache entry of a job matches this stage here, and the coordinator never computes a \
stage: $*" >&2
exit 97
"""


def restore_cached_stages(stages: list[str]) -> set[str]:
    """`dvc repro --pull --keep-going STAGES` that can only restore; the stages up to date afterwards."""
    if not stages:
        return set()
    with tempfile.TemporaryDirectory(prefix="visbench-restore-only-") as shim:
        python = Path(shim) / "python"
        python.write_text(_REFUSE)
        python.chmod(python.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        env = {**os.environ, "PATH": shim + os.pathsep + os.environ.get("PATH", "")}
        log.info("$ dvc repro --pull --keep-going <%d stages> (restore from the run-cache only)", len(stages))
        subprocess.run(dvc_command(["repro", "--pull", "--keep-going", *addresses(stages)]), env=env,
                       check=False)
    stale = stale_stages(stages)
    return set() if stale is None else set(stages) - stale


def read_lock(path: Path | None = None) -> dict:
    """Lock entries by stage name: one lock-shaped file's (a job's returned one), or, by default, every lock
    file's of this workspace."""
    if path is None:
        return dvcfiles.read_locks()
    return (yaml.safe_load(path.read_text()) or {}).get("stages", {}) if path.is_file() else {}


def _install(source: Path, target: Path) -> None:
    """Replace `target` by a copy of `source` without a moment where a reader sees half of either."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.incoming-{os.getpid()}"
    if source.is_dir():
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(source, staging)
        if target.exists():
            retired = target.parent / f".{target.name}.retired-{os.getpid()}"
            os.rename(target, retired)
            os.rename(staging, target)
            shutil.rmtree(retired)
        else:
            os.rename(staging, target)
    else:
        shutil.copy2(source, staging)
        os.replace(staging, target)


def _differences(job: dict, here: dict) -> list[str]:
    """What differs between two lock entries of one stage: the command, a parameter, or a path's hash."""
    found = []
    if job.get("cmd") != here.get("cmd"):
        found.append("cmd")
    if job.get("params") != here.get("params"):
        found.append("params")
    for kind in ("deps", "outs"):
        ours = {d["path"]: d for d in here.get(kind, [])}
        for entry in job.get(kind, []):
            if ours.get(entry["path"]) != entry:
                found.append(entry["path"])
        found += sorted(set(ours) - {d["path"] for d in job.get(kind, [])})
    return found


def commit_returned_stages(returned: dict[str, tuple[Path, dict]]) -> dict[str, list[str]]:
    """Install each stage's returned outputs and `dvc commit` them; stage → differences from the job's lock
    entry (empty: committed). `returned`: stage → (the result's files folder, the job's lock entry)."""
    incomplete = {stage: [out["path"] for out in entry.get("outs", []) if not (files / out["path"]).exists()]
                  for stage, (files, entry) in returned.items()}
    incomplete = {stage: missing for stage, missing in incomplete.items() if missing}
    returned = {stage: item for stage, item in returned.items() if stage not in incomplete}
    if not returned:
        return incomplete
    with tempfile.TemporaryDirectory(prefix="visbench-previous-outs-") as keep:
        previous: dict[str, list[tuple[Path, Path | None]]] = {}
        for stage, (files, entry) in returned.items():
            previous[stage] = []
            for out in entry.get("outs", []):
                path = Path(out["path"])
                saved = None
                if path.exists():
                    saved = Path(keep) / stage / path
                    saved.parent.mkdir(parents=True, exist_ok=True)
                    (shutil.copytree if path.is_dir() else shutil.copy2)(path, saved)
                previous[stage].append((path, saved))
                _install(files / path, path)
        specs = load_stages()
        locks = {dvcfiles.lock_of(specs[stage].file) for stage in returned}
        locks_before = {lock: lock.read_bytes() if lock.is_file() else None for lock in locks}
        verdict = _commit_and_compare(returned)
        bad = [stage for stage, found in verdict.items() if found]
        if bad:
            for stage in bad:  # put back what was here: a job's outputs never land on inputs they did not use
                for path, saved in previous[stage]:
                    if saved is not None:
                        _install(saved, path)
                    elif path.is_dir():
                        shutil.rmtree(path)
                    else:
                        path.unlink(missing_ok=True)
            for lock, before in locks_before.items():
                if before is None:
                    lock.unlink(missing_ok=True)
                else:
                    lock.write_bytes(before)
            good = {stage: returned[stage] for stage in returned if stage not in bad}
            verdict.update(_commit_and_compare(good))
    return {**verdict, **incomplete}


def _commit_and_compare(returned: dict[str, tuple[Path, dict]]) -> dict[str, list[str]]:
    if not returned:
        return {}
    log.info("$ dvc commit --force <%d stages returned as files>", len(returned))
    code = subprocess.run(dvc_command(["commit", "--force", "--quiet", *addresses(list(returned))]),
                          check=False).returncode
    lock = read_lock()
    verdict = {}
    for stage, (_, entry) in returned.items():
        here = lock.get(stage)
        verdict[stage] = ["dvc commit failed"] if code != 0 or here is None else _differences(entry, here)
    return verdict


def mirror_failure_files(outcome: dict[str, str], files: Path) -> None:
    """failures/<stage>.jsonl of the job's stages as the job left them: the job's file when it has one; none for
    a stage it brought up to date; and for a stage it never reached (no file, not ok), whatever was here."""
    for stage, state in outcome.items():
        if not failures.adopt(stage, files) and state == "ok":
            failures.clear(stage)
