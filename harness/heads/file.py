"""The head file: a trained head's identity, its deterministic safetensors bytes, and reading one back, checked
against the features it is asked to read.

A head file is safetensors (tensors and a string metadata block; loading it runs no code, unlike a pickle): the
head's tensors (weights, and the feature statistics it standardises with) and, under `visbench.head`, its config
(what rebuilds it) and identity: the backbone's identity (weights, preprocessing, precision), pooling (asked and
resolved), feature mode, layers (resolved), fit, task, protocol and params, and the dataset and split it was
trained on. Every probe stage writes one beside its record (`harness.runs.probe_run`), so this module stays light:
no torch, no API.

A mismatch between the head's identity and the features asked for is refused, naming each field: a head fitted on
CLS tokens and scored on mean-pooled tokens of the same backbone gives a plausible, wrong number (docs/api.md shows
one). `strict=False` warns instead and marks every result not comparable (`protocol_params.head.comparable:
false`, which also keeps it off the boards of comparable runs). Users load heads through `harness.load_probe`.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from harness.core.hashing import canonical_json, sha256_file

if TYPE_CHECKING:
    from harness.probes.base import ProbeHead, ProbeInputs, ProbeResult

HEAD_FORMAT = "visbench-head/v1"
# ONE metadata key, {"identity": ..., "config": ...} as canonical JSON: safetensors writes its metadata map in no
# fixed order, so two keys would make the same head two different files (and hashes).
METADATA_KEY = "visbench.head"
# Identity fields that decide which features a head reads: each must match, or the head is refused.
FEATURE_FIELDS = ("backbone_identity", "feature_mode", "pooling_resolved", "layers_resolved", "fit")


class TrainedRun(Protocol):
    """What a head's identity copies from the record of the run that trained it (a `harness.runs.records.Record`).
    Described by its fields, not imported: the runs layer, which writes records, sits above this package."""

    run_id: str
    task: str
    protocol: str
    protocol_params: dict[str, Any]
    backbone_name: str
    backbone: Any  # its .identity and .control
    dataset: Any  # its .name and .identity
    pooling_requested: str
    feature_mode: str
    layers: list[int] | None
    precision: str
    image_size: int | None
    seed: int
    k_shot: int | None
    metrics: dict[str, float]


def head_identity(record: TrainedRun, request: dict[str, Any], fit: str, train_split: str | None) -> dict[str, Any]:
    """What a head trained in `record`'s run was fitted on (request: the extraction's resolved feature request)."""
    return {
        "format": HEAD_FORMAT, "run_id": record.run_id, "task": record.task, "protocol": record.protocol,
        "protocol_params": record.protocol_params, "backbone_name": record.backbone_name,
        "backbone_identity": record.backbone.identity, "control": record.backbone.control,
        "pooling_requested": record.pooling_requested, "pooling_resolved": request.get("pooling_resolved"),
        "feature_mode": record.feature_mode, "layers": record.layers,
        "layers_resolved": list(request["layers_resolved"]), "fit": fit, "precision": record.precision,
        "image_size": record.image_size, "seed": record.seed, "k_shot": record.k_shot,
        "trained_on": {"dataset": record.dataset.name, "identity": record.dataset.identity, "split": train_split},
        "metrics": record.metrics,
    }


def serialize_head(head: ProbeHead, identity: dict[str, Any]) -> bytes:
    """Deterministic bytes (sorted tensors, canonical JSON): the same head gives the same file, and its hash."""
    from safetensors.numpy import save

    tensors = {name: np.ascontiguousarray(array) for name, array in sorted(head.tensors.items())}
    return save(tensors, metadata={METADATA_KEY: canonical_json({"identity": identity, "config": head.config})})


class HeadMismatchError(ValueError):
    """A head asked to read features other than those it was fitted on; the message names every field."""


@dataclass
class SavedHead:
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


def read_head(path: Path, strict: bool = True) -> SavedHead:
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

    return SavedHead(path, ProbeHead(tensors, block["config"]), identity, sha256_file(path), strict)


def _show(name: str, value: Any, context: dict[str, Any]) -> str:
    if name == "backbone_identity":
        return f"{context.get('backbone_name')} (identity {value})"
    return repr(value)


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
