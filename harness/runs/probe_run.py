"""Turn one probe run into a record: read extraction + manifest, run the probe, describe everything.

A run is a whole probe stage, or one (k, seed) `Shot` of a few-shot stage: then the probe trains on the
subset `harness.runs.fewshot` chooses from its training split, and evaluates as the full run does.

A run goes through phases (extract, load_dataset, select_subset, check_head, probe), one small function each; a
failed record names the phase its run failed in and keeps what the phases before it found.

Nothing is written here: `run_probe` returns a `ProbeOutcome` (the record, the text of its per-sample scores file,
the trained head's bytes), and the probe stage writes them only once every run of the stage has succeeded, so a
failure never replaces what an earlier successful run left.
"""

from __future__ import annotations

import math
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.core import paths
from harness.core.config import ConfigError, Params
from harness.core.devices import requested_device, resolve_device, set_deterministic
from harness.core.preprocessing import Preprocess
from harness.core.run_key import BackboneRef, RunKey, Shot
from harness.datasets.manifest import Manifest
from harness.heads.file import SavedHead, head_identity, serialize_head
from harness.probes import ProbeInputs, ProbeResult, ProbeSpec, get_probe
from harness.runs.environment import environment_fingerprint
from harness.runs.failed_records import failed_record
from harness.runs.feature_cache import FeatureCache, entry_keys, read_extraction
from harness.runs.fewshot import UNIT_PARAM, fewshot_manifest
from harness.runs.records import BackboneInfo, DatasetInfo, Failure, Record, SamplesInfo
from harness.runs.samples import samples_file
from harness.runs.throughput import read_throughput


class MissingFeatureError(RuntimeError):
    pass


def _feature_lookup(cache: FeatureCache, backbone: dict[str, Any], request: dict[str, Any]):
    def lookup(item):
        key = entry_keys(backbone, [request], item)[0]
        corrupt = cache.corrupt
        array = cache.get(key)
        if array is None and cache.corrupt > corrupt:  # removed (here and in DVC's cache) by `get`
            raise MissingFeatureError(
                f"the feature entry {cache.path(key)} of {item.path} failed its recorded hash and was removed: "
                "the next plain run re-extracts it")
        if array is None:
            raise MissingFeatureError(
                f"no cached feature for {item.path} (key {key}); re-run the extract stage"
            )
        return array

    return lookup


def _matching_request(extraction: dict[str, Any], mode: str, pooling: str, layers, fit: str = "crop") -> dict[str, Any]:
    def spelled(value):  # a named set stays a name; indices compare as a list; [] and None mean the last layer
        return value if isinstance(value, str) else (list(value) if value else None)

    for request in extraction["requests"]:
        if request["mode"] == mode and (mode == "dense" or request["pooling"] == pooling) and (
            spelled(request["layers"]) == spelled(layers)
        ) and request.get("fit", "crop") == fit:
            return request
    raise MissingFeatureError(
        f"extraction has no {mode} features with pooling={pooling} layers={layers} fit={fit}")


def check_result(spec: ProbeSpec, result: ProbeResult, headline: str | None = None) -> None:
    """Refuse a result whose metrics are non-finite, lack the headline, or disagree with their samples: a score
    column's mean, and each resampled statistic recomputed from the auxiliary columns, must be the metric."""
    from harness.probes import resampled

    metrics = result.metrics
    non_finite = sorted(k for k, v in metrics.items() if not math.isfinite(v))
    if non_finite:
        raise ValueError(f"probe produced non-finite metrics: {', '.join(non_finite)}")
    headline = headline or spec.headline
    if headline not in metrics:
        raise KeyError(f"headline metric {headline!r} not produced; got {sorted(metrics)}")
    both = sorted(result.auxiliary.keys() & result.samples.keys())
    if both:
        raise ValueError(f"column {both[0]!r} is both a per-sample score and an auxiliary column")
    for name, column in sorted({**result.samples, **result.auxiliary}.items()):
        if len(column) != len(result.sample_ids):
            raise ValueError(f"per-sample column {name!r} has {len(column)} rows for {len(result.sample_ids)} ids")
        if name in result.auxiliary:
            if name in metrics:
                raise ValueError(f"auxiliary column {name!r} has the name of a metric; a metric's column is a score")
            if not np.all(np.isfinite(column)):
                raise ValueError(f"auxiliary column {name!r} has non-finite values")
            continue
        if name not in metrics:
            raise ValueError(f"per-sample column {name!r} has no metric of that name")
        if not np.isclose(np.mean(column), metrics[name], rtol=0, atol=1e-12):
            raise ValueError(f"metric {name}={metrics[name]!r} is not the mean of its per-sample column "
                             f"({np.mean(column)!r})")
    columns = {**result.samples, **result.auxiliary}
    for name, base in sorted(spec.statistics.items()):
        if name not in metrics:
            raise KeyError(f"the probe declares a resampled {name!r} but produced no metric of that name")
        if resampled.base_name(result.statistics.get(name, "")) != base:
            raise ValueError(f"the probe declares {name!r} as {base}, but its result names "
                             f"{result.statistics.get(name)!r}")
    for name, statistic in sorted(result.statistics.items()):
        if name not in spec.statistics:
            raise ValueError(f"the result names a statistic for {name!r}, which its probe does not declare")
        value = float(resampled.evaluate(statistic, columns)[0])
        if not abs(value - metrics[name]) <= 1e-12 * max(1.0, abs(metrics[name])):
            raise ValueError(f"metric {name}={metrics[name]!r} is not {statistic} of its auxiliary columns ({value!r})")


