"""One model of a stage, built once (`harness.pipeline.stage_specs`) and used as it is by everything
that runs stages: the generator only serialises specs into dvc.yaml documents (`to_yaml`), and the runner, the
parallel executor and SLURM read the generated files back into the same specs (`from_yaml`, `load_stages`),
with no template to expand and no stage name to parse.

A spec is what DVC's own `Stage` holds for a pipeline stage (name, command, dependencies, params, outputs), with
its paths project-relative, plus where it lives (its dvc.yaml) and, for a row's stage, which row and run it is
(`RowKey`, serialised as the stage's `meta`, which DVC keeps and ignores).

A row's stage is a foreach group of one member, the row's backbone: DVC names a member `GROUP@MEMBER`, and those
are the run ids users know (`default-classification@resnet18`). Its `do` holds literal values (DVC allows a
`do` without `${item}`), so what the file says is what runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from harness.core import dvcfiles

ROW_WDIR = "../../.."  # pipelines/<grid>/<backbone>/ → the project root, where every path of a stage starts


@dataclass(frozen=True)
class RowKey:
    """Which row of which grid a stage belongs to, and what it runs: a probe stage names its task, an extract
    stage its dataset (both name the dataset they read)."""

    grid: str
    backbone: str  # stage spelling (NAME.random)
    dataset: str
    task: str | None = None  # None: the row's extract stage of `dataset`

    @property
    def group(self) -> str:
        """DVC's foreach group: `extract-GRID-DATASET` or `GRID-TASK`."""
        return f"{self.grid}-{self.task}" if self.task is not None else f"extract-{self.grid}-{self.dataset}"

    @property
    def file(self) -> Path:
        return dvcfiles.row_file(self.grid, self.backbone)

    def to_meta(self) -> dict[str, str]:
        return {"grid": self.grid, "backbone": self.backbone, "dataset": self.dataset,
                **({"task": self.task} if self.task is not None else {})}

    @classmethod
    def from_meta(cls, meta: Mapping[str, str]) -> RowKey:
        return cls(meta["grid"], meta["backbone"], meta["dataset"], meta.get("task"))


@dataclass(frozen=True)
class Out:
    """An output, a metrics or a plots file of a stage (DVC's `outs`), with the two options the pipeline sets."""

    path: str
    cache: bool = True
    persist: bool = False

    def to_yaml(self) -> str | dict[str, dict[str, bool]]:
        options = {**({"cache": False} if not self.cache else {}), **({"persist": True} if self.persist else {})}
        return {self.path: options} if options else self.path

    @classmethod
    def from_yaml(cls, entry: str | Mapping[str, Mapping[str, Any] | None]) -> Out:
        if isinstance(entry, str):
            return cls(entry)
        [(path, options)] = entry.items()
        options = options or {}
        return cls(path, cache=options.get("cache", True), persist=options.get("persist", False))


