"""Running DVC from the CLI: `dvc status` of every selected stage, then one `dvc repro` of those out of date and
those reading their outputs, with progress and an ETA read from DVC's own output, and `--keep-going` so one
failed stage never stops the others."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.core import dvcfiles
from harness.pipeline.stage_model import StageSpec, load_stages, with_downstream

log = logging.getLogger("visbench")
STOP_GRACE_S = 3  # for the interrupted stage to exit; DVC then goes on to the next one, so its group is terminated
_RUNNING = re.compile(r"^Running stage '(?P<stage>[^']+)'")
_SKIPPED = re.compile(r"^Stage '(?P<stage>[^']+)' (didn't change, skipping|is cached)")
# DVC's refusals when another DVC process holds the workspace: its repo lock (.dvc/tmp/lock) or a path's rwlock,
# an ERROR, or with --keep-going a WARNING for each stage it then skips; a path's rwlock refusal may come inside
# "failed to reproduce 'STAGE': ..." (how DVC 3 reports it for a stage it had started to check)
_BUSY = re.compile(r"^(?:ERROR|WARNING): (?:failed to reproduce '[^']+': )?(Unable to acquire lock|'.+' is busy)")
# Arguments longer than this (joined) reach DVC through a file (harness.pipeline.dvc_args), not its argv: DVC
# rewrites its whole argv into .dvc/tmp/rwlock for every path of every stage it checks
ARGV_LIMIT = 1024
FINAL_STAGES = ("collect", "site")  # the corpus from every record, then the site from it: run only in that order


class WorkspaceBusy(RuntimeError):
    """Another DVC command holds this workspace's lock, so `dvc repro` checked no stage and nothing ran."""


def dvc_command(args: list[str]) -> list[str]:
    """The command that runs `dvc ARGS` with this venv's own DVC, whatever PATH holds (a container's or the
    system's `dvc` may be another version). Long argument lists (many stages named) go through a file that the
    command reads and removes (harness.pipeline.dvc_args), so DVC's argv stays short."""
    if len(" ".join(args)) <= ARGV_LIMIT:
        return [sys.executable, "-m", "dvc", *args]
    descriptor, path = tempfile.mkstemp(prefix="visbench-dvc-args-", suffix=".json")
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump(args, file)
    return [sys.executable, "-m", "harness.pipeline.dvc_args", path]


def dvc_env() -> dict[str, str]:
    """The environment DVC runs in: .dvc/config's `site_cache_dir = .dvc/site_cache` is relative to the working
    directory, and DVC's temporary experiment workspaces (`dvc exp run --temp`, how probe overrides run) change
    directory and then fail with "unable to open database file"; DVC's own DVC_SITE_CACHE_DIR names the same
    folder as an absolute path, which works everywhere."""
    env = dict(os.environ)
    if not env.get("DVC_SITE_CACHE_DIR") and os.path.isdir(".dvc"):
        env["DVC_SITE_CACHE_DIR"] = os.path.abspath(os.path.join(".dvc", "site_cache"))
    return env


def guarded(command: list[str]) -> list[str]:
    """`command` run by harness.pipeline.dvc_guard: started with `start_new_session=True`, it leads a process
    group of its own (DVC and the stage it runs), which dies with this process, however this process dies."""
    return [sys.executable, "-m", "harness.pipeline.dvc_guard", str(os.getpid()), *command]


def run_dvc(args: list[str]) -> int:
    """`dvc ARGS`, its output to ours; DVC's exit status. Ctrl-C (KeyboardInterrupt) stops DVC's group first."""
    log.info("$ dvc %s", " ".join(args))
    with subprocess.Popen(guarded(dvc_command(args)), start_new_session=True, env=dvc_env()) as process:
        try:
            return process.wait()
        except KeyboardInterrupt:
            _stop(process)
            raise


def stale_stages(stages: list[str], specs: Mapping[str, StageSpec] | None = None, echo: bool = True
                 ) -> set[str] | None:
    """The stages (names) of `stages` that `dvc status` reports as not up to date; None when DVC could not tell
    (its output then printed, unless not `echo`). `specs`: the pipeline's stages, loaded if not given."""
    if not stages:
        return set()
    out = subprocess.run(dvc_command(["status", "--json", *grouped(stages, specs=specs)]), capture_output=True,
                         text=True, check=False, env=dvc_env())
    if out.returncode != 0:
        if echo:
            print(out.stdout + out.stderr, flush=True)
        return None
    try:
        return {dvcfiles.stage_of(address) for address in json.loads(out.stdout or "{}")}
    except json.JSONDecodeError:
        return None


