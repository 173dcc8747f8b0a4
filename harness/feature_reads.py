"""How a task reads a (grid, dataset)'s features, as the generated dvc.yaml spells it on an extract stage's
command line (`--reads classification=pooled/crop`): the probe's feature mode and image fit are properties of
its code, so they are structure, not params."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FeatureRead:
    """One task reading a (grid, dataset)'s features: how (mode) and from which image fit."""

    task: str
    mode: str  # pooled | dense
    fit: str  # crop | squash

    def spell(self) -> str:
        return f"{self.task}={self.mode}/{self.fit}"

    @classmethod
    def parse(cls, text: str) -> FeatureRead:
        task, _, rest = text.partition("=")
        mode, _, fit = rest.partition("/")
        if not (task and mode in ("pooled", "dense") and fit in ("crop", "squash")):
            raise ValueError(f"--reads entry {text!r} is not TASK=pooled|dense/crop|squash")
        return cls(task, mode, fit)
