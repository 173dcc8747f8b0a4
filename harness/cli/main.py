"""`visbench-harness`: run grids through DVC, list what exists, verify the corpus, build the site.

    visbench-harness                                   the default grid, then the site
    visbench-harness grid=all                          every grid whose data is here
    visbench-harness task=classification backbone=efficientnet_lite0
    visbench-harness task=retrieval probes.retrieval.recall_at=[1,10]
                                                       an experiment (dvc exp), never the committed corpus
    visbench-harness grid=default dry_run=true         the plan and what DVC would run
    visbench-harness executor=slurm grid=default       one SLURM job per backbone, results back through DVC
                                                       (docs/cluster.md)
    visbench-harness device=cuda:1 grid=scenes         compute on that device (auto | cpu | cuda | cuda:N;
                                                       default: settings.device, auto = a GPU if present)
    visbench-harness devices=0,1 grid=all              one process per GPU, the backbones split between them
    visbench-harness list                              backbones (and their weights), tasks, datasets, grids
    visbench-harness help TASK                         a task's protocol, parameters, data layout and metrics
    visbench-harness verify [grid=… task=… backbone=…] [tolerance=1e-6]
                                                       re-run stages, diff against the corpus (exact, or
                                                       within a tolerance: float rounding on another CPU)
    visbench-harness pipeline [check]                  regenerate dvc.yaml from params.yaml (or check it)
    visbench-harness site                              regenerate docs/ from the corpus and build HTML
    visbench-harness release v1 [remote=origin]        freeze the downloads as docs/releases/v1; again: publish
    visbench-harness task=classification backbone=efficientnet_lite0 data=PATH [limit=N] [stems=DIR]
                                                       your own data, without DVC, into user/ (never the corpus)
    visbench-harness score backbone=NAME board=B-1550   your backbone on a committed board's task, data and
                                                       protocol, ranked beside its rows (user/, never the corpus)
    visbench-harness promote run=RUN_ID                add a user run's dataset and grid to params.yaml
    visbench-harness publish run=RUN_ID to=DIR|dvc:REMOTE|hub:REPO
                                                       a trained head, its record and a model card
    visbench-harness cache stats | cache gc [dry_run=true]
                                                       feature-cache entries, bytes, hit rates; drop unused ones

Exit status: 0 when every selected run is ok, 1 when any failed (a table of failures ends the output and
re-running the same command retries exactly those) or another DVC command held the workspace (nothing ran),
2 for a bad command or params.yaml (nothing ran).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.core.config import ConfigError, load_params, parse_overrides
from harness.core.registry import UnknownNameError
from harness.pipeline.dvc_runner import WorkspaceBusy
from harness.pipeline.plan import DEFAULT_GRID
from harness.runs.records import RecordError

log = logging.getLogger("visbench")
RUN_KEYS = ["allow_dirty", "backbone", "build_site", "device", "devices", "dry_run", "executor", "force", "grid",
            "probes", "task"]
USER_DATA_KEYS = ("data", "limit", "stems")  # a run on your own folder (harness.cli.user), not through DVC
RUN_BOOLEANS = ("allow_dirty", "build_site", "dry_run", "force")
VERIFY_KEYS = ["backbone", "grid", "task", "tolerance"]
COMMANDS = ["cache", "list", "pin", "pipeline", "promote", "publish", "release", "score", "site", "verify"]


def _dvc(*args: str) -> int:
    from harness.pipeline.dvc_runner import run_dvc

    return run_dvc(list(args))


def _selected_runs(overrides: dict, default_grid: str | None = None, check: bool = True):
    """Params and the runs the `grid`/`task`/`backbone` overrides select, logging skipped grids. `check`: check
    params.yaml against the registries first (run_grid does it through `pipeline.ensure_fresh`, or, for a dry run,
    which writes nothing, by rendering dvc.yaml in memory)."""
    from harness.pipeline.plan import select_runs

    params = load_params()
    if check:
        from harness.pipeline.checks import check_params

        check_params(params)
    grid = overrides.get("grid", default_grid)
    if grid == "all":
        grid = None
    runs, notes = select_runs(params, grid=grid, task=overrides.get("task"), backbone=overrides.get("backbone"))
    if not check:
        from harness.pipeline import generate as pipeline
        from harness.pipeline.documents import render

        if overrides.get("dry_run", False):
            # a dry run writes nothing, not even the tracked dvc.yaml files a plugin or a params.yaml edit changed
            stale = [str(path) for path, text in render(params).items()
                     if not path.is_file() or path.read_text() != text]
            if stale:
                log.info("note: %d dvc.yaml file(s) out of date with params.yaml (%s%s); a dry run leaves them, a "
                         "real run (or `visbench-harness pipeline`) regenerates them, so DVC's status below is of "
                         "the files as they are", len(stale), ", ".join(stale[:3]), ", …" if len(stale) > 3 else "")
        elif pipeline.ensure_fresh(params):
            log.info("dvc.yaml regenerated from params.yaml")
    for note in notes:
        log.info("note: %s", note)
    return params, runs


def run_grid(overrides: dict) -> int:
    from harness.cli.container_mounts import unmounted_outputs_warning
    from harness.cli.cpu_bf16 import slow_bf16_warning
    from harness.cli.run_summary import summary_lines
    from harness.executors import check_executor, run_stages
    from harness.executors.report import find_failures, print_failures, stages_for

    executor = check_executor(overrides)
    _check_committed_code(overrides)
    from harness.executors.report import locked_outs

    locks = locked_outs()  # a lock file cut short: one line naming it, before the pipeline or DVC reads it
    default = None if {"grid", "task", "backbone"} & set(overrides) else DEFAULT_GRID
    params, runs = _selected_runs(overrides, default, check=False)
    from harness.pipeline.checks import layout_problems

    # a folder the selected datasets read, in a layout its spec does not describe: refused before any stage
    problems = layout_problems(params, list(dict.fromkeys(run.dataset for run in runs)))
    if problems:
        raise ConfigError("; ".join(problems))
    devices = _check_devices(overrides, params.settings.device, executor)
    if "probes" in overrides:  # checked against the selected runs' probes before anything is planned or run
        from harness.executors.experiments import validated_overrides

        settings = validated_overrides(params, runs, overrides["probes"])
        from harness.executors.experiments import scoped_runs

        # only the runs the override changes: the others would re-run nothing and read as tied
        runs, others = scoped_runs(params, runs, overrides["probes"])
        if others:
            log.info("note: %d selected runs left out: their grids set the overridden key themselves (%s)",
                     len(others), ", ".join(sorted({run.grid for run in others})))
    if not overrides.get("dry_run", False) and "probes" not in overrides:
        from harness.executors.report import damaged_runs

        # a record deleted or cut short by hand: collect refuses a corpus without it, so any run restores it
        for run, path in damaged_runs(params, runs, locks):
            log.info("note: %s is missing or not the size dvc.lock records: %s runs again to restore it", path,
                     run.stage)
            runs.append(run)
    log.info("plan: %d runs across grids %s", len(runs), ", ".join(sorted({r.grid for r in runs})))
    build_site = overrides.get("build_site", True)
    kept = ["results", "leaderboard", "docs", *(["site"] if build_site else [])]
    unmounted = unmounted_outputs_warning(kept, dry_run=overrides.get("dry_run", False))
    if unmounted:
        log.warning("warning: %s", unmounted)
    slow = slow_bf16_warning(params.settings.precision, executor)
    if slow:
        log.warning("warning: %s", slow)
    if "probes" in overrides:
        from harness.executors.experiments import run_experiment

        return run_experiment(runs, settings, dry_run=overrides.get("dry_run", False))
    targets = stages_for(runs)
    if overrides.get("dry_run", False):
        # `dvc status` names what changed without running anything, and, unlike `dvc repro --dry`,
        # works on a fresh clone whose upstream outputs do not exist yet.
        from harness.pipeline.dvc_runner import show_status

        return show_status(targets)
    # Locally, `dvc status` of the selected runs' stages (in dependency order, then collect and site), then one
    # `dvc repro --single-item` of those out of date and their readers (--single-item: collect must not pull in
    # the runs this invocation did not select).
    code, collected = run_stages(executor, runs, targets, devices, force=overrides.get("force", False))
    failed, upstream_failed = find_failures(runs, dvc_failed=code != 0)
    harness_errors = []
    if upstream_failed or not collected:
        # runs whose upstream stage failed got their failed records just now (or the stages ran elsewhere):
        # collect them for the site
        if _dvc("repro", "--single-item", "collect", "site"):
            harness_errors.append("collect/site")
    elif code and not failed:
        harness_errors.append("dvc repro")
    from harness.pipeline import generate as pipeline

    if pipeline.ensure_fresh(params):  # the grid files now declare the metrics files this run wrote
        log.info("dvc.yaml regenerated: it declares the new runs' metrics for dvc metrics show")
    if build_site and not harness_errors and build_html():
        harness_errors.append("mkdocs build")
    # the numbers of the runs that are ok, then (ending the output) the table of those that failed
    failed_stages = {run.stage for run, _, _ in failed}
    for line in summary_lines([run for run in runs if run.stage not in failed_stages], params):
        log.info("%s", line)
    print_failures(failed, len(runs))
    if harness_errors:
        log.error("finished with harness errors in: %s", ", ".join(harness_errors))
    if failed or harness_errors:
        return 1
    where = "records in leaderboard/corpus.jsonl" + (", site in site/" if build_site else "")
    where += " (inside this container only)" if unmounted else (" (mkdocs serve to browse)" if build_site else "")
    log.info("all %d runs ok; %s", len(runs), where)
    return 0


def _check_committed_code(overrides: dict) -> None:
    """A run from code that differs from HEAD is refused before anything runs (a record names the commit that
    produced it); `allow_dirty=true` lets its probe stages run (they read VISBENCH_ALLOW_DIRTY) and their records
    say git_dirty. A dry run writes nothing, so it is never refused."""
    from harness.runs.environment import ALLOW_DIRTY_ENV, require_committed_code

    if overrides.get("allow_dirty", False):
        os.environ[ALLOW_DIRTY_ENV] = "1"
    elif not overrides.get("dry_run", False):
        require_committed_code(allow_dirty=False)


def _check_devices(overrides: dict, setting: str, executor: str) -> list[str]:
    """The devices the stages compute on, checked on this machine before anything runs (a CUDA device torch
    cannot see is a one-line error, exit 2). `devices=0,1`: one device per process, backbones split between them
    (`harness.executors.parallel`). Without either argument, `settings.device` (`requested_device`). An argument
    is explicit, so it beats settings in the stages DVC starts too: it is handed on to them (`hand_on_device`;
    with `devices=`, the first device, where the probes run, and the parallel executor gives each extraction
    process its own)."""
    from harness.core.devices import (
        DeviceError,
        hand_on_device,
        parse_device,
        parse_devices,
        requested_device,
        resolve_device,
    )

    if "device" in overrides and "devices" in overrides:
        raise ConfigError("give device= (one device) or devices= (one process per device), not both")
    try:
        if "devices" in overrides:
            if executor != "local":
                raise ConfigError("devices= runs local processes; on SLURM each job gets one GPU (drop devices=)")
            devices = parse_devices(overrides["devices"])
        else:
            devices = [parse_device(overrides["device"]) if "device" in overrides else requested_device(setting)]
        if executor == "local":
            for device in devices:
                if device != "auto" and device != "cpu":  # only a GPU needs torch to say whether it is here
                    resolve_device(device)
    except DeviceError as error:
        raise ConfigError(str(error)) from None
    if "device" in overrides or "devices" in overrides:
        hand_on_device(devices[0])
    return devices


SITE_STAMP = Path("site/.visbench-source")  # what the built site was built from


def _site_source_key() -> str:
    import hashlib

    digest = hashlib.sha256(Path("mkdocs.yml").read_bytes())
    for path in sorted(Path("docs").rglob("*")):
        if path.is_file():
            digest.update(str(path).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def build_html() -> int:
    """`mkdocs build --strict` into site/, unless site/ was already built from exactly this docs/ tree."""
    key = _site_source_key()
    if SITE_STAMP.is_file() and SITE_STAMP.read_text() == key:
        log.info("site/ is up to date with docs/")
        return 0
    log.info("$ mkdocs build --strict -d site")
    mkdocs = shutil.which("mkdocs") or "mkdocs"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's end-of-life banner, on every build
    code = subprocess.run([mkdocs, "build", "--strict", "--quiet", "-d", "site"], check=False, env=env).returncode
    if code == 0:
        SITE_STAMP.write_text(key)
    return code


def _listed_costs() -> dict:
    """Each architecture's parameters and FLOPs as the committed benchmark counted them, img/s as the corpus's records
    timed it (the boards' numbers); none where this checkout has neither."""
    from harness.core import paths
    from harness.leaderboard import connect_corpus
    from harness.leaderboard.queries.throughput import measured_rates
    from harness.leaderboard.sources.costs import backbone_costs, with_record_rates
    from harness.runs.records import read_records

    costs = backbone_costs(Path.cwd())
    if not costs or not paths.CORPUS.is_file():
        return costs
    con = connect_corpus(read_records(paths.CORPUS))
    try:
        return with_record_rates(costs, measured_rates(con))
    finally:
        con.close()


def list_everything() -> int:
    from harness.backbones import describe_weights, list_backbones
    from harness.backbones.registry import declared_pin
    from harness.leaderboard.sources.costs import cost_cell, cost_of
    from harness.pipeline.checks import check_params, missing_requirements
    from harness.probes import PROBES, get_probe

    params = load_params()
    check_params(params)
    print("backbones:")
    from harness.backbones.by_name import STANDARD_ROWS
    from harness.backbones.cards import card, describe
    from harness.backbones.lock import read_lock

    locked = read_lock()
    costs = _listed_costs()
    for name in list_backbones():
        # what each name is pinned to, its licence and training data, and its cost: all data, nothing is built
        if name in locked:  # by name: what backbones.lock pins
            where = f"{locked[name].spec}: {locked[name].weights_pin().short()}"
        else:
            pin = declared_pin(name)
            where = describe_weights(name) + ("" if pin is None else f"; pinned to {pin.short()}")
        described = card(name)
        fields = None if described is None else describe(described)
        about = "" if fields is None else f"; licence {fields['licence']}; trained on {fields['training data']}"
        cost = cost_of(name, costs)
        priced = "" if cost is None else f"; cost {cost_cell(cost)} at {cost.input}²"
        print(f"  {name:<28} {where}{about}{priced}")
    unpinned = [alias for alias in STANDARD_ROWS if alias not in locked]
    if unpinned:
        print("standard rows not pinned here (`visbench-harness pin backbone=NAME` with the file in your hub cache):")
        for alias in unpinned:
            print(f"  {alias:<28} {STANDARD_ROWS[alias].spec}")
    print("tasks:")
    for name in PROBES.names():
        spec = get_probe(name)
        print(f"  {name:<22} level={spec.level:<5} protocol={spec.protocol:<34} headline={spec.headline}")
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
    from harness.cli.verify import format_checks, verify_runs

    tolerance = _tolerance(overrides.get("tolerance", "0"))
    params, runs = _selected_runs(overrides)
    log.info("plan: verify the committed records of %d stages by re-running them%s", len(runs),
             f" (|difference| up to {tolerance:g} accepted on every metric and per-sample score)" if tolerance else "")
    checks = verify_runs(runs, params, tolerance=tolerance)
    print(format_checks(checks))
    bad = [c for c in checks if not c.ok]
    if bad:
        log.error("%d of %d metrics differ beyond their tolerance", len(bad), len(checks))
        return 1
    records = len({c.run_id for c in checks})
    log.info("all %d metrics of %d records (%d stages) agree with the corpus", len(checks), records, len(runs))
    return 0


def _tolerance(value: str) -> float:
    try:
        tolerance = float(value)
    except ValueError:
        tolerance = -1.0
    if not 0 <= tolerance < 1:  # NaN fails this too
        raise ConfigError(f"tolerance={value}: expected a number from 0 up to 1 (e.g. 1e-6: float rounding on "
                          "another CPU)")
    return tolerance


def site() -> int:
    from harness.stages import site as site_stage

    site_stage.run()
    return build_html()


def _venv_first_on_path() -> None:
    """Stage commands say `python -m harness.stages…`; make that (and mkdocs) this environment's, even
    when the CLI was started as .venv/bin/visbench-harness without activating the venv."""
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def main(argv: list[str] | None = None) -> int:
    _venv_first_on_path()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help", "help"):
        if args[0] == "help" and len(args) == 2:  # help TASK: the task's protocol, parameters, data and metrics
            from harness.cli.task_help import task_help

            try:
                print(task_help(args[1]))
            except (UnknownNameError, KeyError) as error:
                print(f"visbench-harness: error: {error.args[0] if error.args else error}", file=sys.stderr)
                return 2
            return 0
        print(__doc__)
        return 0
    command = args.pop(0) if args and "=" not in args[0] else "run"
    try:
        given = [a.partition("=")[0] for a in args]
        if any(key in ("checkpoint", "checkpoints") or key.startswith("checkpoints.") for key in given):
            # checkpoint=PATH is the Python API's keyword (the offline-weights errors name both ways:
            # harness.backbones.weights.own_weights_hint): say where the command line takes it instead of "unknown key"
            raise ConfigError("checkpoint=PATH is the Python API's (create_backbone(NAME, checkpoint=PATH)); on the "
                              "command line put the file in params.yaml as `checkpoints: {NAME: PATH}` and run again")
        if command == "run" and any(a.partition("=")[0] in USER_DATA_KEYS for a in args):
            from harness.cli.user import run_user_data_command

            return run_user_data_command(args)
        if command == "run":
            return run_grid(parse_overrides(args, RUN_KEYS, RUN_BOOLEANS))
        if command == "verify":
            return verify(parse_overrides(args, VERIFY_KEYS))
        if command == "pipeline":
            from harness.pipeline import generate as pipeline

            return pipeline.main(args)
        if command == "release":
            extra = dict(a.split("=", 1) for a in args[1:] if "=" in a)
            if not args or "=" in args[0] or len(extra) != len(args) - 1 or set(extra) - {"remote"}:
                raise ConfigError("usage: visbench-harness release vN [remote=NAME] (cut release vN, e.g. v1; "
                                  "run it again once docs/ is committed to publish the site as vN)")
            from harness.stages import release

            release.run(args[0], extra.get("remote"))
            return build_html()
        if command in ("cache", "pin", "promote", "publish", "score"):
            from harness.cli import user as user_cli

            return user_cli.COMMANDS[command](args)
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
    except KeyboardInterrupt:
        print("visbench-harness: interrupted. Stages that finished keep their outputs and dvc.lock entries; the one "
              "that was running left no record: the same command goes on from there", file=sys.stderr)
        return 130
    except WorkspaceBusy as error:  # nothing ran, yet nothing was wrong with the command: exit 1, as for a failure
        print(f"visbench-harness: {error}", file=sys.stderr)
        return 1
    except RecordError as error:  # a record file edited or cut short by hand; only the harness writes them
        print(f"visbench-harness: error: {error}; restore the file (`git checkout -- FILE`, or `dvc checkout` for a "
              "record under results/) or re-create it with `visbench-harness`", file=sys.stderr)
        return 2


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