@dataclass(frozen=True)
class StageSpec:
    name: str  # DVC's name for it, unique across the pipeline's files
    file: Path  # the dvc.yaml that defines it, project-relative
    cmd: str
    deps: tuple[str, ...] = ()  # files and folders it reads, project-relative
    params: tuple[str, ...] = ()  # the params keys whose values it reads
    params_file: str | None = None  # where those values are (None: DVC's default, params.yaml)
    outs: tuple[Out, ...] = ()
    row: RowKey | None = field(default=None)  # None: a stage of the root dvc.yaml

    @property
    def address(self) -> str:
        """How DVC is told this stage: the bare name in the root file, `FILE:NAME` in a row's."""
        return self.name if self.file == dvcfiles.ROOT_FILE else f"{self.file.as_posix()}:{self.name}"

    @property
    def grid(self) -> str | None:
        return self.row.grid if self.row is not None else None

    @property
    def group(self) -> str:
        """The key the stage is written under in its file: its foreach group for a row's stage."""
        return self.row.group if self.row is not None else self.name

    def to_yaml(self) -> dict[str, Any]:
        """The stage's definition under `group` in its dvc.yaml."""
        body: dict[str, Any] = {**({"wdir": ROW_WDIR} if self.row is not None else {}), "cmd": self.cmd}
        if self.deps:
            body["deps"] = list(self.deps)
        if self.params:
            body["params"] = [{self.params_file: list(self.params)}] if self.params_file else list(self.params)
        if self.outs:
            body["outs"] = [out.to_yaml() for out in self.outs]
        if self.row is None:
            return body
        return {"foreach": [self.row.backbone], "do": {**body, "meta": self.row.to_meta()}}

    @classmethod
    def from_yaml(cls, file: Path, group: str, definition: Mapping[str, Any]) -> StageSpec:
        """The spec `to_yaml` wrote under `group` in `file` (its inverse: `from_yaml(to_yaml(s)) == s`)."""
        if "foreach" in definition:
            body = definition["do"]
            row = RowKey.from_meta(body["meta"])
            [member] = definition["foreach"]
            name = f"{group}@{member}"
        else:
            body, row, name = definition, None, group
        params_file, keys = None, []
        for entry in body.get("params", []):
            if isinstance(entry, str):
                keys.append(entry)
            else:
                [(params_file, file_keys)] = entry.items()
                keys += file_keys
        return cls(name, Path(file), body["cmd"], tuple(body.get("deps", [])), tuple(keys), params_file,
                   tuple(Out.from_yaml(entry) for entry in body.get("outs", [])), row)


def documents_stages(specs: Iterable[StageSpec]) -> dict[Path, dict[str, Any]]:
    """Each file's `stages` mapping, the specs in the order given."""
    files: dict[Path, dict[str, Any]] = {}
    for spec in specs:
        files.setdefault(spec.file, {})[spec.group] = spec.to_yaml()
    return files


def read_stages(docs: Mapping[Path, Mapping[str, Any]]) -> dict[str, StageSpec]:
    """Every stage of `docs` (dvc.yaml documents by project-relative path), in file order (each file lists a stage
    after those it reads from)."""
    stages: dict[str, StageSpec] = {}
    for file, document in docs.items():
        for group, definition in (document.get("stages") or {}).items():
            spec = StageSpec.from_yaml(file, group, definition)
            stages[spec.name] = spec
    return stages


def load_stages(root: Path = Path(".")) -> dict[str, StageSpec]:
    """The generated pipeline's stages, read from its dvc.yaml files under `root`."""
    return read_stages(dvcfiles.load_documents(root))


def addresses(names: Iterable[str], stages: Mapping[str, StageSpec] | None = None) -> list[str]:
    """How DVC is told each stage of `names` (`StageSpec.address`); a name no file defines is passed as it is
    (DVC then says it does not know it)."""
    stages = load_stages() if stages is None else stages
    return [stages[name].address if name in stages else name for name in names]


def with_downstream(names: list[str], stale: set[str], stages: Mapping[str, StageSpec]) -> list[str]:
    """The stages of `names` (in an order DVC can run them one by one) that may change when DVC brings `stale`
    up to date: the stale ones, and every one reading (as a dependency or params file) a path that one of those
    writes, the same path or one inside or around it. A name `stages` does not know is kept: DVC decides."""
    written: set[str] = set()  # the outs of the stages kept so far
    around: set[str] = set()  # every folder holding one of them
    kept = []
    for name in names:
        stage = stages.get(name)
        reads = () if stage is None else (*stage.deps, *([stage.params_file] if stage.params_file else []))
        if stage is not None and name not in stale and not any(_reads_written(p, written, around) for p in reads):
            continue
        kept.append(name)
        for out in stage.outs if stage is not None else ():
            written.add(out.path)
            around.update(parent.as_posix() for parent in PurePosixPath(out.path).parents if parent.parts)
    return kept


def _reads_written(path: str, written: set[str], around: set[str]) -> bool:
    return path in written or path in around or any(parent.as_posix() in written
                                                     for parent in PurePosixPath(path).parents if parent.parts)
