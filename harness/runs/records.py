"""The run record: one validated, schema-versioned JSON object per backbone × task run.

Records are the source of truth; the leaderboard site is a pure function of them. Unknown fields and
newer schema versions are refused with a clear error rather than silently dropped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.core.atomic import write_text_atomic
from harness.core.validation import describe_field_errors

# 2: per-sample scores (`samples`); version-1 records read with samples=None.
# 3: `k_shot`, the few-shot training subset size; version-1/2 records read with k_shot=None (full split).
# 4: `warnings`, `dataset.target_sources`, `environment.opencv`; older records read them empty / None.
# 5: `throughput`, the extraction forward's timed speed; older records read it None.
SCHEMA_VERSION = 5


class RecordError(ValueError):
    """A record that cannot be read: bad JSON, unknown fields, or a schema this harness does not know."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackboneInfo(_Strict):
    name: str
    identity: str  # hash of architecture + weights + preprocessing + precision
    control: bool  # random-init "architecture-only" control
    weights: dict[str, Any]
    architecture: dict[str, Any]
    preprocess: dict[str, Any]


class DatasetInfo(_Strict):
    name: str
    identity: str  # hash of the content manifest (file hashes + labels + split)
    split: str
    size: int
    params: dict[str, Any] = Field(default_factory=dict)
    # where each target the dataset holds came from (target name → source: rendered, a dataset's own files, a
    # user's folder), as its prepare stage wrote it in the manifest; a normals board reads which normals it scored
    target_sources: dict[str, str] = Field(default_factory=dict)


class Environment(_Strict):
    harness_version: str
    git_commit: str | None
    git_dirty: bool | None
    python: str
    torch: str
    timm: str | None
    open_clip: str | None
    numpy: str
    opencv: str | None = None  # opencv-python-headless (relative_pose, corners), where installed
    device: str  # what computed the run: `cpu:MODEL:KERNEL_FLAGS:Nthreads` or `cuda:MODEL:sm_XY:…` (core.devices)
    # what computed the features the run read, where that was not the CPU: `cuda:MODEL:…` from the extraction
    features_device: str | None = None
    image: str | None = None  # container image identity, when run inside one
    # The CUDA runtime torch loads: the lock's nvidia-cuda-runtime wheel (pinned and hashed), else the CUDA torch was
    # built against; None for a torch without CUDA, and in records made before the field existed.
    cuda: str | None = None


class Throughput(_Strict):
    """How fast the extraction forward ran where this run's features were computed: one fixed batch of the dataset
    timed by the extract stage (`runs.throughput`), the median of three forwards after a warm-up."""

    images_per_s: float = Field(gt=0)
    batch: int = Field(ge=2)  # images per timed forward
    device: str  # what computed them, as `Environment.device` names a device


class Failure(_Strict):
    phase: str  # which step failed: load_backbone, extract, probe, ...
    error_type: str
    message: str


class SamplesInfo(_Strict):
    """Where a run's per-sample scores are: one row per sample, one column per mean-decomposable metric, and the
    auxiliary columns that non-decomposable metrics are recomputed from."""

    path: str  # relative to the project root
    sha256: str  # of the file's bytes
    count: int
    unit: str  # what one row is: "image", "query", "point"
    columns: list[str]  # each column's mean is the record's metric of the same name
    # Columns that are not scores (a label, a prediction, BSDS counts): rows a resampled statistic is computed from.
    auxiliary: list[str] = Field(default_factory=list)
    # metric -> the `harness.probes.resampled` statistic of the auxiliary columns that reproduces it
    statistics: dict[str, str] = Field(default_factory=dict)


class Record(_Strict):
    schema_version: int = SCHEMA_VERSION
    run_id: str  # "<grid>-<task>@<backbone>", the DVC stage name
    backbone: BackboneInfo | None  # None only when the backbone itself failed to build
    backbone_name: str
    task: str
    level: Literal["high", "mid", "low"]
    protocol: str  # versioned protocol name, e.g. "linear-probe-adamw/v1"
    protocol_params: dict[str, Any]
    dataset: DatasetInfo | None
    pooling_requested: str
    pooling_resolved: str | None
    feature_mode: Literal["pooled", "dense"]
    layers: list[int] | None
    precision: str
    image_size: int | None
    seed: int
    metrics: dict[str, float]
    headline_metric: str
    higher_is_better: dict[str, bool]
    tolerances: dict[str, float]  # |difference| allowed by `verify`, per metric
    status: Literal["ok", "failed"]
    failure: Failure | None = None
    duration_s: float
    environment: Environment
    samples: SamplesInfo | None = None
    # Few-shot runs: the probe trained on k items of the training split (per class or in all, as
    # protocol_params["k_shot_unit"] says), chosen with `seed`. None: the full training split.
    k_shot: int | None = Field(default=None, ge=1)
    # what a reader must know to trust an ok run's numbers, one line each naming the fix (`ProbeResult.warnings`)
    warnings: list[str] = Field(default_factory=list)
    # the extraction forward's speed on the device that computed the features (None: not timed, e.g. features made
    # before timing existed, or a run that failed before it read any)
    throughput: Throughput | None = None

    @field_validator("schema_version")
    @classmethod
    def _known_schema(cls, version: int) -> int:
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"record schema_version {version} is newer than this harness understands "
                f"({SCHEMA_VERSION}); upgrade visbench-harness to read it"
            )
        return version

    @field_validator("metrics")
    @classmethod
    def _finite_metrics(cls, metrics: dict[str, float]) -> dict[str, float]:
        bad = sorted(name for name, value in metrics.items() if not math.isfinite(value))
        if bad:
            raise ValueError(f"non-finite metric values (NaN/inf are not JSON): {', '.join(bad)}")
        return metrics

    @model_validator(mode="after")
    def _k_shot_needs_version_3(self) -> Record:
        if self.k_shot is not None and self.schema_version < 3:
            raise ValueError(f"k_shot arrived in schema version 3; this record says {self.schema_version}")
        if self.warnings and self.status != "ok":
            raise ValueError("warnings belong to ok records; a failed record says what failed in `failure`")
        return self

    @property
    def headline(self) -> float | None:
        return self.metrics.get(self.headline_metric)


def parse_record(text: str, source: str = "<record>") -> Record:
    try:
        return Record.model_validate_json(text)
    except ValidationError as error:
        raise RecordError(f"{source}: invalid record: {describe_field_errors(error)}") from None


def dump_record(record: Record) -> str:
    # a record without auxiliary columns is written as before they existed, so its bytes (and hash) stay put
    samples = record.samples
    bare = samples is not None and not (samples.auxiliary or samples.statistics)
    exclude = {"samples": {"auxiliary", "statistics"}} if bare else None
    return json.dumps(record.model_dump(mode="json", exclude=exclude), sort_keys=True, separators=(",", ":"))


def read_records(path: Path) -> list[Record]:
    """Records from a JSON-lines file (one record per line)."""
    records = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if line.strip():
            records.append(parse_record(line, f"{path}:{number}"))
    return records


def write_records(path: Path, records: list[Record]) -> None:
    write_text_atomic(path, "".join(dump_record(r) + "\n" for r in records))
