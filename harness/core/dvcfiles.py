"""Where each stage lives and how DVC names it: the pipeline is one root `dvc.yaml` (the code fingerprints, the
prepare stages, collect and site) and one `pipelines/<grid>/dvc.yaml` per grid (its extract and probe stages, run
from the project root through `wdir: ../..`), each file with its own `dvc.lock` beside it.

Why split: DVC parses and rewrites a stage's whole lock file every time that stage runs, and loads a dvc.yaml
with its lock for every target named. With one file per grid, a stage rewrites only its grid's lock and a grid is
one target, so DVC's bookkeeping grows with what a command touches, not with the project
(benchmarks/dvc_scale.py measures it).

Stage names stay unique across files (`extract-GRID-…`, `GRID-TASK@…` carry their grid), so the harness speaks
of stages by name everywhere and turns a name into DVC's address (`pipelines/GRID/dvc.yaml:NAME`) only when it
calls DVC, and DVC's address back into a name when it reads DVC's output."""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.core import paths

ROOT_FILE = Path("dvc.yaml")
FOLDER = Path("pipelines")
LOCK_NAME = "dvc.lock"
_ROOT_STAGES = {paths.CODE_STAGE, "collect", "site"}
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml parses a lock in 1/10 of PyYAML's time


def grid_file(grid: str) -> Path:
    return FOLDER / grid / ROOT_FILE.name


def grid_params_file(grid: str) -> Path:
    """The values of params.yaml a grid's stages read, copied out (harness.pipeline.generate.grid_params): DVC
    reads a stage's params file afresh for every stage it checks, so each grid's stages read a file of their own
    values instead of the whole params.yaml (whose size grows with every grid and backbone)."""
    return FOLDER / grid / "params.json"


def lock_of(dvc_file: Path) -> Path:
    return dvc_file.with_name(LOCK_NAME)


def stage_grid(name: str) -> str | None:
    """The grid whose file holds stage (or foreach group) `name`: `extract-GRID-DATASET[@…]` or `GRID-TASK[@…]`
    (grid names hold no '-', params.yaml's schema); None for the root file's stages (and any name of neither
    form)."""
    if name in _ROOT_STAGES or name.startswith("prepare-") or "-" not in name:
        return None
    return name.removeprefix("extract-").split("-", 1)[0]


def dvc_file(name: str) -> Path:
    grid = stage_grid(name)
    return ROOT_FILE if grid is None else grid_file(grid)


def address(name: str) -> str:
    """How DVC is told stage `name`: the bare name in the root file, `FILE:NAME` in a grid's."""
    file = dvc_file(name)
    return name if file == ROOT_FILE else f"{file.as_posix()}:{name}"


def addresses(names: list[str]) -> list[str]:
    return [address(name) for name in names]


def stage_of(dvc_address: str) -> str:
    """The stage name in DVC's way of printing a stage (`pipelines/g/dvc.yaml:g-t@b` or `g-t@b`)."""
    file, colon, name = dvc_address.rpartition(":")
    return name if colon and file.endswith(".yaml") else dvc_address


def dvc_files(root: Path = Path(".")) -> list[Path]:
    """The pipeline's dvc.yaml files present under `root` (project-relative): the root file, then each grid's."""
    grids = sorted(path.relative_to(root) for path in (root / FOLDER).glob(f"*/{ROOT_FILE.name}"))
    return [*([ROOT_FILE] if (root / ROOT_FILE).is_file() else []), *grids]


def lock_files(root: Path = Path(".")) -> list[Path]:
    """The lock files present under `root` (project-relative), the root's first."""
    return [lock for lock in map(lock_of, dvc_files(root)) if (root / lock).is_file()]


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
