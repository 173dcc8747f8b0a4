"""How a task of a grid reads a (grid, dataset)'s features, as the generated dvc.yaml spells it on an extract
stage's command line (`--reads default:classification=pooled/crop`): the probe's feature mode and image fit are
properties of its code, so they are structure, not params; its layers and pooling are params of that grid."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FeatureRead:
    """One task of one grid reading a (grid, dataset)'s features: how (mode) and from which image fit."""

    grid: str
    task: str
    mode: str  # pooled | dense
    fit: str  # crop | squash

    def spell(self) -> str:
        return f"{self.grid}:{self.task}={self.mode}/{self.fit}"

    @classmethod
    def parse(cls, text: str) -> FeatureRead:
        who, _, rest = text.partition("=")
        grid, _, task = who.partition(":")
        mode, _, fit = rest.partition("/")
        if not (grid and task and mode in ("pooled", "dense") and fit in ("crop", "squash")):
            raise ValueError(f"--reads entry {text!r} is not GRID:TASK=pooled|dense/crop|squash")
        return cls(grid, task, mode, fit)
