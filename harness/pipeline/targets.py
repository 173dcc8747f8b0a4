"""The stages of generated dvc.yaml documents as DVC is best told them: their names, the targets of one
`dvc repro` in an order DVC can run, each stage's command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core import dvcfiles
from harness.pipeline.documents import DVC_FILE
from harness.pipeline.expand import expand


def stage_names(document: dict[str, Any]) -> set[str]:
    """The stage names DVC sees in a dvc.yaml document: a foreach group is GROUP@ITEM (list) or GROUP@KEY (dict)."""
    names: set[str] = set()
    for name, stage in document["stages"].items():
        foreach = stage.get("foreach")
        names.update([name] if foreach is None else (f"{name}@{item}" for item in foreach))
    return names


def _file_needs(document: dict[str, Any], grid: str) -> set[str]:
    """The other grids whose features a row's probe stages read (`features_from`)."""
    needs = set()
    for stage in document["stages"].values():
        for dep in stage.get("do", stage).get("deps", []):
            if isinstance(dep, str) and dep.startswith("features/"):
                needs.add(dep.split("/")[1])
    return needs - {grid}


def dvc_targets(names: list[str], docs: dict[Path, dict[str, Any]], glob: bool = False) -> list[str]:
    """`names` (stages in an order DVC can run one by one: fingerprints, prepare, extract, probes, then collect
    and site) as DVC is best told them. A row (one backbone's file in a grid) whose stages are all named is one
    target, its whole file (`pipelines/G/B/dvc.yaml:*` for `dvc repro --glob`, else the file's path), so DVC
    loads that dvc.yaml and its lock once; otherwise its stages, each as `FILE:NAME`, in the order given (a row
    lists its extraction before the probes reading it). Root stages keep their place (the prepare stages as
    `prepare-*` under --glob when all are named); without --glob (`dvc status`, where order does not matter) a
    root file whose every stage is named is one target, `dvc.yaml`, as a row's is (DVC parses a file and its
    lock once per target that names it; benchmarks/dvc_scale.py's CLI no-op measures what this saves). Grids
    come in an order where a grid that reads another's features (`features_from`) follows it; where that order
    cannot exist, each name keeps its own place."""
    from fnmatch import fnmatch

    root = docs.get(DVC_FILE, {"stages": {}})
    head = [n for n in names if dvcfiles.dvc_file(n) == DVC_FILE and n not in ("collect", "site")]
    tail = [n for n in names if n in ("collect", "site")]
    by_grid: dict[str, dict[Path, list[str]]] = {}
    for name in names:
        grid = dvcfiles.stage_grid(name)
        if grid is not None:
            by_grid.setdefault(grid, {}).setdefault(dvcfiles.dvc_file(name), []).append(name)
    if not glob and root["stages"] and stage_names(root) <= set(names):
        head, tail = [DVC_FILE.as_posix()], []
    prepares = {n for n in stage_names(root) if n.startswith("prepare-")}
    if glob and prepares and prepares <= set(head):
        first = next(i for i, n in enumerate(head) if n in prepares)
        head = [*head[:first], "prepare-*", *(n for n in head[first:] if n not in prepares)]
    order = _grid_order(by_grid, docs)
    if order is None:  # grids that read each other's features: every stage in the caller's order
        return [*head, *dvcfiles.addresses([n for n in names if dvcfiles.stage_grid(n) is not None]), *tail]
    middle: list[str] = []
    for grid in order:
        for path, row in by_grid[grid].items():
            document = docs.get(path)
            if document is not None and stage_names(document) <= set(row):
                middle.append(f"{path.as_posix()}:*" if glob else path.as_posix())
            else:
                middle += dvcfiles.addresses(row)  # each in its row's file, `path`
    assert not any(fnmatch(t, "*[[]*") for t in middle)  # stage names hold no glob characters but '*' we add
    return [*head, *middle, *tail]


def _grid_order(by_grid: dict[str, dict[Path, list[str]]], docs: dict[Path, dict[str, Any]]) -> list[str] | None:
    """The grids of `by_grid` in first-named order, moved after the grids whose features they read; None when
    they read each other's (no such order)."""
    needs = {grid: set().union(*(_file_needs(docs.get(path, {"stages": {}}), grid) for path in rows)) & set(by_grid)
             for grid, rows in by_grid.items()}
    order: list[str] = []
    pending = list(by_grid)
    while pending:
        ready = next((g for g in pending if needs[g] <= set(order)), None)
        if ready is None:
            return None
        order.append(ready)
        pending.remove(ready)
    return order


def stage_commands(docs: dict[Path, dict[str, Any]]) -> dict[str, str]:
    """Each stage's command as DVC runs it, its foreach template filled in (what `harness.executors.parallel`
    starts itself)."""
    return {name: stage.cmd for name, stage in expand(docs).items()}
