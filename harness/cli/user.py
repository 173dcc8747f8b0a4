"""The CLI's commands beyond the pipeline: runs on your own data, promote, publish, cache.

Each validates its keys and values before anything runs (an unknown value is a one-line error naming the
valid ones; the CLI exits 2) and returns the exit status: 0 ok, 1 a run failed.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

from harness.core.config import PARAMS_FILE, ConfigError, load_params, parse_overrides
from harness.core.registry import unknown_name_message
from harness.pipeline.plan import name_list

log = logging.getLogger("visbench")
DATA_KEYS = ["backbone", "build_site", "data", "device", "limit", "stems", "task"]


def run_user_data_command(args: list[str]) -> int:
    """`task=T[,T] [backbone=B[,B]] data=PATH [limit=N] [stems=DIR] [build_site=false]`, without DVC."""
    from harness.runs.own_data import dataset_spec
    from harness.user.runs import run_user_data

    overrides = parse_overrides(args, DATA_KEYS, ("build_site",))
    if "data" not in overrides:
        raise ConfigError("limit= and stems= go with data=PATH (a folder of your own, or a params.yaml dataset)")
    tasks = _tasks(overrides.get("task"))
    limit = _positive_int("limit", overrides["limit"]) if "limit" in overrides else None
    stems = overrides.get("stems")
    if stems is not None and not Path(stems).exists():
        raise ConfigError(f"stems={stems}: no such folder or file (the split lists, <split>.txt, one stem a line)")
    data = overrides["data"]
    project = load_params() if PARAMS_FILE.is_file() else None
    if not Path(data).is_dir() and (project is None or data not in project.datasets):
        valid = ", ".join(project.datasets) if project else "none"
        raise ConfigError(f"data={data}: not a folder, nor a dataset in params.yaml (those: {valid})")
    backbones = _backbones(overrides.get("backbone"))
    device = overrides.get("device")
    if device is not None:  # a GPU that is not here: one line, before any task runs
        from harness.api import checked_device

        device = checked_device(device)
    for task in tasks:  # the folder's layout for every task, before any task runs
        dataset_spec(data, task, project, limit=limit, stems=stems)
    return run_user_data(tasks, backbones, data, limit=limit, stems=stems,
                         build_site=overrides.get("build_site", True), device=device)


def _tasks(value: str | None) -> list[str]:
    from harness.probes import PROBES

    if value is None:
        raise ConfigError(f"data= needs task=NAME (one or a comma-separated list); valid: {', '.join(PROBES.names())}")
    tasks = name_list("task", value)
    for task in tasks:
        if task not in PROBES.names():
            raise ConfigError(unknown_name_message("task", task, PROBES.names()))
    return tasks


def _backbones(value: str | None) -> list[str]:
    from harness.backbones import BackboneError, parse_backbone_name
    from harness.core.run_key import BackboneRef

    if value is None:  # as a plain run: the default grid's backbones
        from harness.pipeline.plan import DEFAULT_GRID

        if not PARAMS_FILE.is_file() or DEFAULT_GRID not in load_params().grids:
            raise ConfigError("data= needs backbone=NAME (no default grid to take backbones from)")
        return [BackboneRef.parse(b).name for b in load_params().grids[DEFAULT_GRID].backbones]
    from harness.backbones.by_name import is_by_name, registered_name

    backbones = [BackboneRef.parse(b).name for b in name_list("backbone", value)]
    try:  # a backbone named by spec (timm:…, open_clip:…, torchvision:…) or a standard row: pinned on first use
        backbones = [registered_name(b) if is_by_name(b) else b for b in backbones]
    except BackboneError as error:
        raise ConfigError(str(error)) from None
    if PARAMS_FILE.is_file():  # the project's plugins register their backbones (`list` shows them; run takes them)
        from harness.core.registry import PluginError, load_plugins

        try:
            load_plugins(load_params().plugins)
        except PluginError as error:
            raise ConfigError(str(error)) from None
    for name in backbones:
        try:
            parse_backbone_name(name)
        except BackboneError as error:
            # the step people skip (docs/extend.md): a plugin's backbone exists only once params.yaml lists it
            hint = (" (a backbone of your own: its module under plugins/, listed in params.yaml's `plugins:`)"
                    if str(error).startswith("unknown backbone") else "")
            raise ConfigError(f"{error}{hint}") from None
    return backbones


def _positive_int(key: str, value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"{key}={value}: expected a whole number of at least 1")
    return int(value)


def promote_command(args: list[str]) -> int:
    from harness.user.runs import promote

    run_id = parse_overrides(args, ["run"]).get("run")
    if run_id is None:
        raise ConfigError("promote needs run=RUN_ID (a run of user/corpus.jsonl)")
    grid = promote(run_id)
    print(f"params.yaml: added the dataset and grids.{grid} for {run_id}. Reproduce it through DVC, which is "
          f"what puts it in the corpus: visbench-harness grid={grid}")
    return 0


def score_command(args: list[str]) -> int:
    """`score backbone=NAME board=B-xxxx [layers=…] [device=…] [build_site=false]`: your backbone on a committed
    board's exact task, data and protocol, ranked beside its rows (harness.user.score); never the corpus."""
    from harness.api import RunFailed, checked_device
    from harness.user.runs import collect_user, render_user_site
    from harness.user.score import find_board, score

    overrides = parse_overrides(args, ["backbone", "board", "build_site", "device", "layers"], ("build_site",))
    if overrides.get("board") == "?":  # the list the error messages point to: a table, not an error
        from harness.user.score import boards_table, committed_boards

        print(boards_table(committed_boards()))
        return 0
    missing = [key for key in ("backbone", "board") if key not in overrides]
    if missing:
        raise ConfigError(f"score needs {' and '.join(k + '=' for k in missing)} (backbone=NAME board=B-xxxx; "
                          "`visbench-harness score backbone=NAME board=?` lists the boards)")
    (backbone,) = _backbones(overrides["backbone"])  # a plugin's too; one backbone per call
    find_board(overrides["board"])  # an unknown board: one line listing them, before any work
    device = checked_device(overrides["device"]) if "device" in overrides else None
    try:
        result = score(backbone, overrides["board"], layers=overrides.get("layers"), device=device)
    except RunFailed as error:
        log.error("score: %s on %s failed: %s", backbone, overrides["board"], error)
        return 1
    print(result)
    records = collect_user()
    if overrides.get("build_site", True):
        render_user_site(records)
        print("the same board, with its chart and paired tests, in the user site: mkdocs build -f user/mkdocs.yml")
    return 0