def show_status(targets: list[str]) -> int:
    """`dvc status` of `targets` as DVC prints it (a dry run's report), asked as JSON first: DVC's printed
    `dvc status`, when it has nothing to report, loads every stage of the project (`repo.index`, in
    dvc/commands/status.py) only to choose which "up to date" line to print, so the printed form is asked of
    the stale stages alone, and with none stale the line is ours (benchmarks/dvc_scale.py's `cli dry_run`
    measures the command). DVC's exit status, or 1 when it could not tell (its output printed)."""
    specs = load_stages()
    stale = stale_stages(targets, specs)
    if stale is None:
        return 1
    if not stale:
        print(f"dvc status: all {len(targets)} stages up to date", flush=True)
        return 0
    return run_dvc(["status", *grouped([t for t in targets if t in stale], specs=specs)])


def repro_with_progress(targets: list[str], force: Collection[str] = ()) -> int:
    """Bring `targets` (the selected stages with every upstream one, in an order DVC can run them one by one) up
    to date: `dvc status` first, then `dvc repro --single-item --keep-going` of the stale stages and of those
    reading what they write (stage_model.with_downstream), in the same order, echoing DVC's output and a
    `[done/total]` line with elapsed time and ETA whenever a stage runs. The stages in `force` (`force=true`: the
    selected runs' own stages) run whatever their status, through a `dvc repro --force` of their own between the
    stale stages upstream of them and those downstream.

    Why ask `dvc status` first: a stage DVC reproduces and finds unchanged costs it more bookkeeping than a
    stage whose status it reports (its rwlock taken four times instead of once), so with nothing to run the
    CLI never starts `dvc repro` at all, and with a few stale stages it reproduces only those and their
    readers (benchmarks/dvc_scale.py measures both). Where `dvc status` fails, `dvc repro` checks every target
    itself and says why.

    Ctrl-C (or SIGTERM) stops DVC and the stage it runs, then raises KeyboardInterrupt. DVC alone would not stop:
    it ignores an interrupt while a stage runs and, with --keep-going, starts the next stage once that one died
    of it. So DVC runs in its own process group, which the interrupt is handed to as a whole, led by
    harness.pipeline.dvc_guard, which takes the group down when this process dies without a word (`kill -9` of
    the CLI's group, a CI timeout): DVC and its stage never outlive the CLI holding DVC's locks."""
    specs = load_stages()
    stale = stale_stages(targets, specs, echo=False)
    if stale is None:
        log.info("dvc status could not tell which stages are out of date; dvc repro checks all %d", len(targets))
        stale = set(targets)
    todo = with_downstream(targets, stale | set(force), specs) if stale or force else []
    if not todo:
        log.info("dvc status: all %d stages up to date; nothing to reproduce", len(targets))
        return 0
    log.info("dvc status: %d of %d stages out of date%s; dvc repro of those and the %d reading their outputs",
             len(stale & set(targets)), len(targets), f", {len(force)} forced" if force else "",
             len(todo) - len(stale | set(force)))
    # DVC forces every target of a `dvc repro --force`, so forced stages go in a call of their own, in order; and
    # collect and site go in one without --keep-going: with --single-item, DVC's --keep-going runs the site on
    # the old corpus after collect refused to write one (a record lost), and locks both as if all were well
    batches = [(key, list(group)) for key, group in
               itertools.groupby(todo, key=lambda t: (t in force, t in FINAL_STAGES))]
    progress = _Progress(len(todo))
    code = 0
    for (forced, final), batch in batches:
        args = ["repro", "--single-item", *([] if final else ["--keep-going"]), *(["--force"] if forced else []),
                "--glob", *grouped(batch, patterns=True, specs=specs)]
        log.info("$ dvc %s", " ".join([*args[:args.index("--glob") + 1], f"<{len(batch)} stages>"]))
        code = _repro(args, progress) or code
    log.info("dvc repro: %d stages checked, %d ran, in %.0fs", len(progress.seen), progress.ran,
             time.monotonic() - progress.started)
    return code


@dataclass
class _Progress:
    """What the `[done/total]` lines count across the `dvc repro` calls of one command."""

    total: int
    started: float = field(default_factory=time.monotonic)
    seen: set[str] = field(default_factory=set)
    ran: int = 0

    def line(self, line: str) -> None:
        running, skipped = _RUNNING.match(line), _SKIPPED.match(line)
        match = running or skipped
        stage = dvcfiles.stage_of(match["stage"]) if match else None
        if stage is None or stage in self.seen:
            return
        self.seen.add(stage)
        self.total = max(self.total, len(self.seen))
        if running:
            self.ran += 1
            elapsed = time.monotonic() - self.started
            log.info("[%d/%d] %s (elapsed %.0fs; ETA %.0fs if every remaining stage runs)", len(self.seen),
                     self.total, stage, elapsed, elapsed / self.ran * (self.total - len(self.seen) + 1))


