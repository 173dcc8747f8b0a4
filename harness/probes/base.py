"""The probe registry and the contract every probe follows.

A probe declares its level, protocol name (versioned), feature mode and headline metric, and maps
cached features + a manifest to a `ProbeResult`: metrics plus the per-sample scores behind them. It
never sees a backbone: only arrays read from the cache.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.core.config import COUNT_MAX, out_of_range
from harness.core.registry import Registry
from harness.core.validation import describe_validation
from harness.datasets.manifest import Item, Manifest
from harness.probes.measured_tolerances import CROSS_CPU


@dataclass(frozen=True)
class ProbeHead:
    """A trained probe's head as data: its tensors (weights and the feature statistics it standardises with)
    and the JSON config that rebuilds it (kind, sizes, class names). `harness.heads.file` saves it as safetensors
    beside the record, with the identity of the features it was fitted on."""

    tensors: dict[str, np.ndarray]
    config: dict[str, Any]


@dataclass(frozen=True)
class ProbeResult:
    """A probe's metrics and, for every mean-decomposable metric, its per-sample column.

    `samples[name].mean() == metrics[name]` for every column (probe_run checks it). A metric that does not
    decompose over evaluation samples (macro-F1, BSDS's ODS) has no column; where the spec names a resampled
    statistic for it (`ProbeSpec.statistics`), `auxiliary` holds the per-sample rows it is computed from, so
    the site can resample them; train accuracy has neither.
    """

    metrics: dict[str, float]
    sample_ids: list[str]  # one per row, unique, in the probe's evaluation order
    samples: dict[str, np.ndarray]  # column name -> (len(sample_ids),) float64 scores
    unit: str  # what one sample is: "image", "query", "point"
    head: ProbeHead | None = None  # what was trained (probes that train a head); saving it changes no metric
    auxiliary: dict[str, np.ndarray] = field(default_factory=dict)  # (len(sample_ids),) rows that are not scores
    # metric -> the `harness.probes.resampled` statistic of the columns that reproduces it, with its argument
    # ("macro_f1:10"); every metric in the spec's `statistics` has one
    statistics: dict[str, str] = field(default_factory=dict)
    # What a reader of the record must know to trust its numbers (one line each, naming the fix): the run is ok,
    # its numbers are what ran, and the record carries these beside them.
    warnings: list[str] = field(default_factory=list)


def column_means(columns: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Each per-sample column's mean: the metric it decomposes (`ProbeResult`)."""
    return {name: float(np.mean(column)) for name, column in columns.items()}


class ProbeParams(BaseModel):
    """A probe's block in params.yaml. Every probe declares its own subclass: unknown keys are refused (a
    typo like `lrr` must not split a board), types are checked, and the validated block is what the probe
    and its record see."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The probe's own seed (head initialisation, batch order), default `settings.seed`: a grid that sets it
    # (`probes: {depth: {seed: 1}}`) re-trains the head on the same features, which is how a seed sweep measures
    # a protocol's seed-to-seed spread without touching the backbones (a random control's init is settings.seed).
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] | None = None


# Which layers a probe reads: None (the last layer), explicit indices, or a set each backbone names for itself
# (`last`, `strideN`: its deepest layer of stride at most N; see Backbone.layer_sets), so one grid can compare
# every backbone at, say, its stride-16 layer.
Layers = list[int] | Annotated[str, Field(pattern=r"^(last|stride[0-9]+)$")] | None


class PooledParams(ProbeParams):
    pooling: str = "default"  # the backbone's default pooling, or one it lists (cls, avg, mean, proj)
    layers: Layers = None


class ArraysEvaluator(Protocol):
    """What `ProbeSpec.evaluate` asks of a probe's `arrays` form: run the spec on in-memory arrays. The forms are
    `harness.probes.arrays.ArrayForm`s; that module is built on this one, so the spec names only this."""

    def evaluate(self, spec: ProbeSpec, features: Mapping[str, np.ndarray], targets: Mapping[str, Any],
                 **kwargs: Any) -> ProbeResult: ...


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    level: Literal["high", "mid", "low"]
    protocol: str
    feature_mode: Literal["pooled", "dense"]
    headline: str
    run: Callable[[ProbeInputs], ProbeResult]
    params: type[ProbeParams]  # the schema of probes.<name> in params.yaml
    lower_is_better: frozenset[str] = frozenset()
    # |difference| `verify` accepts on a metric the cross-CPU measurement (`measured_tolerances`) does not cover: the
    # same CPU build reproduces a run exactly.
    tolerance: float = 0.0
    # A task whose datasets answer to different references (NIGHTS' human votes vs a synthetic ordering)
    # names the protocol per dataset, so their runs can never share a board.
    protocol_for: Callable[[Manifest], str] | None = None
    # how an image becomes the backbone's square input for this probe's features (harness.core.preprocessing)
    fit: Literal["crop", "squash"] = "crop"
    # What k counts when the probe trains on a few-shot subset of its `train_split` (`harness.runs.fewshot`):
    # k images of every class, or k images in all. None: few-shot does not apply (nothing is trained).
    fewshot_unit: Literal["images_per_class", "images"] | None = None
    # Score a saved head (`ProbeResult.head`) on the inputs' evaluation split without training: what a shared
    # head's evaluation runs. None: the probe saves no head (it trains nothing, or its head is not saved yet).
    score_head: Callable[[ProbeInputs, ProbeHead], ProbeResult] | None = None
    # Whether the probe computes with torch on the run's device (`ProbeInputs.device`: dense heads, detection,
    # fine-tuning). Pooled probes fit NumPy/linear heads on the CPU whatever the run asked for, and their
    # records say so.
    uses_device: bool = False
    # Metrics with no per-sample column that the site can still resample: metric name -> the base name of a
    # statistic in `harness.probes.resampled`, computed from the result's auxiliary columns; each result names
    # the statistic in full (`ProbeResult.statistics`) and probe_run checks it reproduces the metric.
    statistics: Mapping[str, str] = field(default_factory=dict)
    # How `evaluate` turns in-memory arrays into what the probe reads (`harness.probes.arrays`), declared by the
    # probe's own module; None: the probe reads geometry or annotation files, so it runs on datasets only.
    arrays: ArraysEvaluator | None = None
    # The probe parameter that may name another metric as the headline (a protocol for class-imbalanced data
    # declares `headline: macro_f1`); None: the headline is always `headline`.
    headline_param: str | None = None
    # The folder layout a user's own data for this probe is in (`harness.runs.own_data`): class folders, a
    # NIGHTS-style 2AFC folder, a VOC-style detection folder, a dense folder (images/ + one folder per target), or
    # an MVTec AD-style anomaly folder (train/good, test/<type>, ground_truth/<type>).
    # None: the probe reads a dataset made for it (warped photos, rendered scenes, BSDS annotations).
    folder_layout: Literal["class_folders", "nights", "voc_detection", "dense_folder", "anomaly_folder"] | None = None
    # The probe parameters naming the split it scores and the one(s) it trains on (None: it trains nothing).
    eval_split_param: str = "eval_split"
    train_split_param: str | None = "train_split"

    def resolve_headline(self, params: Mapping[str, Any]) -> str:
        """The headline a run with these probe parameters reports: `headline`, unless the probe lets a parameter
        choose it."""
        return str(params.get(self.headline_param, self.headline)) if self.headline_param else self.headline

    def resolve_protocol(self, manifest: Manifest | None) -> str:
        if manifest is None or self.protocol_for is None:
            return self.protocol
        return self.protocol_for(manifest)

    def higher_is_better(self, metrics: dict[str, float]) -> dict[str, bool]:
        return {name: name not in self.lower_is_better for name in metrics}

    def tolerances(self, metrics: dict[str, float], protocol: str | None = None) -> dict[str, float]:
        """|difference| a re-run may show on each metric: what two CPU kinds were measured to differ by on
        `protocol` (default: the spec's own), `absolute + relative × |value|`, else the declared `tolerance`. A metric
        that is another's statistic under a second name (`edge_correlation` is `pearson`'s pooled Pearson r) takes
        the measured tolerance of the one it shares its statistic with."""
        measured = CROSS_CPU.get(protocol or self.protocol, {})
        same_statistic = {self.statistics[name]: name for name in sorted(measured) if name in self.statistics}
        tolerances = {}
        for name, value in metrics.items():
            measured_as = name if name in measured else same_statistic.get(self.statistics.get(name, ""))
            if measured_as is not None and math.isfinite(value):
                absolute, relative, _ = measured[measured_as]
                tolerances[name] = absolute + relative * abs(value)
            else:
                tolerances[name] = self.tolerance
        return tolerances

    def evaluate(self, features: dict[str, np.ndarray], targets: dict[str, Any], **kwargs: Any) -> ProbeResult:
        """This probe on in-memory arrays, split name → rows (its `arrays` form says the shapes); keyword arguments
        are probe parameters (the rest from ./params.yaml), `seed`, `classes`, `saved_head`, `device`."""
        if self.arrays is None:
            raise ValueError(f"{self.name} reads geometry or annotation files, or trains backbone blocks, not "
                             "arrays: run it on a dataset with harness.run")
        return self.arrays.evaluate(self, features, targets, **kwargs)


PROBES: Registry[ProbeSpec] = Registry("task", packages=("harness.probes",))


def register_probe(spec: ProbeSpec, module: str | None = None) -> ProbeSpec:
    """Register `spec` under its name. The module that defines the task is what its DVC stages depend on:
    `module`, or else our caller (a helper that registers for its callers, like `register_dense_probe`, passes
    its own caller's)."""
    PROBES.register(spec.name, module=module or sys._getframe(1).f_globals.get("__name__"))(lambda: spec)
    return spec


def get_probe(name: str) -> ProbeSpec:
    return PROBES.get(name)()


def validate_probe_params(task: str, block: Any) -> dict[str, Any]:
    """probes.<task> checked against the task's schema: exactly the keys given (validated), so a record's
    protocol_params are what params.yaml says; one-line errors that name the valid keys."""
    model = get_probe(task).params
    if not isinstance(block, dict):
        raise ValueError(f"probes.{task} must be a mapping of its parameters; valid keys: "
                         f"{', '.join(model.model_fields)}")
    try:
        validated = model.model_validate(block).model_dump(exclude_unset=True)
    except ValidationError as error:
        problems = describe_validation(error)
        raise ValueError(f"probes.{task}: {problems}; valid keys: {', '.join(model.model_fields)}") from None
    # the ceilings every parameter shares (epochs, seeds, counts, finite reals); the schema keeps its own floors
    problem = out_of_range(f"probes.{task}", validated, -COUNT_MAX)
    if problem:
        raise ValueError(problem)
    return validated


@dataclass
class ProbeInputs:
    """What a probe receives: the manifest and a feature lookup for its items."""

    manifest: Manifest
    features: Callable[[Item], np.ndarray]  # pooled (C,) or dense (C,H,W) for one item
    params: dict[str, Any]
    seed: int
    geometry: Any = None  # preprocessing, for probes that map feature cells back to pixels
    # How to rebuild the backbone that made the features (name, identity, precision, seed, checkpoint), for the
    # one protocol that trains part of it (finetune-last-n); frozen probes never read it.
    backbone: dict[str, Any] | None = None
    # The torch device a probe with `uses_device` trains and predicts on (`harness.core.devices.resolve_device`):
    # its heads and batches move there and its results come back to the CPU as NumPy arrays.
    device: str = "cpu"

    def stack(self, items: list[Item]) -> np.ndarray:
        return np.stack([self.features(item) for item in items])


# A channel's std is floored at this fraction of the root-mean-square std over channels.
STD_FLOOR = 0.1


def floored_std(std: np.ndarray) -> np.ndarray:
    """Per-channel std for standardising features, floored at STD_FLOOR × the RMS std over channels.

    Estimated from a handful of training items (few-shot), a channel that happens to be near-constant
    gets a std near 0, and standardising divides its evaluation values into the millions: measured on
    Fashion-MNIST at 1 image per class, top-1 fell to chance (0.11) with per-channel std + 1e-6 and rose
    to 0.52 with the floor. On full splits the floor barely binds (0.823 → 0.825 there).
    """
    std = np.asarray(std, dtype=np.float64)
    rms = float(np.sqrt(np.mean(std * std))) if std.size else 0.0
    return (np.maximum(std, STD_FLOOR * rms) + 1e-6).astype(np.float32)
