"""What params.yaml means, checked against the registries before any work starts.

`load_params` (harness.core.config) checks the file's structure; `check_params` checks that every name it uses
exists and every block is valid for what it configures: each probe block against its probe's schema, each
dataset against its kind's parameters, each grid's tasks, datasets and backbones, each plugin. Every
problem is a one-line `ConfigError` that names the key and the fix.

`grid_requirements` says which files a grid reads that may be absent (a dataset's folder, a checkpoint):
the CLI skips such a grid with a note, and the generated dvc.yaml depends on exactly those paths.
"""

from __future__ import annotations

from pathlib import Path

from harness.core.config import ConfigError, Params, canonical_backbone, probe_block
from harness.core.registry import PluginError, load_plugins, unknown_name_message


def check_params(params: Params) -> None:
    """Every name resolves and every block validates; plugins are imported first (they register names)."""
    from harness.backbones import BackboneError, backbone_entry, parse_backbone_name
    from harness.datasets.kinds import DATASET_KINDS, validate_dataset_spec
    from harness.probes import PROBES, get_probe, validate_probe_params

    try:
        load_plugins(params.plugins)
    except PluginError as error:
        raise ConfigError(str(error)) from None
    for name, spec in params.datasets.items():
        try:
            validate_dataset_spec(name, spec)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    tasks = PROBES.names()
    for task, block in params.probes.items():
        if task not in tasks:
            raise ConfigError(f"probes.{task}: {unknown_name_message('task', task, tasks)}")
        try:
            validate_probe_params(task, block)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    for arch in params.checkpoints:
        try:
            entry = backbone_entry(arch)
        except KeyError as error:
            raise ConfigError(f"checkpoints.{arch}: {error}") from None
        if entry.weights == "none":
            raise ConfigError(f"checkpoints.{arch}: {arch} has fixed filters and takes no checkpoint")
    for grid_name, grid in params.grids.items():
        where = f"grids.{grid_name}"
        for task, dataset in grid.tasks.items():
            if task not in tasks:
                raise ConfigError(f"{where}.tasks: {unknown_name_message('task', task, tasks)}")
            if task not in params.probes:
                raise ConfigError(f"{where}.tasks.{task}: add a probes.{task} block to params.yaml")
            if dataset not in params.datasets:
                known = unknown_name_message("dataset", dataset, list(params.datasets))
                raise ConfigError(f"{where}.tasks.{task}: {known}")
            if grid.fewshot is not None and get_probe(task).fewshot_unit is None:
                able = [t for t in tasks if get_probe(t).fewshot_unit is not None]
                raise ConfigError(f"{where}.tasks.{task}: {task} trains no probe, so it has no few-shot curve; "
                                  f"tasks that do: {', '.join(able)}")
        for task in grid.probes:
            if task not in grid.tasks:
                raise ConfigError(f"{where}.probes.{task}: grid {grid_name} does not run {task}")
        for task in grid.tasks:
            try:
                validate_probe_params(task, probe_block(params, grid_name, task))
            except ValueError as error:
                raise ConfigError(f"{where}: {error}") from None
        for dataset in grid.features_from:
            if dataset not in grid.datasets:
                raise ConfigError(f"{where}.features_from.{dataset}: no task of grid {grid_name} reads {dataset}")
        for backbone in grid.backbones:
            try:
                parse_backbone_name(canonical_backbone(backbone))
            except BackboneError as error:
                raise ConfigError(f"{where}.backbones: {error}") from None
            if "@" in backbone:
                raise ConfigError(f"{where}.backbones: write {backbone} as {backbone.replace('@', '.')} "
                                  "(DVC reserves '@' in stage names)")
    if not DATASET_KINDS.names():  # pragma: no cover - a broken install
        raise ConfigError("no dataset kinds are registered")


def layout_problems(params: Params, datasets: list[str]) -> list[str]:
    """What the datasets' folders lack for the layout their spec says, one line each, found before any stage runs.
    A dataset kind opts in by defining `check_layout(name, **spec) -> str | None` in the module that registers it
    (`harness.datasets.image_folder`); it reads folder listings only. Not part of `check_params`, whose verdict is
    cached on params.yaml and the code: a folder can change between two runs with neither changing."""
    import importlib

    from harness.datasets.kinds import DATASET_KINDS

    problems = []
    for name in datasets:
        spec = dict(params.datasets[name])
        kind = spec.pop("kind")
        DATASET_KINDS.get(kind)  # imports the registering module
        check = getattr(importlib.import_module(DATASET_KINDS.module_of(kind)), "check_layout", None)
        problem = check(name, **spec) if check is not None else None
        if problem:
            problems.append(problem)
    return problems


def grid_requirements(params: Params, grid: str) -> dict[str, str]:
    """Paths a grid needs that a checkout may lack, each with the params.yaml key that names it: its datasets'
    folders (of the grid that extracts them) and the configured checkpoints of its pretrained backbones."""
    from harness.datasets.kinds import DATA_PATH_KEYS

    spec = params.grids[grid]
    paths: dict[str, str] = {}
    for dataset in spec.datasets:
        for key in DATA_PATH_KEYS:
            if params.datasets[dataset].get(key):
                paths.setdefault(str(params.datasets[dataset][key]), f"datasets.{dataset}.{key}")
    for backbone in spec.backbones:
        name = canonical_backbone(backbone)
        if not name.endswith("@random") and name in params.checkpoints:
            paths.setdefault(params.checkpoints[name], f"checkpoints.{name}")
    return paths


def _absent_requirements(params: Params, grid: str) -> dict[str, str]:
    return {path: key for path, key in grid_requirements(params, grid).items() if not Path(path).exists()}


def missing_requirements(params: Params, grid: str) -> list[str]:
    return list(_absent_requirements(params, grid))


def missing_requirements_note(params: Params, grid: str) -> str | None:
    """What a grid lacks here and which params.yaml keys to point at the user's copies; None when nothing."""
    missing = _absent_requirements(params, grid)
    if not missing:
        return None
    keys = ", ".join(dict.fromkeys(missing.values()))
    return f"grid {grid} needs {', '.join(missing)}, which is not here (set {keys} in params.yaml to your copy)"
