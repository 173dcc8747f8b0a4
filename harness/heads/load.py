"""Probe heads as artifacts: saved beside each trained run's record, loaded only onto the features they fit.

A head file is safetensors (tensors and a string metadata block; loading it runs no code, unlike a pickle):
the head's tensors (weights, and the feature statistics it standardises with) and, under `visbench.head`, its
config (what rebuilds it) and identity: the backbone's identity (weights, preprocessing, precision), pooling
(asked and resolved), feature mode, layers (resolved), fit, task, protocol and params, and the dataset and
split it was trained on (`harness.heads.file` writes it).

`load_probe(path, backbone=...)` compares that identity with the features it is asked to read and refuses a
mismatch, naming each field: a head fitted on CLS tokens and scored on mean-pooled tokens of the same backbone
gives a plausible, wrong number (docs/api.md shows one). `strict=False` warns instead and marks every result
not comparable (`protocol_params.head.comparable: false`, which also keeps it off the boards of comparable
runs). An evaluation of a loaded head writes a record whose `protocol_params.head` names the file's SHA-256.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.hashing import sha256_file
from harness.heads.file import FEATURE_FIELDS, HEAD_FORMAT, METADATA_KEY

if TYPE_CHECKING:
    from harness.probes.base import ProbeHead, ProbeInputs, ProbeResult



class HeadMismatchError(ValueError):
    """A head asked to read features other than those it was fitted on; the message names every field."""


@dataclass
class LoadedProbe:
    """A head read from a file: its tensors and config (`head`), identity, file SHA-256, and whether results
    from it are comparable (False once a mismatch was allowed with strict=False)."""

    path: Path
    head: ProbeHead
    identity: dict[str, Any]
    sha256: str
    strict: bool = True
    mismatches: list[str] = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        return not self.mismatches

    @property
    def task(self) -> str:
        return self.identity["task"]

    def check(self, backbone: dict[str, Any], request: dict[str, Any], fit: str) -> list[str]:
        """Every field where the features `backbone` (described) gives for `request` differ from the head's.
        Strict: refuse them (HeadMismatchError); otherwise warn, and remember them (results not comparable)."""
        wanted = {"backbone_identity": backbone["identity"], "feature_mode": request["mode"],
                  "pooling_resolved": request.get("pooling_resolved"),
                  "layers_resolved": list(request["layers_resolved"]), "fit": fit}
        problems = []
        for name in FEATURE_FIELDS:
            have, asked = self.identity.get(name), wanted[name]
            if have != asked:
                problems.append(f"{name}: the head was fitted on {_show(name, have, self.identity)}; asked for "
                                f"{_show(name, asked, {'backbone_name': backbone.get('name')})}")
        if problems and self.strict:
            raise HeadMismatchError(f"{self.path}: refused: " + "; ".join(problems)
                                    + " (load_probe(..., strict=False) evaluates it anyway, marked not comparable)")
        for problem in problems:
            warnings.warn(f"{self.path}: {problem}; results are marked not comparable", stacklevel=2)
        self.mismatches = sorted(set(self.mismatches) | set(problems))
        return problems

    def provenance(self) -> dict[str, Any]:
        """What a record evaluated with this head says about it (protocol_params.head)."""
        return {"sha256": self.sha256, "run_id": self.identity["run_id"], "trained_on": self.identity["trained_on"],
                "comparable": self.comparable, **({"mismatches": self.mismatches} if self.mismatches else {})}

    def evaluate_inputs(self, inputs: ProbeInputs) -> ProbeResult:
        """Score the head on probe inputs (a stage's, or arrays'), training nothing."""
        from harness.probes import get_probe

        spec = get_probe(self.task)
        if spec.score_head is None:
            raise ValueError(f"task {self.task} cannot score a saved head")
        return spec.score_head(inputs, self.head)

    def evaluate(self, dataset: Any, backbone: str | None = None, **kwargs: Any):
        """The head on a dataset (name, folder or spec), through `harness.run`: extracts with the head's
        backbone, pooling and layers, and returns its RunResult (record, metrics, per-sample scores)."""
        from harness.api import run

        params = {k: v for k, v in self.identity["protocol_params"].items() if k != "head"}
        if self.identity["feature_mode"] == "pooled":
            params.setdefault("pooling", self.identity["pooling_requested"])
        params.setdefault("layers", self.identity["layers"])
        return run(backbone or self.identity["backbone_name"], self.task, dataset, head_file=self.path,
                   strict=self.strict, **{**params, **kwargs})


def read_head(path: Path, strict: bool = True) -> LoadedProbe:
    """The head file's tensors, config and identity; a file that is not a visbench head is refused."""
    from safetensors import safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="numpy") as handle:
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (not a dict)
    except Exception as error:  # safetensors raises its own error types for a bad header or a short file
        raise HeadMismatchError(f"{path}: not a readable safetensors head file ({error})") from None
    if METADATA_KEY not in metadata:
        raise HeadMismatchError(f"{path}: a safetensors file without a visbench head identity (metadata keys: "
                                f"{', '.join(sorted(metadata)) or 'none'})")
    block = json.loads(metadata[METADATA_KEY])
    identity = block.get("identity", {})
    if identity.get("format") != HEAD_FORMAT:
        raise HeadMismatchError(f"{path}: head format {identity.get('format')!r}; this harness reads {HEAD_FORMAT}")
    from harness.probes.base import ProbeHead

    return LoadedProbe(path, ProbeHead(tensors, block["config"]), identity, sha256_file(path), strict)


