"""Probe heads as artifacts: saved beside each trained run's record, loaded only onto the features they fit.

A head file is safetensors (tensors and a string metadata block; loading it runs no code, unlike a pickle):
the head's tensors (weights, and the feature statistics it standardises with) and, under `visbench.head`, its
config (what rebuilds it) and identity: the backbone's identity (weights, preprocessing, precision), pooling
(asked and resolved), feature mode, layers (resolved), fit, task, protocol and params, and the dataset and
split it was trained on (`harness.runs.head_file` writes it).

`load_probe(path, backbone=...)` compares that identity with the features it is asked to read and refuses a
mismatch, naming each field: a head fitted on CLS tokens and scored on mean-pooled tokens of the same backbone
gives a plausible, wrong number (docs/api.md shows one). `strict=False` warns instead and marks every result
not comparable (`protocol_params.head.comparable: false`, which also keeps it off the boards of comparable
runs). An evaluation of a loaded head writes a record whose `protocol_params.head` names the file's SHA-256.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.api import run
from harness.runs.saved_head import HeadMismatchError, SavedHead, read_head

__all__ = ["HeadMismatchError", "LoadedProbe", "load_probe", "read_head"]



@dataclass
class LoadedProbe(SavedHead):
    """A saved head (`harness.runs.saved_head.SavedHead`) that can score a dataset through `harness.run`."""

    def evaluate(self, dataset: Any, backbone: str | None = None, **kwargs: Any):
        """The head on a dataset (name, folder or spec), through `harness.run`: extracts with the head's
        backbone, pooling and layers, and returns its RunResult (record, metrics, per-sample scores)."""
        params = {k: v for k, v in self.identity["protocol_params"].items() if k != "head"}
        if self.identity["feature_mode"] == "pooled":
            params.setdefault("pooling", self.identity["pooling_requested"])
        params.setdefault("layers", self.identity["layers"])
        return run(backbone or self.identity["backbone_name"], self.task, dataset, head_file=self.path,
                   strict=self.strict, **{**params, **kwargs})


def load_probe(path: str | Path, backbone: Any = None, *, pooling: str | None = None,
               layers: list[int] | None = None, strict: bool = True, checkpoint: str | None = None) -> LoadedProbe:
    """Load a head; with `backbone` (a name, a built Backbone, or its `describe()` dict), refuse it unless the
    features it would read (that backbone, `pooling`/`layers` or the head's own) are those it was fitted on."""
    loaded = LoadedProbe(**vars(read_head(Path(path), strict)))
    if backbone is None:
        return loaded
    described, resolve = _described(backbone, checkpoint)
    mode = loaded.identity["feature_mode"]
    asked_pooling = pooling or loaded.identity["pooling_requested"]
    request = {"mode": mode, "pooling_resolved": resolve("pooling", asked_pooling) if mode == "pooled" else None,
               "layers_resolved": resolve("layers", layers if layers is not None else loaded.identity["layers"])}
    loaded.check(described, request, loaded.identity["fit"])
    return loaded


def _described(backbone: Any, checkpoint: str | None):
    """(describe() dict, resolver of pooling/layers) for a backbone given by name, object or description."""
    if isinstance(backbone, dict):
        def resolve(kind: str, value: Any) -> Any:
            if kind == "layers":
                count = backbone["num_layers"]
                return sorted({v + count if v < 0 else v for v in value}) if value else [count - 1]
            return backbone["pooling_modes"][0] if value == "default" else value

        return backbone, resolve
    if isinstance(backbone, str):
        from harness.backbones import create_backbone

        backbone = create_backbone(backbone, checkpoint=checkpoint)
    return backbone.describe(), lambda kind, value: (backbone.resolve_pooling(value) if kind == "pooling"
                                                      else backbone.resolve_layers(value))


