"""Which runs may be ranked against each other.

Two runs share a board only when everything that changes the number, other than the backbone, is the
same: the task and its versioned protocol with its parameters, the exact dataset content and split,
and how features were taken (pooling as requested, feature mode, layers, precision, input size). The
comparability key is a short hash of exactly those fields, so it is derived, never written by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.hashing import canonical_json, hash_json
from harness.records import Record

# Dotted paths into a Record. `pooling_requested`, not `pooling_resolved`: "default" resolves per
# backbone (cls for a ViT, avg for a CNN), and those runs answer the same question.
COMPARABILITY_FIELDS: tuple[str, ...] = (
    "task",
    "protocol",
    "protocol_params",
    "dataset.identity",
    "dataset.split",
    "pooling_requested",
    "feature_mode",
    "layers",
    "precision",
    "image_size",
)

_KEY_LENGTH = 12


class ComparabilityError(ValueError):
    """Runs that were asked to share a board but differ in something that changes the number."""


def comparability_fields(record: Record) -> dict[str, Any]:
    """The values of COMPARABILITY_FIELDS for one record (None where the dataset is missing)."""
    return {path: _field_value(record, path) for path in COMPARABILITY_FIELDS}


def comparability_key(record: Record) -> str:
    return hash_json(comparability_fields(record), length=_KEY_LENGTH)


def check_comparable(records: Sequence[Record]) -> None:
    """Raise ComparabilityError naming every field whose value differs across `records`."""
    differences = []
    for path in COMPARABILITY_FIELDS:
        # Values in order of first appearance, so the message reads in the order the caller gave.
        seen: dict[str, str] = {}
        for record in records:
            value = _field_value(record, path)
            seen.setdefault(canonical_json(value), _display(value))
        if len(seen) > 1:
            differences.append(f"{path} differs ({' vs '.join(seen.values())})")
    if differences:
        raise ComparabilityError("cannot rank together: " + "; ".join(differences))


def _field_value(record: Record, path: str) -> Any:
    value: Any = record
    for part in path.split("."):
        value = None if value is None else getattr(value, part)
    return value


def _display(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)
