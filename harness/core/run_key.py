"""A run's identity as values: which backbone (`BackboneRef`), which grid × task × backbone (`RunKey`), and which
point of a learning curve (`Shot`).

A backbone has two spellings. Users, records and the registry write a random-init control `NAME@random`; DVC
reserves '@' in stage names, so stage names, pipeline folders, result files and params.yaml write it
`NAME.random`. A `BackboneRef` is the one value behind both: `.name` prints the first, `.spelled` the second.

A probe stage is named `GRID-TASK@BACKBONE` (the backbone spelled) and a run of it has that name as its run id,
or `<stage>.k<k>.s<seed>` for one (k, seed) of a few-shot stage. Those strings are how a `RunKey` prints;
`RunKey.from_stage` and `RunKey.from_run_id` are the one place they are read back (for the records, failure
files and user input that carry nothing else), and the files a run writes are the key's (`record_path`, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from harness.core import dvcfiles, paths

CONTROL_SUFFIX = "@random"  # a random-init control, as users, records and the registry name it
CONTROL_SUFFIX_SPELLED = ".random"  # the same control in stage names, folders and params.yaml


class Shot(NamedTuple):
    """One point of a learning curve: k training items (per class or in all), chosen with `seed`."""

    k: int
    seed: int


@dataclass(frozen=True)
class BackboneRef:
    """A backbone as a run names it: its architecture (the registered name, or a name the registry has yet to
    judge) and whether the run is its random-init control."""

    arch: str
    control: bool = False

    @classmethod
    def parse(cls, name: str) -> BackboneRef:
        """`NAME@random` or `NAME.random` → the control of NAME; any other text is a name as it stands (the
        registry, not this, refuses what does not construct)."""
        for suffix in (CONTROL_SUFFIX, CONTROL_SUFFIX_SPELLED):
            if name.endswith(suffix):
                return cls(name.removesuffix(suffix), control=True)
        return cls(name)

    @property
    def name(self) -> str:
        """As users, records and the registry write it: `resnet18`, `resnet18@random`."""
        return self.arch + CONTROL_SUFFIX if self.control else self.arch

    @property
    def spelled(self) -> str:
        """As stage names, folders and params.yaml write it: `resnet18`, `resnet18.random`."""
        # every '@random' replaced, not only a control's suffix: a name that only carries it inside (a user's row
        # `NAME@random@yours` beside a board, harness.user.score) keeps the row its pages have always named
        return self.name.replace(CONTROL_SUFFIX, CONTROL_SUFFIX_SPELLED)

    def checkpoint(self, checkpoints: Mapping[str, str]) -> str | None:
        """The weights file params.yaml's `checkpoints` gives this backbone; a control takes none."""
        return None if self.control else checkpoints.get(self.arch)


@dataclass(frozen=True)
class RunKey:
    """One run: a probe stage (grid × task × backbone), or one (k, seed) `shot` of a few-shot stage."""

    grid: str
    task: str
    backbone: BackboneRef
    shot: Shot | None = None

    @classmethod
    def from_stage(cls, stage: str) -> RunKey:
        """The key of a probe stage `GRID-TASK@BACKBONE` (grid names hold no '-'); ValueError for any other text,
        a control written `NAME@random` included (no stage is named so)."""
        grid, rest = stage.split("-", 1)
        task, spelled = rest.split("@", 1)
        backbone = BackboneRef.parse(spelled)
        if backbone.spelled != spelled:
            raise ValueError(f"{stage!r} is no stage name: a stage spells its backbone {backbone.spelled}")
        return cls(grid, task, backbone)

    @classmethod
    def from_run_id(cls, run_id: str, k_shot: int | None, seed: int) -> RunKey:
        """The key of a record's run id, given the record's k and seed (the suffix `run_id` adds for a shot)."""
        if k_shot is None:
            return cls.from_stage(run_id)
        shot = Shot(k_shot, seed)
        return cls.from_stage(run_id.removesuffix(f".k{shot.k}.s{shot.seed}")).at(shot)

    def at(self, shot: Shot | None) -> RunKey:
        """The same stage's run at `shot` (None: the stage as a whole)."""
        return dataclasses.replace(self, shot=shot)

    @property
    def stage(self) -> str:
        return f"{self.grid}-{self.task}@{self.backbone.spelled}"

    @property
    def run_id(self) -> str:
        """The stage name, or for one (k, seed) of a few-shot stage "<stage>.k<k>.s<seed>": unique, URL-safe
        (the site's page for it is the run id with "@" spelled "-at-"), and the stage is its prefix."""
        return self.stage if self.shot is None else f"{self.stage}.k{self.shot.k}.s{self.shot.seed}"

    @property
    def address(self) -> str:
        """How DVC is told the run's stage: `pipelines/GRID/BACKBONE/dvc.yaml:STAGE`."""
        return dvcfiles.row_address(self.grid, self.backbone.spelled, self.stage)

    # The files: core.paths places them, so `scratch_outputs` and `workspace` move a key's files with the rest. A
    # failed attempt's file is not among them: harness.runs.failures owns it, by `stage` (one owner per artifact).

    @property
    def record_path(self) -> Path:
        return paths.record_path(self.grid, self.task, self.backbone.spelled, self.shot)

    @property
    def samples_path(self) -> Path:
        return paths.samples_path(self.grid, self.task, self.backbone.spelled, self.shot)

    @property
    def head_path(self) -> Path:
        return paths.head_path(self.grid, self.task, self.backbone.spelled, self.shot)

    @property
    def metrics_path(self) -> Path:
        """The stage's DVC metrics file (one per stage, whatever the shot)."""
        return paths.metrics_path(self.grid, self.task, self.backbone.spelled)

    @property
    def fewshot_dir(self) -> Path:
        """The stage's folder of (k, seed) files, were it a few-shot stage."""
        return paths.fewshot_dir(self.grid, self.task, self.backbone.spelled)
