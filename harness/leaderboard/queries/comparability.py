"""Which runs may be ranked against each other.

Two runs share a board only when everything that changes the number, other than what is being compared,
is the same: the task and its versioned protocol with its parameters, the exact dataset content and split,
how features were taken (pooling as requested, feature mode, precision) and, for a few-shot run, k. The
comparability key is a short hash of exactly those fields, so it is derived, never written by hand.

What is being compared is a board row: a backbone *with the layers its features were read from*. So
`layers` is not in the key: "efficientnet_lite0 · layers 3" and "efficientnet_lite0 · last layer" are two
rows of one depth board, answering the same question with different features (`db` labels them).
`image_size` is not in the key either: it is the crop of the backbone's own preprocessing
(`probe_run` copies `preprocess["crop"]`), native to each network (CIFAR ResNets 32 px, EfficientNet-Lite0
224 px, Lite1 240, Lite2 260) and already hashed into the backbone identity, like its mean and std. Keeping
it would give each backbone a board of its own and rank nothing; the dataset content, split and target
size, which the input size does not change, are what make the numbers comparable.

The probe's own seed (`probes.TASK.seed`, set only by a seed sweep) is not in the key either: runs that differ in it
alone are replicates of one board row (`is_seed_replicate`), kept off the board (`db` puts them in a table of their
own) and read for the row's seed-to-seed spread. Where a probe's seed also draws its evaluation (relative_depth's
pairs), the sweep pins that draw to seed 0's (`pairs_seed: 0`, one of `SEED_ZERO_DRAWS`): such a replicate is the
same evaluation as the seed-0 row, so it shares its board; one with another draw is an evaluation of its own.

Few-shot runs are never ranked (`db` keeps them off the boards: each backbone has one run per seed).
Their `curve_key` drops k and the subset (seed, size, items) from the key: the runs one learning curve
is drawn from, every k and seed of every backbone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.core.hashing import canonical_json, hash_json
from harness.runs.fewshot import SUBSET_PARAMS
from harness.runs.records import Record

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
    "precision",
    "k_shot",
)

_KEY_LENGTH = 12
HEAD_PROVENANCE = ("sha256", "run_id")  # protocol_params.head keys that identify one head file
REPLICATE_PARAM = "seed"  # the probe parameter a seed sweep sets (harness.probes.base.ProbeParams.seed)
# Probe parameters that draw the evaluation apart from the head; a replicate that sets one to 0 is scored as the
# seed-0 row is (relative_depth's pairs_seed: unset, the run's seed draws the pairs)
SEED_ZERO_DRAWS = ("pairs_seed",)


class ComparabilityError(ValueError):
    """Runs that were asked to share a board but differ in something that changes the number."""


def comparability_fields(record: Record) -> dict[str, Any]:
    """The values of COMPARABILITY_FIELDS for one record (None where the dataset is missing).

    k_shot is left out when None, so a full-split run keeps the key it had before few-shot runs existed
    (and with it its board's anchor and the bootstrap seeds derived from the key).
    """
    fields = {path: _field_value(record, path) for path in COMPARABILITY_FIELDS}
    if fields["k_shot"] is None:
        del fields["k_shot"]
    if REPLICATE_PARAM in record.protocol_params:  # a replicate: the board is its seed-0 row's
        fields["protocol_params"] = {k: v for k, v in record.protocol_params.items()
                                     if k != REPLICATE_PARAM and not (k in SEED_ZERO_DRAWS and v == 0)}
    head = record.protocol_params.get("head")
    if isinstance(head, dict):
        # A shared head's evaluation: runs of different backbones each read their own head, so the file (its
        # SHA-256, its run) is provenance, not part of the key; how the heads were trained (the params, the
        # training data) and whether the head was allowed a mismatch (comparable: false) are.
        kept = {k: v for k, v in head.items() if k not in HEAD_PROVENANCE}
        fields["protocol_params"] = {**fields["protocol_params"], "head": kept}
    return fields


def is_seed_replicate(record: Record) -> bool:
    """Whether a full-split run re-trained its head with a probe seed of its own: a seed sweep's replicate."""
    return record.k_shot is None and REPLICATE_PARAM in record.protocol_params


def comparability_key(record: Record) -> str:
    return hash_json(comparability_fields(record), length=_KEY_LENGTH)


def curve_key(record: Record) -> str:
    """The learning curve a few-shot run belongs to: its comparability fields less k and the subset."""
    fields = comparability_fields(record)
    fields.pop("k_shot", None)
    fields["protocol_params"] = {k: v for k, v in record.protocol_params.items() if k not in SUBSET_PARAMS}
    return hash_json({"curve": fields}, length=_KEY_LENGTH)


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
