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

from harness.core.config import ConfigError, Params, probe_block
from harness.core.registry import PluginError, load_plugins, unknown_name_message
from harness.core.run_key import BackboneRef


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
        for task, dataset in grid.tasks.items():
            block = probe_block(params, grid_name, task)
            try:
                validate_probe_params(task, block)
            except ValueError as error:
                raise ConfigError(f"{where}: {error}") from None
            _check_splits(params, grid_name, task, dataset, block)
        for dataset in grid.features_from:
            if dataset not in grid.datasets:
                raise ConfigError(f"{where}.features_from.{dataset}: no task of grid {grid_name} reads {dataset}")
        for backbone in grid.backbones:
            try:
                parse_backbone_name(BackboneRef.parse(backbone).name)
            except BackboneError as error:
                raise ConfigError(f"{where}.backbones: {error}") from None
            if "@" in backbone:
                raise ConfigError(f"{where}.backbones: write {backbone} as {backbone.replace('@', '.')} "
                                  "(DVC reserves '@' in stage names)")
    if not DATASET_KINDS.names():  # pragma: no cover - a broken install
        raise ConfigError("no dataset kinds are registered")


# Where a kind's spec says which splits it will have: the keys of these mappings, or the kind's fixed splits
# (module, constant). A kind not named here has its splits checked when it is prepared.
_SPLIT_KEYS = {"image_folder": ("per_class", "split_fractions"), "fashion_mnist": ("per_class",),
               "procedural_scenes": ("scenes",), "procedural_scene_pairs": ("pairs",)}
_FIXED_SPLITS = {"cub200_2011": ("harness.datasets.cub200", "CUB_SPLITS"),
                 "stanford_cars": ("harness.datasets.stanford_cars", "CARS_SPLITS"),
                 "sun397": ("harness.datasets.sun397", "SUN397_SPLITS"),
                 "bsds500": ("harness.datasets.bsds500", "BSDS_SPLITS")}


def declared_splits(spec: dict) -> list[str] | None:
    """The splits a dataset spec will give, where the spec (not its folder) says so; None where it does not."""
    import importlib

    kind = spec.get("kind")
    for key in _SPLIT_KEYS.get(kind, ()):
        if isinstance(spec.get(key), dict):
            return list(spec[key])
    if kind in _FIXED_SPLITS:
        module, constant = _FIXED_SPLITS[kind]
        return list(getattr(importlib.import_module(module), constant))
    return None


def _check_splits(params: Params, grid: str, task: str, dataset: str, block: dict) -> None:
    """A split a task reads that its dataset will not have (a typo) is refused here, before the prepare stage."""
    splits = declared_splits(params.datasets[dataset])
    problem = None if splits is None else split_problem(params, grid, task, dataset, block, splits)
    if problem:
        raise ConfigError(problem)


def split_problem(params: Params, grid: str, task: str, dataset: str, block: dict, splits: list[str]) -> str | None:
    """The first split `block` (task's parameters in grid) reads that is not among `splits`, as one line."""
    for key, value in block.items():
        named = [value] if key.endswith("_split") and isinstance(value, str) else (
            [v for v in value if isinstance(v, str)] if key.endswith("_splits") and isinstance(value, list) else [])
        for split in named:
            if split not in splits:
                source = f"grids.{grid}.probes.{task}" if key in params.grids[grid].probes.get(task, {}) else (
                    f"probes.{task}")
                return (f"{source}.{key}: {unknown_name_message('split', split, splits)} "
                        f"(dataset {dataset}'s splits)")
    return None


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
            continue
        # the splits of a folder whose layout makes them (image_folder's <split>/<class>/): a task's typo is found
        # here, by folder listing, rather than by the prepare stage
        find = getattr(importlib.import_module(DATASET_KINDS.module_of(kind)), "folder_splits", None)
        splits = find(**spec) if find is not None and declared_splits(params.datasets[name]) is None else None
        for grid, grid_spec in (params.grids.items() if splits else ()):
            for task in (t for t, d in grid_spec.tasks.items() if d == name and t in params.probes):
                problem = split_problem(params, grid, task, name, probe_block(params, grid, task), splits)
                if problem:
                    problems.append(problem)
    return list(dict.fromkeys(problems))


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
    for backbone in map(BackboneRef.parse, spec.backbones):
        checkpoint = backbone.checkpoint(params.checkpoints)
        if checkpoint is not None:
            paths.setdefault(checkpoint, f"checkpoints.{backbone.arch}")
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