def load_probe(path: str | Path, backbone: Any = None, *, pooling: str | None = None,
               layers: list[int] | None = None, strict: bool = True, checkpoint: str | None = None) -> LoadedProbe:
    """Load a head; with `backbone` (a name, a built Backbone, or its `describe()` dict), refuse it unless the
    features it would read (that backbone, `pooling`/`layers` or the head's own) are those it was fitted on."""
    loaded = read_head(Path(path), strict)
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


def _show(name: str, value: Any, context: dict[str, Any]) -> str:
    if name == "backbone_identity":
        return f"{context.get('backbone_name')} (identity {value})"
    return repr(value)


def evaluate_head(path: Path, grid: str, task: str, backbone: str, params: Any, strict: bool = True):
    """A saved head scored by one run (`harness.run(..., head_file=...)`): its record and samples written as a
    probe stage writes them, or its failed record under failures/ and StageFailed."""
    from harness.core import paths
    from harness.core.atomic import write_text_atomic
    from harness.probes import validate_probe_params
    from harness.runs.probe_run import job_from_params, run_probe
    from harness.runs.records import dump_record
    from harness.stages.common import StageFailed

    loaded = read_head(path, strict)
    job = job_from_params(params, grid, task, backbone)
    record, samples_text = run_probe(job, params, validate_probe_params(task, params.probes[task]), None, loaded)
    if record.status != "ok":
        write_text_atomic(paths.failure_path(job.stage), dump_record(record) + "\n")
        raise StageFailed(f"{job.stage}: {record.failure.phase}: {record.failure.error_type}: {record.failure.message}")
    write_text_atomic(paths.samples_path(grid, task, backbone), samples_text)
    write_text_atomic(paths.record_path(grid, task, backbone), dump_record(record) + "\n")
    return record


def head_probe_block(path: Path) -> dict[str, Any]:
    """The probe parameters a head was trained with (its protocol's, less few-shot subset details), with the
    pooling and layers of its features: what an evaluation of it reads unless told otherwise."""
    from harness.probes import get_probe

    identity = read_head(path).identity
    fields = get_probe(identity["task"]).params.model_fields
    block = {k: v for k, v in identity["protocol_params"].items() if k in fields}
    if "pooling" in fields:
        block["pooling"] = identity["pooling_requested"]
    block["layers"] = identity["layers"]
    return block