def fewshot_unit(task: str) -> str:
    """The task's few-shot unit; a task that trains nothing has none, and a few-shot grid may not list it."""
    from harness.probes import PROBES

    unit = get_probe(task).fewshot_unit
    if unit is None:
        able = [name for name in PROBES.names() if get_probe(name).fewshot_unit is not None]
        raise ConfigError(f"task {task!r} has no few-shot protocol (it trains no probe); tasks that do: "
                          f"{', '.join(able)}")
    return unit


@dataclass(frozen=True)
class ProbeJob:
    """One probe stage: the run's grid, task and backbone (stage spelling), the dataset it reads, and the grid
    whose extract stage made its features. The generated dvc.yaml passes these on the command line."""

    grid: str
    task: str
    backbone: str
    dataset: str
    feature_grid: str

    @property
    def key(self) -> RunKey:
        """The stage as a value; a few-shot stage's run at (k, seed) is `key.at(shot)`."""
        return RunKey(self.grid, self.task, BackboneRef.parse(self.backbone))

    @property
    def stage(self) -> str:
        return self.key.stage


def job_from_params(params: Params, grid: str, task: str, backbone: str) -> ProbeJob:
    spec = params.grids[grid]
    dataset = spec.tasks[task]
    return ProbeJob(grid, task, backbone, dataset, spec.feature_grid(grid, dataset))


@dataclass(frozen=True)
class ProbeOutcome:
    """One run's files, unwritten: its record, the text of its per-sample scores file (None when it failed) and
    its trained head's file (`harness.heads.file`; None when it failed, trained nothing or scored a saved head)."""

    record: Record
    samples_text: str | None
    head_bytes: bytes | None


@dataclass(frozen=True)
class _Protocol:
    """The run's probe parameters, resolved before any file is read."""

    spec: ProbeSpec
    probe_params: dict[str, Any]  # what the probe reads: pooling, layers and the headline's choice taken out
    protocol_params: dict[str, Any]  # what the record names: the headline's choice and the shot included
    seed: int
    pooling: str
    layers: Any
    headline: str


@dataclass
class _Progress:
    """How far a run got: the record's fields found so far, and the phase it is in."""

    fields: dict[str, Any]
    phase: str = "extract"


@dataclass(frozen=True)
class _Features:
    """The extraction a run reads, and the device it computes on."""

    folder: Path
    extraction: dict[str, Any]
    described: dict[str, Any]  # the backbone, as its extract stage described it
    device: str


@dataclass(frozen=True)
class _Measured:
    """What an ok run measured: the probe's result, the feature request it read, and its per-sample file."""

    result: ProbeResult
    request: dict[str, Any]
    samples_text: str
    samples: SamplesInfo


def run_probe(job: ProbeJob, params: Params, probe_params: dict[str, Any], shot: Shot | None = None,
              saved_head: SavedHead | None = None) -> ProbeOutcome:
    """One run: its record, samples file and trained head. With `saved_head` (read by `harness.heads.file`), that
    head is checked against the features and scored instead of training one; the record's protocol_params.head
    names the file's SHA-256 (and, for a head allowed with strict=False, its mismatches)."""
    started = time.monotonic()
    key = job.key.at(shot)
    protocol = _protocol(job, params, probe_params, shot)  # raises (a ConfigError, say) before any work
    progress = _Progress(_base_fields(job, key, protocol, shot))
    measured: _Measured | Failure
    try:
        measured = _measure(job, key, params, protocol, saved_head, progress)
    except Exception as error:
        measured = Failure(phase=progress.phase, error_type=type(error).__name__, message=str(error)[:2000])
        traceback.print_exc()
    fields = {**progress.fields, "precision": progress.fields["precision"] or params.settings.precision,
              "duration_s": round(time.monotonic() - started, 3)}
    if isinstance(measured, Failure):
        return ProbeOutcome(failed_record(measured, **fields), None, None)
    record = _ok_record(fields, protocol.spec, measured)
    trained = measured.result.head if saved_head is None else None  # a scored head trains nothing: no head file
    head_bytes = None if trained is None else serialize_head(trained, _head_identity(record, protocol, measured))
    return ProbeOutcome(record, measured.samples_text, head_bytes)


