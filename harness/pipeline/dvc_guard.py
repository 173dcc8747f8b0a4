"""`python -m harness.pipeline.dvc_guard PARENT_PID COMMAND...`: run COMMAND (DVC) so that it, and the stage it
runs, die with the CLI that started it (`dvc_runner` starts every DVC command this way).

Why: the CLI starts DVC in a process group of its own, so that Ctrl-C can be handed to DVC and its stage as a
whole (dvc_runner._stop). Then a kill of the CLI's own group (a CI timeout, a closed terminal, `kill -9`) never
reached them: DVC and its stage went on holding DVC's locks, and the immediate re-run failed, blaming a run. This
process leads that group (the CLI starts it with `start_new_session=True`) and asks Linux for SIGTERM when its
parent dies (prctl PR_SET_PDEATHSIG); on SIGTERM, from the kernel or from the CLI, it terminates its whole group,
DVC and the stage included, and exits once DVC has. DVC's rwlock entries of a killed process are removed by the
next DVC command itself (dvc/rwlock.py `_check_blockers`: a pid that no longer exists is auto-removed), and its
repo lock is an fcntl lock, released with the process.

Standard library only: it starts before DVC on every command.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from types import FrameType

PR_SET_PDEATHSIG = 1  # linux/prctl.h


_stopping = False


def _terminate_group(signum: int, frame: FrameType | None) -> None:
    """SIGTERM: the CLI died (the kernel's parent-death signal) or stops DVC; take the whole group down, once (the
    group's signal reaches this process too). Not SIG_IGN: a process started later would inherit it."""
    global _stopping
    if _stopping:
        return
    _stopping = True
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgrp(), signal.SIGTERM)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """SIGINT: handed to the group by the CLI for DVC and its stage; this process waits for DVC's exit. A
    Python handler, not SIG_IGN, so that processes started later do not inherit an ignored SIGINT."""


def die_with_parent(parent: int) -> None:
    """SIGTERM to this process when `parent` dies (Linux); already dead: now."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the CLI died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        raise SystemExit("usage: python -m harness.pipeline.dvc_guard PARENT_PID COMMAND... (dvc_runner starts it)")
    if os.getpgrp() != os.getpid():  # killpg of another's group would take its owner down too
        raise SystemExit("dvc_guard: must lead its process group (start it with start_new_session=True)")
    signal.signal(signal.SIGTERM, _terminate_group)
    signal.signal(signal.SIGINT, _ignore)
    die_with_parent(int(argv[0]))
    if _stopping:
        return 128 + signal.SIGTERM
    child = subprocess.Popen(argv[1:])
    if _stopping:  # the signal came while DVC was starting: the group's SIGTERM may have missed it
        child.terminate()
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
