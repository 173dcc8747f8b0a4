"""Which stages a `visbench-harness` invocation selects, derived from `params.yaml`.

The CLI never computes anything itself: it turns `task=… backbone=… grid=…` into DVC stage names and
lets DVC run them, so `dvc.lock` stays the single record of what ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.core import dvcfiles, paths
from harness.core.config import ConfigError, Params
from harness.core.registry import unknown_name_message
from harness.core.run_key import BackboneRef, RunKey
from harness.pipeline.checks import missing_requirements_note

DEFAULT_GRID = "default"  # what a bare `visbench-harness` runs; grid=all runs every grid whose data is here


@dataclass(frozen=True)
class Run:
    grid: str
    task: str
    backbone: str  # stage spelling (NAME.random)
    dataset: str
    feature_grid: str  # the grid whose extract stage made its features (features_from)

    @property
    def key(self) -> RunKey:
        """The run's probe stage as a value (a few-shot stage's runs are its `key.at(shot)`)."""
        return RunKey(self.grid, self.task, BackboneRef.parse(self.backbone))

    @property
    def stage(self) -> str:
        return self.key.stage

    @property
    def file(self) -> Path:
        """The dvc.yaml of the run's row (its extract and probe stages)."""
        return dvcfiles.row_file(self.grid, self.backbone)

    @property
    def address(self) -> str:
        """How DVC is told the run's probe stage."""
        return self.key.address

    @property
    def extract_stage(self) -> str:
        return paths.extract_stage_name(self.feature_grid, self.backbone, self.dataset)

    @property
    def prepare_stage(self) -> str:
        return paths.prepare_stage_name(self.dataset)


def name_list(key: str, value: object) -> list[str] | None:
    """`grid=`/`task=`/`backbone=` as names: a comma-separated string or a list; an empty name is refused, not
    dropped (`task=classification,,` is a typo, not a request for classification alone)."""
    if value is None:
        return None
    names = [str(v).strip() for v in (value if isinstance(value, list | tuple) else str(value).split(","))]
    if not all(names):
        raise ConfigError(f"{key}={value}: an empty name in the list; separate names with single commas")
    return names


def select_runs(
    params: Params, *, grid: object = None, task: object = None, backbone: object = None,
    skip_unavailable: bool = True,
) -> tuple[list[Run], list[str]]:
    """Runs matching the filters, and notes on grids skipped because their data is absent."""
    grids, tasks, backbones = name_list("grid", grid), name_list("task", task), name_list("backbone", backbone)
    _check(grids, sorted(params.grids), "grid")
    _check(tasks, sorted({t for g in params.grids.values() for t in g.tasks}), "task")
    if backbones is not None:
        backbones = [BackboneRef.parse(b).name for b in backbones]
        _check_backbones(params, backbones, grids)
    runs, notes = [], []
    for grid_name, spec in params.grids.items():
        if grids is not None and grid_name not in grids:
            continue
        message = missing_requirements_note(params, grid_name)
        if message:
            if grids is not None and not skip_unavailable:
                raise ConfigError(message)
            notes.append(message + "; skipped")
            continue
        for task_name, dataset in spec.tasks.items():
            if tasks is not None and task_name not in tasks:
                continue
            for ref in map(BackboneRef.parse, spec.backbones):
                if backbones is None or ref.name in backbones:
                    runs.append(Run(grid_name, task_name, ref.spelled, dataset, spec.feature_grid(grid_name, dataset)))
    if not runs:
        raise ConfigError("nothing selected: " + ("; ".join(notes) or "no grid has that task × backbone"))
    return runs, notes


def _check_backbones(params: Params, backbones: list[str], grids: list[str] | None) -> None:
    """A name no grid lists: known to the registry → say which grid to add it to; else list the valid ones."""
    selected = grids or sorted(params.grids)
    in_grids = sorted({BackboneRef.parse(b).name for g in selected for b in params.grids[g].backbones})
    for name in backbones:
        if name in in_grids:
            continue
        # only here: the registry imports torch (~1.5 s of every CLI call that names a backbone otherwise)
        from harness.backbones import list_backbones

        if name in list_backbones():
            raise ConfigError(f"backbone {name!r} is in no selected grid: add {BackboneRef.parse(name).spelled} to "
                              f"grids.<grid>.backbones in params.yaml (grids: {', '.join(selected)})")
        raise ConfigError(unknown_name_message("backbone", name, in_grids))


def _check(values: list[str] | None, valid: list[str], kind: str) -> None:
    for value in values or []:
        if value not in valid:
            raise ConfigError(unknown_name_message(kind, value, valid))
