"""Running DVC from the CLI: one `dvc repro` for every selected stage, with progress and an ETA read from
DVC's own output, and `--keep-going` so one failed stage never stops the others."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time

log = logging.getLogger("visbench")
_RUNNING = re.compile(r"^Running stage '(?P<stage>[^']+)'")
_SKIPPED = re.compile(r"^Stage '(?P<stage>[^']+)' (didn't change, skipping|is cached)")
# DVC's refusals when another DVC process holds the workspace: its repo lock (.dvc/tmp/lock) or a path's rwlock
_BUSY = re.compile(r"^ERROR: (Unable to acquire lock|'.+' is busy)")


class WorkspaceBusy(RuntimeError):
    """Another DVC command holds this workspace's lock, so `dvc repro` checked no stage and nothing ran."""


def dvc_command(args: list[str]) -> list[str]:
    # DVC's own CLI with params.yaml parsed once per process instead of once per stage (harness.dvc_fast)
    return [sys.executable, "-m", "harness.dvc_fast", *args]


def run_dvc(args: list[str]) -> int:
    log.info("$ dvc %s", " ".join(args))
    return subprocess.run(dvc_command(args), check=False).returncode


def repro_with_progress(targets: list[str]) -> int:
    """`dvc repro --single-item --keep-going TARGETS` (the targets already hold every upstream stage, in
    order), echoing DVC's output and a `[done/total]` line with elapsed time and ETA whenever a stage runs."""
    args = ["repro", "--single-item", "--keep-going", *targets]
    log.info("$ dvc %s", " ".join([*args[:3], f"<{len(targets)} stages>"]))
    started = time.monotonic()
    seen: set[str] = set()
    ran = 0
    busy = False
    total = len(targets)
    with subprocess.Popen(dvc_command(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as process:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            busy = busy or bool(_BUSY.match(line))
            running, skipped = _RUNNING.match(line), _SKIPPED.match(line)
            match = running or skipped
            if match is None or match["stage"] in seen:
                continue
            seen.add(match["stage"])
            total = max(total, len(seen))
            if running:
                ran += 1
                elapsed = time.monotonic() - started
                rate = elapsed / ran
                log.info("[%d/%d] %s (elapsed %.0fs; ETA %.0fs if every remaining stage runs)", len(seen), total,
                         match["stage"], elapsed, rate * (total - len(seen) + 1))
        code = process.wait()
    log.info("dvc repro: %d stages checked, %d ran, in %.0fs", len(seen), ran, time.monotonic() - started)
    if code and busy and not seen:
        # not a failure of any run: none was looked at, and `dvc status` per run would race the other process
        raise WorkspaceBusy("another DVC command holds this workspace's lock (.dvc/tmp/lock), so nothing ran: run "
                            "the same command again once it has finished (DVC runs one command per workspace)")
    return code
