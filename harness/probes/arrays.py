"""`probe.evaluate(features, targets)`: any probe on in-memory arrays, through the probe's own `run`.

The arrays become what the probe reads from a stage (a manifest of one item per row, a feature lookup that
returns the row, target files where a dense probe reads files), so the numbers are the ones a stage gives for
the same features; tests/test_api.py checks it against `harness.run`.

`features` and `targets` map split name → array, one row per item:

- classification, retrieval: features (N, C) pooled; targets (N,) int class labels;
- similarity: features (N, 3, C) (reference, left, right); targets (N,) share of judgements for left (1.0:
  left is the closer);
- dense tasks (depth, surface_normal, generic/semantic_segmentation, edge, keypoints2d, occlusion_edge):
  features (N, C, h, w); targets (N, H, W) raw as the task's datasets store them ((N, H, W, 3) unit normals).

Probe parameters are keyword arguments; those not given come from the task's block in ./params.yaml when there
is one. Pooling and layers describe how features were taken, so they are ignored here. Correspondence,
detection and BSDS boundaries read geometry or annotation files that arrays do not carry, and fine-tuning
trains the backbone's own blocks: run them on a dataset (`harness.run`).
"""

from __future__ import annotations

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
LABELLED = ("classification", "retrieval")
UNSUPPORTED = ("correspondence", "detection", "edge_bsds", "finetune_classification")
FEATURE_ONLY_PARAMS = ("pooling", "layers")


def evaluate_arrays(spec: ProbeSpec, features: Mapping[str, np.ndarray], targets: Mapping[str, Any], *,
                    seed: int = 0, classes: list[str] | None = None, saved_head: Any = None,
                    device: str = "cpu", **params: Any) -> ProbeResult:
    from harness.core import paths
    from harness.core.devices import resolve_device
    from harness.probes.base import ProbeInputs

    if spec.name in UNSUPPORTED:
        raise ValueError(f"{spec.name} reads geometry or annotation files, or trains backbone blocks, not arrays: "
                         "run it on a dataset with harness.run")
    if set(features) != set(targets):
        raise ValueError(f"features and targets must name the same splits; got {sorted(features)} and "
                         f"{sorted(targets)}")
    block = _params(spec, params)
    with tempfile.TemporaryDirectory(prefix="visbench-arrays-") as tmp, paths.workspace(Path(tmp)):
        manifest, rows = _manifest(spec, features, targets, classes, paths.dataset_dir(ARRAYS_DATASET))
        # `device`: where a probe that computes with torch (`ProbeSpec.uses_device`) trains; others ignore it
        device = str(resolve_device(device)) if spec.uses_device else "cpu"
        inputs = ProbeInputs(manifest, lambda item: rows[item.path], block, seed, device=device)
        if saved_head is not None:  # a loaded head (`harness.heads.load.load_probe`): scored, not trained
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


def _manifest(spec: ProbeSpec, features: Mapping[str, np.ndarray], targets: Mapping[str, Any],
              classes: list[str] | None, prepared: Path) -> tuple[Manifest, dict[str, np.ndarray]]:
    labelled = spec.name in LABELLED
    if spec.name == "similarity":
        items, rows, extra = _triplets(features, targets)
        return Manifest(ARRAYS_DATASET, str(prepared), items, [], {"source": "arrays"}, extra), rows
    items, rows, extra = [], {}, {}
    for split in sorted(features):
        x, y = np.asarray(features[split], dtype=np.float32), targets[split]
        if len(x) != len(y):
            raise ValueError(f"split {split}: {len(x)} feature rows but {len(y)} targets")
        for index in range(len(x)):
            path = f"{split}/{index:06d}"
            label = int(y[index]) if labelled else None
            items.append(Item(path, sha256_bytes(x[index].tobytes()), split, label))
            rows[path] = x[index]
    if labelled:
        top = max((i.label for i in items), default=-1)
        classes = list(classes) if classes is not None else [str(c) for c in range(top + 1)]
        if top >= len(classes):
            raise ValueError(f"label {top} has no class among the {len(classes)} given")
    elif spec.feature_mode == "dense":
        extra = {"targets": _dense_targets(spec, targets, prepared)}
        if spec.name == "semantic_segmentation":
            top = max(int(np.max(np.asarray(t))) for t in targets.values())
            classes = list(classes) if classes is not None else [str(c) for c in range(top + 1)]
    else:
        raise ValueError(f"{spec.name}: no array form")
    return Manifest(ARRAYS_DATASET, str(prepared), items, classes or [], {"source": "arrays"}, extra), rows


def _triplets(features, targets) -> tuple[list[Item], dict[str, np.ndarray], dict[str, Any]]:
    """(N, 3, C) rows → three items each, and the 2AFC triplet records the similarity probe reads."""
    from harness.datasets.two_afc import DISTORTION_ORDER

    items, rows, triplets = [], {}, []
    for split in sorted(features):
        x = np.asarray(features[split], dtype=np.float32)
        if x.ndim != 3 or x.shape[1] != 3:
            raise ValueError(f"similarity features are (N, 3, C): reference, left, right; got {x.shape}")
        shares = np.asarray(targets[split], dtype=np.float64)
        if len(shares) != len(x):
            raise ValueError(f"split {split}: {len(x)} triplets but {len(shares)} targets")
        for index, share in enumerate(shares):
            names = {}
            for side, row in zip(("ref", "left", "right"), x[index], strict=True):
                path = f"{split}/{index:06d}_{side}"
                items.append(Item(path, sha256_bytes(row.tobytes()), split))
                rows[path] = row
                names[side] = path
            triplets.append({"id": f"{split}/{index:06d}", **names, "split": split, "left_vote": float(share),
                             "right_vote": float(1.0 - share), "votes": 1})
    return items, rows, {"triplets": triplets, "reference": DISTORTION_ORDER, "human_votes": False}


def _dense_targets(spec: ProbeSpec, targets: Mapping[str, Any], prepared: Path) -> dict[str, dict]:
    """Each item's raw target saved as .npy in the prepared folder, where the dense probes read targets."""
    from harness.datasets.dense_targets import save_npy
    from harness.probes.dense.probes import DENSE_TASKS

    names = DENSE_TASKS[spec.name].target
    name = names if isinstance(names, str) else names[0]
    entries = {}
    for split in sorted(targets):
        for index, target in enumerate(targets[split]):
            path = f"{split}/{index:06d}"
            entries[path] = {name: save_npy(prepared, f"{path}/{name}.npy", np.asarray(target))}
    return entries