def _protocol(job: ProbeJob, params: Params, probe_params: dict[str, Any], shot: Shot | None) -> _Protocol:
    """The task's probe and what its parameters resolve to, before any file is read."""
    spec = get_probe(job.task)
    probe_params = dict(probe_params)
    # A few-shot run's seed chooses its subset and seeds the probe, so the seeds of a curve are replicates.
    seed = probe_params.get("seed", params.settings.seed) if shot is None else shot.seed
    pooling = probe_params.pop("pooling", "default") if spec.feature_mode == "pooled" else "default"
    layers = probe_params.pop("layers", None)
    probe_params.pop("pooling", None)
    protocol_params = dict(probe_params)  # the headline's choice too: it is part of the protocol, so of the board
    headline = spec.resolve_headline(probe_params)
    if spec.headline_param:
        probe_params.pop(spec.headline_param, None)
    if shot is not None:
        protocol_params |= {"k_shot": shot.k, UNIT_PARAM: fewshot_unit(job.task), "subset_seed": shot.seed}
    return _Protocol(spec, probe_params, protocol_params, seed, pooling, layers, headline)


def _base_fields(job: ProbeJob, key: RunKey, protocol: _Protocol, shot: Shot | None) -> dict[str, Any]:
    """Which run it is, as its record says whether it succeeds or not; the phases fill in the rest."""
    spec, layers = protocol.spec, protocol.layers
    return {
        "run_id": key.run_id,
        "backbone_name": key.backbone.name,
        "task": job.task,
        "level": spec.level,
        "protocol": spec.protocol,
        "pooling_requested": protocol.pooling,
        "feature_mode": spec.feature_mode,
        "layers": list(layers) if isinstance(layers, list) and layers else None,
        "precision": None,
        "seed": protocol.seed,
        "headline_metric": protocol.headline,
        "environment": environment_fingerprint(),
        "k_shot": None if shot is None else shot.k,
        "protocol_params": dict(protocol.protocol_params),  # a subset and a saved head add to it
        "backbone": None,
        "dataset": None,
        "pooling_resolved": None,
        "image_size": None,
    }


def _measure(job: ProbeJob, key: RunKey, params: Params, protocol: _Protocol, saved_head: SavedHead | None,
             progress: _Progress) -> _Measured:
    """The run's phases in order, each named in `progress` before it starts (the phase a failure reports)."""
    spec, fields = protocol.spec, progress.fields
    features = _read_features(job, params, spec, fields)
    progress.phase = "load_dataset"
    manifest = _load_dataset(job, spec, features, fields)
    dataset_identity = manifest.identity
    if key.shot is not None:
        progress.phase = "select_subset"
        manifest, subset = fewshot_manifest(manifest, protocol.probe_params["train_split"], fewshot_unit(job.task),
                                            key.shot)
        fields["protocol_params"] |= subset
    progress.phase = "probe"
    request, inputs = _probe_inputs(key, params, protocol, features, manifest, fields)
    fields["dataset"] = _dataset_info(job, protocol, manifest, dataset_identity)
    if saved_head is None:
        result = spec.run(inputs)
    else:
        result = _score_saved_head(saved_head, job, spec, features, request, inputs, progress)
    check_result(spec, result, protocol.headline)
    samples_text, samples = samples_file(key.samples_path, result.sample_ids, result.samples, result.unit,
                                         result.auxiliary, result.statistics)
    for warning in result.warnings:  # said where the run is watched, and kept in the record
        print(f"warning: {job.task}@{job.backbone}: {warning}", file=sys.stderr)
    return _Measured(result, request, samples_text, samples)


def _read_features(job: ProbeJob, params: Params, spec: ProbeSpec, fields: dict[str, Any]) -> _Features:
    """The stage's extraction, and the record's description of the backbone and of the devices that did the work."""
    folder = paths.features_dir(job.feature_grid, job.backbone, job.dataset)
    extraction = read_extraction(folder)
    described = extraction["backbone"]
    device = _compute_device(params, spec)
    # the device this run computes on and the one its features were computed on: each record names what did its
    # work, never what was merely present
    fields["environment"] = environment_fingerprint(device, extraction.get("device"))
    # the precision the features were computed at is the backbone's (its identity includes it)
    fields["precision"] = described["precision"]
    fields["backbone"] = BackboneInfo(
        name=described["name"], identity=described["identity"], control=described["control"],
        weights=described["weights"], architecture=described["architecture"], preprocess=described["preprocess"],
    )
    fields["image_size"] = described["preprocess"]["crop"]
    fields["throughput"] = read_throughput(folder, extraction)
    return _Features(folder, extraction, described, device)