def _repro(args: list[str], progress: _Progress) -> int:
    """One `dvc repro` (see repro_with_progress), its output echoed and counted; DVC's exit status."""
    busy = False
    seen_before = len(progress.seen)
    main_thread = threading.current_thread() is threading.main_thread()  # only it may set signal handlers
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler) if main_thread else None
    try:
        with subprocess.Popen(guarded(dvc_command(args)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, bufsize=1, start_new_session=True, env=dvc_env()) as process:
            assert process.stdout is not None
            try:
                for line in process.stdout:
                    sys.stdout.write(line)
                    busy = busy or bool(_BUSY.match(line))
                    progress.line(line)
                code = process.wait()
            except KeyboardInterrupt:
                _stop(process)
                raise
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    if code and busy:
        reused = clear_reused_lock_pids()
        message = ""
        if reused:
            pid, command = reused[0]
            message = (f"{RWLOCK} named pid {pid}, which is now another process ({command[:80]}): the DVC that held "
                       "it died and its pid was reused (a container's pids start again at 1), and DVC refused the "
                       "stages it blocked; its entries are cleared: run the same command again")
        if len(progress.seen) == seen_before:
            # not a failure of any run: none was looked at, and `dvc status` per run would race the other process
            what = f"the stages after the {seen_before} checked did not run" if seen_before else "nothing ran"
            raise WorkspaceBusy(message or f"another DVC command holds this workspace's lock (.dvc/tmp/lock), so "
                                f"{what}: run the same command again once it has finished (DVC runs one command "
                                "per workspace)")
        if message:
            log.error("%s", message)
    return code


RWLOCK = Path(".dvc/tmp/rwlock")  # DVC's record of the paths each running DVC process holds (dvc/rwlock.py)


def clear_reused_lock_pids() -> list[tuple[int, str]]:
    """Remove from DVC's rwlock the entries whose pid is now another process: one whose command line is not the
    command the entry records, or that started after the file was last written. It cannot have written them, so
    their DVC is dead, its pid reused. DVC drops the entries of a pid that no longer exists (dvc/rwlock.py
    `_check_blockers`) but takes any live process for their holder, and refused every later command as busy.
    Edited under DVC's own guard of the file (rwlock.lock). The pids and what each is now."""
    import psutil
    import zc.lockfile

    try:
        written = RWLOCK.stat().st_mtime
        guard = zc.lockfile.LockFile(str(RWLOCK.with_name("rwlock.lock")))
    except (OSError, zc.lockfile.LockError):  # no lock file, or DVC is editing it right now: nothing cleared
        return []
    try:
        lock = json.loads(RWLOCK.read_text())
        reused: dict[int, str] = {}
        entries = [*lock.get("write", {}).values(), *(i for infos in lock.get("read", {}).values() for i in infos)]
        for info in entries:
            with contextlib.suppress(psutil.Error, TypeError, ValueError, AttributeError, IndexError):
                process = psutil.Process(int(info["pid"]))
                command = " ".join(process.cmdline())
                # DVC records its holder's argv joined (dvc/stage/decorators.py); the holder's command line ends
                # with its last argument, whatever python or wrapper started it
                other = not command.endswith(str(info["cmd"]).split(" ")[-1])
                if other or process.create_time() > written + 1:  # a second of slack for the clocks
                    reused[int(info["pid"])] = command or process.name()
        if not reused:
            return []
        lock["write"] = {path: info for path, info in lock.get("write", {}).items() if info.get("pid") not in reused}
        lock["read"] = {path: kept for path, infos in lock.get("read", {}).items()
                        if (kept := [i for i in infos if i.get("pid") not in reused])}
        RWLOCK.write_text(json.dumps(lock))
        return sorted(reused.items())
    except (OSError, ValueError, TypeError, AttributeError, KeyError):  # not DVC's format: DVC says so itself
        return []
    finally:
        guard.close()


def grouped(targets: list[str], patterns: bool = False, specs: Mapping[str, StageSpec] | None = None
            ) -> list[str]:
    """Stage names as DVC is best told them (generate.dvc_targets): a row (one backbone's file in a grid) whose
    stages are all named as its file, the rest by their addresses; `patterns`: for `dvc repro --glob`."""
    from harness.pipeline.targets import dvc_targets

    return dvc_targets(targets, load_stages() if specs is None else specs, glob=patterns)


def _stop(process: subprocess.Popen) -> None:
    """Interrupt DVC's process group (the running stage exits, writing nothing half-way), then, if DVC has gone
    on to another stage instead of exiting, terminate the group: DVC's locks are released with its process."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait()
