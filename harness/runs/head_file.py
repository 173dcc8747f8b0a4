"""The head file format (stage side): a trained head's identity and its deterministic safetensors bytes.

Light on purpose: every probe stage imports it to write `<run>.head.safetensors` beside its record. Loading and
checking heads (`load_probe`) lives in `harness.heads.load`, which no stage imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.hashing import canonical_json

if TYPE_CHECKING:
    from harness.probes.base import ProbeHead
    from harness.runs.records import Record

HEAD_FORMAT = "visbench-head/v1"
# ONE metadata key, {"identity": ..., "config": ...} as canonical JSON: safetensors writes its metadata map in no
# fixed order, so two keys would make the same head two different files (and hashes).
METADATA_KEY = "visbench.head"
# Identity fields that decide which features a head reads: each must match, or the head is refused.
FEATURE_FIELDS = ("backbone_identity", "feature_mode", "pooling_resolved", "layers_resolved", "fit")


def head_identity(record: Record, request: dict[str, Any], fit: str, train_split: str | None) -> dict[str, Any]:
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
