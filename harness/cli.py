"""`visbench-harness`: run grids through DVC, list what exists, verify the corpus, build the site.

    visbench-harness                                   every grid whose data is here, then the site
    visbench-harness task=classification backbone=efficientnet_lite0
    visbench-harness grid=default dry_run=true        print the plan only
    visbench-harness list
    visbench-harness verify [grid=… task=… backbone=…]
    visbench-harness site                              regenerate docs/ from the corpus and build HTML
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness.config import ConfigError, load_params, parse_overrides
from harness.registry import UnknownNameError

log = logging.getLogger("visbench")
RUN_KEYS = ["backbone", "build_site", "dry_run", "grid", "task"]
VERIFY_KEYS = ["backbone", "grid", "task"]
COMMANDS = ["list", "site", "verify"]


def _dvc(*args: str) -> int:
    command = [sys.executable, "-m", "dvc", *args]
    log.info("$ dvc %s", " ".join(args))
    return subprocess.run(command, check=False).returncode


def _truthy(value: object) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


def _selected_runs(overrides: dict):
    """Params and the runs the `grid`/`task`/`backbone` overrides select, logging skipped grids."""
    from harness.plan import select_runs

    params = load_params()
    runs, notes = select_runs(params, grid=overrides.get("grid"), task=overrides.get("task"),
                              backbone=overrides.get("backbone"))
    for note in notes:
        log.info("note: %s", note)
    return params, runs


def run_grid(overrides: dict) -> int:
    _, runs = _selected_runs(overrides)
    groups: dict[tuple[str, str], list] = {}
    for run in runs:
        groups.setdefault((run.grid, run.backbone), []).append(run)
    log.info("plan: %d runs (%d backbone groups) across grids %s", len(runs), len(groups),
             ", ".join(sorted({r.grid for r in runs})))
    for (grid, backbone), group in groups.items():
        log.info("  %s / %s: %s", grid, backbone, ", ".join(r.task for r in group))
    if _truthy(overrides.get("dry_run", False)):
        # `dvc status` names what changed without running anything, and, unlike `dvc repro --dry`,
        # works on a fresh clone whose upstream outputs do not exist yet.
        return _dvc("status", *[r.stage for r in runs])
    started, failures = time.monotonic(), []
    for index, ((grid, backbone), group) in enumerate(groups.items(), start=1):
        t0 = time.monotonic()
        code = _dvc("repro", *[r.stage for r in group])
        if code:
            failures.append(f"{grid}/{backbone}")
        elapsed = time.monotonic() - started
        eta = elapsed / index * (len(groups) - index)
        log.info("[%d/%d] %s / %s %s in %.0fs; elapsed %.0fs, ETA %.0fs", index, len(groups), grid, backbone,
                 "FAILED" if code else "done", time.monotonic() - t0, elapsed, eta)
    log.info("phase: collect + site")
    # --single-item: collect what exists now without pulling in the runs this invocation did not select
    if _dvc("repro", "--single-item", "collect", "site"):
        failures.append("collect/site")
    if _truthy(overrides.get("build_site", True)) and build_html():
        failures.append("mkdocs build")
    if failures:
        log.error("finished with harness errors in: %s", ", ".join(failures))
        return 1
    log.info("finished in %.0fs; records in leaderboard/corpus.jsonl, site in site/ (mkdocs serve to browse)",
             time.monotonic() - started)
    return 0


def build_html() -> int:
    log.info("$ mkdocs build --strict -d site")
    mkdocs = shutil.which("mkdocs") or "mkdocs"
    return subprocess.run([mkdocs, "build", "--strict", "--quiet", "-d", "site"], check=False).returncode


def list_everything() -> int:
    from harness.backbones import list_backbones
    from harness.plan import missing_requirements
    from harness.probes import PROBES, get_probe

    params = load_params()
    print("backbones:")
    for name in list_backbones():
        print(f"  {name}")
    print("tasks:")
    for name in PROBES.names():
        spec = get_probe(name)
        print(f"  {name:<16} level={spec.level:<5} protocol={spec.protocol:<34} headline={spec.headline}")
    print("datasets:")
    for name, spec in params.datasets.items():
        print(f"  {name:<18} kind={spec['kind']}")
    print("grids:")
    for name, grid in params.grids.items():
        missing = missing_requirements(params, name)
        state = f"needs {', '.join(missing)}" if missing else "ready"
        print(f"  {name:<10} {len(grid.backbones)} backbones × {len(grid.tasks)} tasks ({state})")
        for task, dataset in grid.tasks.items():
            print(f"      {task} on {dataset}: {', '.join(grid.backbones)}")
    return 0


def verify(overrides: dict) -> int:
    from harness.verify import format_checks, verify_runs

    params, runs = _selected_runs(overrides)
    log.info("plan: verify the committed records of %d stages by re-running them", len(runs))
    checks = verify_runs(runs, params)
    print(format_checks(checks))
    bad = [c for c in checks if not c.ok]
    if bad:
        log.error("%d of %d metrics differ beyond their tolerance", len(bad), len(checks))
        return 1
    records = len({c.run_id for c in checks})
    log.info("all %d metrics of %d records (%d stages) agree with the corpus", len(checks), records, len(runs))
    return 0


def site() -> int:
    from harness import stages

    stages.site()
    return build_html()


def _venv_first_on_path() -> None:
    """Stage commands say `python -m harness.stages`; make that (and mkdocs) this environment's, even
    when the CLI was started as .venv/bin/visbench-harness without activating the venv."""
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def main(argv: list[str] | None = None) -> int:
    _venv_first_on_path()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0
    command = args.pop(0) if args and "=" not in args[0] else "run"
    try:
        if command == "run":
            return run_grid(parse_overrides(args, RUN_KEYS))
        if command == "verify":
            return verify(parse_overrides(args, VERIFY_KEYS))
        if command in ("list", "site"):
            if args:
                raise ConfigError(f"`{command}` takes no arguments; got {' '.join(args)}")
            return list_everything() if command == "list" else site()
        raise ConfigError(
            f"unknown command {command!r}; valid commands: {', '.join(COMMANDS)}, or key=value overrides "
            f"({', '.join(RUN_KEYS)})"
        )
    except (ConfigError, UnknownNameError, KeyError, FileNotFoundError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"visbench-harness: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