def pin_command(args: list[str]) -> int:
    """`pin backbone=SPEC`: resolve SPEC from the local cache now and (re)write its entry in backbones.lock."""
    from harness.backbones import BackboneError
    from harness.backbones.by_name import STANDARD_ROWS, is_by_name, pin
    from harness.backbones.lock import LOCK

    backbone = parse_overrides(args, ["backbone"]).get("backbone")
    if backbone is None or not is_by_name(backbone):
        raise ConfigError("pin needs backbone=SPEC: timm:<model>.<tag>, open_clip:<model>/<tag>, "
                          f"torchvision:<WeightsEnum>.<MEMBER>, or a standard row ({', '.join(STANDARD_ROWS)})")
    try:
        name, entry, _ = pin(backbone, refresh=True)
    except BackboneError as error:
        raise ConfigError(str(error)) from None
    print(f"{LOCK}: {name} = {entry.spec} at {entry.pin['location']}@{entry.pin['revision']} "
          f"({entry.pin['filename']}, SHA-256 {entry.pin['sha256']}); commit it, then run backbone={name}")
    return 0


def publish_command(args: list[str]) -> int:
    from harness.user.publish import PublishError, publish

    overrides = parse_overrides(args, ["run", "to"])
    missing = [key for key in ("run", "to") if key not in overrides]
    if missing:
        raise ConfigError(f"publish needs {' and '.join(k + '=' for k in missing)} (run=RUN_ID to=DIR|dvc:REMOTE|"
                          "hub:USER/REPO)")
    try:
        where = publish(overrides["run"], overrides["to"])
    except PublishError as error:
        print(f"visbench-harness: publish failed: {error}", file=sys.stderr)
        return 1
    print(f"published {overrides['run']} → {where}")
    return 0


def cache_command(args: list[str]) -> int:
    from harness.cli import cache as cache_tools

    action, rest = (args[0], args[1:]) if args else (None, [])
    if action == "stats":
        parse_overrides(rest, [])
        print(cache_tools.stats_table(cache_tools.feature_sets()))
        return 0
    if action == "gc":
        dry_run = parse_overrides(rest, ["dry_run"], ("dry_run",)).get("dry_run", False)
        unused, size = cache_tools.collect_garbage(dry_run=dry_run)
        for path in unused:
            print(f"  {path}")
        verb = "would remove" if dry_run else "removed"
        print(f"cache gc: {verb} {len(unused)} unreferenced folder(s)/entries, {size / 2**20:.2f} MiB "
              "(DVC's own copies: `dvc gc`)")
        return 0
    raise ConfigError(f"cache {action or ''}: expected `cache stats` or `cache gc [dry_run=true]`".replace("  ", " "))


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "cache": cache_command, "pin": pin_command, "promote": promote_command, "publish": publish_command,
    "score": score_command,
}
