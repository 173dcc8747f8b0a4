"""Where each stage lives and how DVC names it: the pipeline is one root `dvc.yaml` (the code fingerprints, the
prepare stages, collect and site) and one `pipelines/<grid>/<backbone>/dvc.yaml` per row of a grid (that
backbone's extract and probe stages, run from the project root through `wdir: ../../..`), each file with its own
`dvc.lock` beside it; a grid's stages read their values from `pipelines/<grid>/params.json`.

Why split per row: DVC parses and rewrites a stage's whole lock file every time that stage runs (its round-trip
YAML parser and writer, in Python), and loads a dvc.yaml with its lock for every target named. With one file per
backbone and grid, a stage rewrites a lock of one backbone's stages, whose size does not grow with the number of
backbones, and a new backbone on a branch adds files of its own instead of editing its grid's shared lock
(benchmarks/dvc_scale.py measures it).

Stage names stay unique across files, so the harness speaks of stages by name everywhere; which file holds a
stage is its spec's (harness.pipeline.stage_model: `StageSpec.file`, `.address`), never read off its name, and
DVC's address (`pipelines/GRID/BACKBONE/dvc.yaml:NAME`) is turned back into a name where the harness reads DVC's
output (`stage_of`)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT_FILE = Path("dvc.yaml")
FOLDER = Path("pipelines")
LOCK_NAME = "dvc.lock"
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml parses a lock in 1/10 of PyYAML's time


def grid_folder(grid: str) -> Path:
    return FOLDER / grid


def row_file(grid: str, backbone: str) -> Path:
    """The dvc.yaml of one backbone's stages in `grid` (`backbone` spelled as in stage names, NAME.random)."""
    return grid_folder(grid) / backbone / ROOT_FILE.name


def file_grid(dvc_file: Path) -> str | None:
    """The grid of a row's dvc.yaml path (`pipelines/GRID/BACKBONE/dvc.yaml`); None for the root file."""
    parts = Path(dvc_file).parts
    return parts[1] if len(parts) == 4 and parts[0] == FOLDER.name else None


def grid_params_file(grid: str) -> Path:
    """The values of params.yaml a grid's stages read, copied out (harness.pipeline.generate.grid_params): DVC
    reads a stage's params file afresh for every stage it checks, so each grid's stages read a file of their own
    values instead of the whole params.yaml (whose size grows with every grid and backbone)."""
    return grid_folder(grid) / "params.json"


def lock_of(dvc_file: Path) -> Path:
    return dvc_file.with_name(LOCK_NAME)


def row_address(grid: str, backbone: str, name: str) -> str:
    """How DVC is told stage `name` of `backbone`'s row in `grid` (`FILE:NAME`), the row given as values (a run
    page knows its record's grid and backbone; the stage model, harness.pipeline.stage_model, its spec's)."""
    return f"{row_file(grid, backbone).as_posix()}:{name}"


def stage_of(dvc_address: str) -> str:
    """The stage name in DVC's way of printing a stage (`pipelines/g/b/dvc.yaml:g-t@b` or `g-t@b`)."""
    file, colon, name = dvc_address.rpartition(":")
    return name if colon and file.endswith(".yaml") else dvc_address


def dvc_files(root: Path = Path(".")) -> list[Path]:
    """The pipeline's dvc.yaml files present under `root` (project-relative): the root file, then each row's."""
    rows = sorted(path.relative_to(root) for path in (root / FOLDER).glob(f"*/*/{ROOT_FILE.name}"))
    return [*([ROOT_FILE] if (root / ROOT_FILE).is_file() else []), *rows]


def lock_files(root: Path = Path(".")) -> list[Path]:
    """The lock files present under `root` (project-relative), the root's first: beside each dvc.yaml, and any
    left by an earlier layout (one lock per grid, `pipelines/GRID/dvc.lock`), whose entries the generator moves
    to their rows' locks (harness.pipeline.generate.relocate_lock_entries)."""
    beside = [lock for lock in map(lock_of, dvc_files(root)) if (root / lock).is_file()]
    earlier = sorted(path.relative_to(root) for path in (root / FOLDER).glob(f"*/{LOCK_NAME}"))
    return [*beside, *earlier]


def read_lock_file(path: Path) -> dict[str, dict]:
    """One lock file's entries by stage name; empty where there is none."""
    if not path.is_file():
        return {}
    return (yaml.load(path.read_text(), Loader=_FAST_LOADER) or {}).get("stages", {}) or {}


def read_locks(root: Path = Path(".")) -> dict[str, dict]:
    """Every lock file's entries under `root`, by stage name (names are unique across files)."""
    entries: dict[str, dict] = {}
    for lock in lock_files(root):
        entries.update(read_lock_file(root / lock))
    return entries


def load_document(path: Path) -> dict | None:
    """A generated dvc.yaml as data (libyaml's parser), or None where there is none."""
    return yaml.load(path.read_text(), Loader=_FAST_LOADER) if path.is_file() else None


def load_documents(root: Path = Path(".")) -> dict[Path, dict]:
    """Every dvc.yaml of the pipeline as data, by project-relative path."""
    return {path: document for path in dvc_files(root)
            if (document := load_document(root / path)) is not None}
