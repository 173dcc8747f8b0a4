"""`probe.evaluate(features, targets)`: any probe on in-memory arrays, through the probe's own `run`.

The arrays become what the probe reads from a stage (a manifest of one item per row, a feature lookup that
returns the row, target files where a dense probe reads files), so the numbers are the ones a stage gives for
the same features; tests/test_api.py checks it against `harness.run`.

Each probe declares its form in its own module (`ProbeSpec.arrays`); `features` and `targets` map split name →
array, one row per item:

- `LABELLED_ARRAYS` (classification, retrieval, class_overlap, head_family): features (N, C) pooled; targets (N,)
  int class labels;
- similarity's (`similarity.TRIPLET_ARRAYS`): features (N, 3, C) (reference, left, right); targets (N,) share of
  judgements for left (1.0: left is the closer);
- the dense tasks' (`dense.probes.DenseArrays`): features (N, C, h, w); targets (N, H, W) raw as the task's
  datasets store them ((N, H, W, 3) unit normals);
- the anomaly probes' (`anomaly.arrays.AnomalyArrays`): features (N, C, h, w) of exactly the `train_split` and
  the `eval_split`; targets per split `None` (all defect-free: the training split) or each image's defect type
  (N,) ("good" or the type's name; or int labels, 0 = good, named by `classes`), or {"defect_type": (N,),
  "mask": (N, H, W) bool} for the pixel metrics, which are absent without masks, as on a dataset without them.

Probe parameters are keyword arguments; those not given come from the task's block in ./params.yaml when there
is one. Pooling and layers describe how features were taken, so they are ignored here. A probe without a form
(correspondence, detection, BSDS boundaries, fine-tuning) reads geometry or annotation files that arrays do not
carry, or trains the backbone's own blocks: run it on a dataset (`harness.run`).
"""

from __future__ import annotations

import abc
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.hashing import sha256_bytes
from harness.datasets.manifest import Item, Manifest

if TYPE_CHECKING:
    from harness.probes.base import ProbeResult, ProbeSpec

ARRAYS_DATASET = "arrays"
FEATURE_ONLY_PARAMS = ("pooling", "layers")
Rows = dict[str, np.ndarray]


class ArrayForm(abc.ABC):
    """How a probe's in-memory arrays become a manifest and feature rows; `evaluate` runs the probe on them. Each
    form says how its arrays become items (`manifest`); running them is the same for all."""

    @abc.abstractmethod
    def manifest(self, features: Mapping[str, np.ndarray], targets: Mapping[str, Any], classes: list[str] | None,
                 prepared: Path) -> tuple[Manifest, Rows]:
        """The items (one per row, target files written under `prepared` where the probe reads files) and the
        feature row of each item's path."""

    def check(self, features: Mapping[str, np.ndarray], targets: Mapping[str, Any], classes: list[str] | None,
              params: dict[str, Any]) -> None:
        """Refuse malformed arrays in one line naming the fix, before any work; `params`: the probe's validated
        parameters (a form whose targets mean something per split reads the split names there). Most forms check
        as `manifest` builds the items."""
        return None

    def evaluate(self, spec: ProbeSpec, features: Mapping[str, np.ndarray], targets: Mapping[str, Any], *,
                 seed: int = 0, classes: list[str] | None = None, saved_head: Any = None,
                 device: str = "cpu", **params: Any) -> ProbeResult:
        from harness.core import paths
        from harness.core.devices import resolve_device
        from harness.probes.base import ProbeInputs

        if set(features) != set(targets):
            raise ValueError(f"features and targets must name the same splits; got {sorted(features)} and "
                             f"{sorted(targets)}")
        block = _params(spec, params)
        self.check(features, targets, classes, block)
        with tempfile.TemporaryDirectory(prefix="visbench-arrays-") as tmp, paths.workspace(Path(tmp)):
            manifest, rows = self.manifest(features, targets, classes, paths.dataset_dir(ARRAYS_DATASET))
            # `device`: where a probe that computes with torch (`ProbeSpec.uses_device`) trains; others ignore it
            device = str(resolve_device(device)) if spec.uses_device else "cpu"
            inputs = ProbeInputs(manifest, lambda item: rows[item.path], block, seed, device=device)
            if saved_head is not None:  # a loaded head (`harness.load_probe`): scored, not trained
                return saved_head.evaluate_inputs(inputs)
            return spec.run(inputs)


def _params(spec: ProbeSpec, given: dict[str, Any]) -> dict[str, Any]:
    from harness.core.config import PARAMS_FILE, load_params
    from harness.probes.base import validate_probe_params

    defaults = {}
    if PARAMS_FILE.is_file():
        defaults = dict(load_params().probes.get(spec.name, {}))
    block = validate_probe_params(spec.name, {**defaults, **given})
    return {k: v for k, v in block.items() if k not in FEATURE_ONLY_PARAMS}


def rows_of(features: Mapping[str, np.ndarray], targets: Mapping[str, Any], labelled: bool
          ) -> tuple[list[Item], Rows]:
    items, rows = [], {}
    for split in sorted(features):
        x, y = np.asarray(features[split], dtype=np.float32), targets[split]
        if len(x) != len(y):
            raise ValueError(f"split {split}: {len(x)} feature rows but {len(y)} targets")
        for index in range(len(x)):
            path = f"{split}/{index:06d}"
            items.append(Item(path, sha256_bytes(x[index].tobytes()), split, int(y[index]) if labelled else None))
            rows[path] = x[index]
    return items, rows


def class_names(classes: list[str] | None, top: int) -> list[str]:
    classes = list(classes) if classes is not None else [str(c) for c in range(top + 1)]
    if top >= len(classes):
        raise ValueError(f"label {top} has no class among the {len(classes)} given")
    return classes


class LabelledArrays(ArrayForm):
    """Pooled features (N, C) and int class labels (N,)."""

    def manifest(self, features, targets, classes, prepared):
        items, rows = rows_of(features, targets, labelled=True)
        classes = class_names(classes, max((i.label for i in items), default=-1))
        return Manifest(ARRAYS_DATASET, str(prepared), items, classes, {"source": "arrays"}, {}), rows


LABELLED_ARRAYS = LabelledArrays()
