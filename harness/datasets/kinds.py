"""Dataset kinds: a registry of `prepare(name, out_dir, **spec) -> Manifest` functions, and the spec check.

A kind's parameters are its prepare function's keyword arguments, so the function signature is the schema:
`validate_dataset_spec` refuses an unknown key (naming the valid ones), a missing one, or a value of the
wrong type before anything is read. By convention a kind reads its data from the parameters `root` or
`source` (a folder): those are the DVC dependencies of its prepare stage and what a grid requires.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, get_type_hints

from pydantic import ConfigDict, ValidationError, create_model

from harness.core.config import out_of_range
from harness.core.registry import Registry, unknown_name_message
from harness.core.validation import describe_validation
from harness.datasets.manifest import MANIFEST_NAME, Manifest

DATASET_KINDS: Registry[Manifest] = Registry("dataset kind", packages=("harness.datasets",))
DATA_PATH_KEYS = ("root", "source")  # spec keys naming the folder a kind reads
_FIXED = ("name", "out_dir")  # what prepare_dataset passes itself


class DatasetError(ValueError):
    """A dataset that cannot be prepared as specified; the message names the folder and the fix."""


def _spec_model(kind: str):
    fn = DATASET_KINDS.get(kind)
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.name in _FIXED:
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    return create_model(f"{kind}_spec", __config__=ConfigDict(extra="forbid", strict=False), **fields)


def validate_dataset_spec(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The spec without `kind`, checked against the kind's prepare signature; one-line errors."""
    if not isinstance(spec, dict) or "kind" not in spec:
        raise DatasetError(f"datasets.{name}: needs `kind:` (one of {', '.join(DATASET_KINDS.names())})")
    kind = spec["kind"]
    if kind not in DATASET_KINDS:
        raise DatasetError(f"datasets.{name}.kind: {unknown_name_message('dataset kind', kind, DATASET_KINDS.names())}")
    body = {k: v for k, v in spec.items() if k != "kind"}
    model = _spec_model(kind)
    try:
        model.model_validate(body)
    except ValidationError as error:
        valid = ", ".join(sorted(model.model_fields))
        problems = describe_validation(error, unknown_note=f" (valid keys for kind {kind}: {valid})")
        raise DatasetError(f"datasets.{name}: {problems}") from None
    for key, value in body.items():
        # counts (images per class, scenes, sizes) start at 1, a seed at 0; `objects` may be 0 (an empty scene)
        problem = out_of_range(f"datasets.{name}.{key}", value, 0 if key == "objects" else 1)
        if problem:
            raise DatasetError(problem)
    for key in DATA_PATH_KEYS:
        if key in body and not str(body[key]).strip():
            raise DatasetError(f"datasets.{name}.{key} is empty: point it at your copy of the data")
    return body


def data_paths(spec: dict[str, Any]) -> list[str]:
    """The folders a dataset spec reads (its prepare stage's data dependencies)."""
    return [str(spec[key]) for key in DATA_PATH_KEYS if spec.get(key)]


def prepare_dataset(
    name: str, spec: dict[str, Any], out_dir: Path, required_splits: tuple[str, ...] = ()
) -> Manifest:
    """Build and save the manifest; refuse a dataset with no items, or with none in a split a task reads."""
    body = validate_dataset_spec(name, spec)
    manifest = DATASET_KINDS.get(spec["kind"])(name, Path(out_dir), **body)
    where = ", ".join(data_paths(spec)) or f"the {spec['kind']} generator"
    if not manifest.items:
        raise DatasetError(f"dataset {name}: 0 items from {where}; check the folder and datasets.{name} "
                           "(docs/extend.md lists the layouts each kind reads)")
    present = {item.split for item in manifest.items}
    missing = [split for split in required_splits if split not in present]
    if missing:
        raise DatasetError(f"dataset {name}: no items in split(s) {', '.join(missing)} that its tasks read "
                           f"(from {where}; it has {', '.join(sorted(present))}): fix the data or the probes' "
                           "train_split/eval_split")
    manifest.save(Path(out_dir) / MANIFEST_NAME)
    return manifest
