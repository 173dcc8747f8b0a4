"""The pipeline's stages as DVC is best told them: the targets of one `dvc repro` in an order DVC can run, and
each stage's command, from the stage specs (harness.pipeline.stage_model)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.core import dvcfiles
from harness.pipeline.stage_model import StageSpec, read_stages

FINAL = ("collect", "site")


def stage_names(document: dict[str, Any]) -> set[str]:
    """The stage names DVC sees in a generated dvc.yaml document (a row's stage as GROUP@BACKBONE)."""
    return set(read_stages({Path(): document}))


def dvc_targets(names: list[str], stages: Mapping[str, StageSpec], glob: bool = False) -> list[str]:
    """`names` (stages in an order DVC can run one by one: fingerprints, prepare, extract, probes, then collect
    and site) as DVC is best told them. A row (one backbone's file in a grid) whose stages are all named is one
    target, its whole file (`pipelines/G/B/dvc.yaml:*` for `dvc repro --glob`, else the file's path), so DVC
    loads that dvc.yaml and its lock once; otherwise its stages, each as `FILE:NAME`, in the order given (a row
    lists its extraction before the probes reading it). Root stages keep their place (the prepare stages as
    `prepare-*` under --glob when all are named); without --glob (`dvc status`, where order does not matter) a
    root file whose every stage is named is one target, `dvc.yaml`, as a row's is (DVC parses a file and its
    lock once per target that names it; benchmarks/dvc_scale.py's CLI no-op measures what this saves). Grids
    come in an order where a grid that reads another's features (`features_from`) follows it; where that order
    cannot exist, each name keeps its own place. A name no file defines is passed as it is."""
    from fnmatch import fnmatch

    def grid(name: str) -> str | None:
        return stages[name].grid if name in stages else None

    by_file: dict[Path, set[str]] = {}
    for spec in stages.values():
        by_file.setdefault(spec.file, set()).add(spec.name)
    head = [n for n in names if grid(n) is None and n not in FINAL]
    tail = [n for n in names if n in FINAL]
    by_grid: dict[str, dict[Path, list[str]]] = {}
    for name in names:
        if (row_grid := grid(name)) is not None:
            by_grid.setdefault(row_grid, {}).setdefault(stages[name].file, []).append(name)
    root = by_file.get(dvcfiles.ROOT_FILE, set())
    if not glob and root and root <= set(names):
        head, tail = [dvcfiles.ROOT_FILE.as_posix()], []
    prepares = {n for n in root if n.startswith("prepare-")}
    if glob and prepares and prepares <= set(head):
        first = next(i for i, n in enumerate(head) if n in prepares)
        head = [*head[:first], "prepare-*", *(n for n in head[first:] if n not in prepares)]
    order = _grid_order(by_grid, stages)
    if order is None:  # grids that read each other's features: every stage in the caller's order
        return [*head, *(stages[n].address for n in names if grid(n) is not None), *tail]
    middle: list[str] = []
    for row_grid in order:
        for path, row in by_grid[row_grid].items():
            if by_file[path] <= set(row):
                middle.append(f"{path.as_posix()}:*" if glob else path.as_posix())
            else:
                middle += [stages[name].address for name in row]
    assert not any(fnmatch(t, "*[[]*") for t in middle)  # stage names hold no glob characters but '*' we add
    return [*head, *middle, *tail]


def _grid_order(by_grid: dict[str, dict[Path, list[str]]], stages: Mapping[str, StageSpec]) -> list[str] | None:
    """The grids of `by_grid` in first-named order, moved after the grids whose features their named rows read
    (`features_from`: a probe stage of one grid depending on another's features); None when they read each
    other's (no such order)."""
    needs: dict[str, set[str]] = {grid: set() for grid in by_grid}
    for spec in stages.values():
        if spec.grid in needs and spec.file in by_grid[spec.grid]:
            needs[spec.grid] |= {dep.split("/")[1] for dep in spec.deps if dep.startswith("features/")}
    needs = {grid: (read - {grid}) & set(by_grid) for grid, read in needs.items()}
    order: list[str] = []
    pending = list(by_grid)
    while pending:
        ready = next((g for g in pending if needs[g] <= set(order)), None)
        if ready is None:
            return None
        order.append(ready)
        pending.remove(ready)
    return order


def stage_commands(stages: Mapping[str, StageSpec]) -> dict[str, str]:
    """Each stage's command as DVC runs it (what `harness.executors.parallel` starts itself)."""
    return {name: stage.cmd for name, stage in stages.items()}