def _compute_device(params: Params, spec: ProbeSpec) -> str:
    """The device the probe computes on: the CPU for a probe that uses none (pooled probes), whatever was asked."""
    device = str(resolve_device(requested_device(params.settings.device))) if spec.uses_device else "cpu"
    if device != "cpu":  # the same GPU gives the same bits: deterministic kernels, no TF32 (harness.core.devices)
        set_deterministic(resolve_device(device))
    return device


def _load_dataset(job: ProbeJob, spec: ProbeSpec, features: _Features, fields: dict[str, Any]) -> Manifest:
    manifest = Manifest.load(paths.manifest_path(job.dataset))
    fields["protocol"] = spec.resolve_protocol(manifest)
    if manifest.identity != features.extraction["dataset_identity"]:
        raise RuntimeError("features were extracted from a different version of the dataset")
    return manifest


def _probe_inputs(key: RunKey, params: Params, protocol: _Protocol, features: _Features, manifest: Manifest,
                  fields: dict[str, Any]) -> tuple[dict[str, Any], ProbeInputs]:
    """The extraction's request the probe reads, and what the probe receives: the manifest, a lookup of its
    cached features, its parameters, the preprocessing geometry and how to rebuild the backbone."""
    spec, described = protocol.spec, features.described
    request = _matching_request(features.extraction, spec.feature_mode, protocol.pooling, protocol.layers, spec.fit)
    fields["pooling_resolved"] = request["pooling_resolved"]
    if isinstance(protocol.layers, str):  # a named set: the record says which layers it resolved to
        fields["layers"] = list(request["layers_resolved"])
    cache = FeatureCache(features.folder / "entries")
    geometry_spec = {k: v for k, v in described["preprocess"].items() if k != "library"}
    geometry = Preprocess(**{**geometry_spec, "mean": tuple(geometry_spec["mean"]), "std": tuple(geometry_spec["std"])})
    rebuild = {"name": key.backbone.name, "identity": described["identity"], "precision": described["precision"],
               "seed": params.settings.seed, "checkpoint": key.backbone.checkpoint(params.checkpoints)}
    inputs = ProbeInputs(manifest, _feature_lookup(cache, described, request), protocol.probe_params, protocol.seed,
                         geometry, rebuild, device=features.device)
    return request, inputs


def _dataset_info(job: ProbeJob, protocol: _Protocol, manifest: Manifest, dataset_identity: str) -> DatasetInfo:
    """The evaluation split the record reports on (a few-shot subset's manifest, the full dataset's identity)."""
    split = protocol.probe_params.get(protocol.spec.eval_split_param) or "test"
    return DatasetInfo(
        name=job.dataset, identity=dataset_identity, split=split, size=len(manifest.split(split)),
        params=manifest.params, target_sources=manifest.extra.get("target_sources", {}),
    )


def _score_saved_head(saved_head: SavedHead, job: ProbeJob, spec: ProbeSpec, features: _Features,
                      request: dict[str, Any], inputs: ProbeInputs, progress: _Progress) -> ProbeResult:
    """The saved head, checked against the features this run reads (phase check_head), then scored."""
    progress.phase = "check_head"
    protocol_params = progress.fields["protocol_params"]
    protocol_params["head"] = saved_head.provenance()  # a refused head's failed record names it too
    if saved_head.task != job.task:
        raise ValueError(f"the head was trained for task {saved_head.task!r}, not {job.task!r}")
    saved_head.check(features.described, request, spec.fit)
    progress.phase = "probe"
    result = saved_head.evaluate_inputs(inputs)
    protocol_params["head"] = saved_head.provenance()  # again: with strict=False, the check named its mismatches
    return result


def _ok_record(fields: dict[str, Any], spec: ProbeSpec, measured: _Measured) -> Record:
    metrics = measured.result.metrics
    return Record(
        **fields,
        metrics=metrics,
        higher_is_better=spec.higher_is_better(metrics),
        tolerances=spec.tolerances(metrics, fields["protocol"]),
        status="ok",
        samples=measured.samples,
        warnings=list(measured.result.warnings),
    )


def _head_identity(record: Record, protocol: _Protocol, measured: _Measured) -> dict[str, Any]:
    spec = protocol.spec
    train_split = protocol.probe_params.get(spec.train_split_param) if spec.train_split_param else None
    return head_identity(record, measured.request, spec.fit, train_split)
