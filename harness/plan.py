"""Which stages a `visbench-harness` invocation selects, derived from `params.yaml`.

The CLI never computes anything itself: it turns `task=… backbone=… grid=…` into DVC stage names and
lets DVC run them, so `dvc.lock` stays the single record of what ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness import paths
from harness.config import ConfigError, Params, canonical_backbone, stage_spelling
from harness.registry import unknown_name_message


@dataclass(frozen=True)
class Run:
    grid: str
    task: str
    backbone: str  # stage spelling (NAME.random)
    dataset: str

    @property
    def stage(self) -> str:
        return paths.stage_name(self.grid, self.task, self.backbone)

    @property
    def extract_stage(self) -> str:
        return paths.extract_stage_name(self.grid, self.backbone, self.dataset)


def missing_requirements(params: Params, grid: str) -> list[str]:
    return [p for p in params.grids[grid].requires if not Path(p).exists()]


def _as_list(value: object) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [v for v in str(value).split(",") if v]


def select_runs(
    params: Params, *, grid: object = None, task: object = None, backbone: object = None,
    skip_unavailable: bool = True,
) -> tuple[list[Run], list[str]]:
    """Runs matching the filters, and notes on grids skipped because their data is absent."""
    grids, tasks, backbones = _as_list(grid), _as_list(task), _as_list(backbone)
    _check(grids, sorted(params.grids), "grid")
    _check(tasks, sorted({t for g in params.grids.values() for t in g.tasks}), "task")
    all_backbones = sorted({canonical_backbone(b) for g in params.grids.values() for b in g.backbones})
    if backbones is not None:
        backbones = [canonical_backbone(b) for b in backbones]
        _check(backbones, all_backbones, "backbone")
    runs, notes = [], []
    for grid_name, spec in params.grids.items():
        if grids is not None and grid_name not in grids:
            continue
        missing = missing_requirements(params, grid_name)
        if missing:
            message = f"grid {grid_name} needs {', '.join(missing)}, which is not here"
            if grids is not None and not skip_unavailable:
                raise ConfigError(message)
            notes.append(message + "; skipped")
            continue
        for task_name, dataset in spec.tasks.items():
            if tasks is not None and task_name not in tasks:
                continue
            for name in spec.backbones:
                if backbones is None or canonical_backbone(name) in backbones:
                    runs.append(Run(grid_name, task_name, stage_spelling(name), dataset))
    if not runs:
        raise ConfigError("nothing selected: " + ("; ".join(notes) or "no grid has that task × backbone"))
    return runs, notes


def _check(values: list[str] | None, valid: list[str], kind: str) -> None:
    for value in values or []:
        if value not in valid:
            raise ConfigError(unknown_name_message(kind, value, valid))
