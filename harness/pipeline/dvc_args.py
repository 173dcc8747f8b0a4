"""`python -m harness.pipeline.dvc_args FILE`: DVC's command line, its arguments read from FILE (a JSON list,
removed once read) instead of this process's argv. `dvc_runner.dvc_command` runs DVC this way when a command
names many stages.

Why: DVC records its process's whole argv (`" ".join(sys.argv)`) in `.dvc/tmp/rwlock` against every path a stage
locks, and reads and rewrites that file several times per stage it checks, so a long command line costs on every
stage. benchmarks/dvc_scale.py measures it: the CLI's no-op of a 100 × 30 project (304 targets, 15 KB of
arguments) on the command line and through this module (docs/performance.md, generated from its results).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def read_args(path: Path) -> list[str]:
    args = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise SystemExit(f"dvc_args: {path} must hold a JSON list of strings (dvc_runner.dvc_command writes it)")
    path.unlink()
    return args


def main() -> int:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m harness.pipeline.dvc_args FILE (a JSON list of DVC's arguments)")
    args = read_args(Path(sys.argv[1]))
    from dvc.cli import main as dvc_main  # DVC's console entry point, as `python -m dvc` calls it

    return dvc_main(args)


if __name__ == "__main__":
    sys.exit(main())
