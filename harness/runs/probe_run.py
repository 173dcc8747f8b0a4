"""Turn one probe run into a record: read extraction + manifest, run the probe, describe everything.

A run is a whole probe stage, or one (k, seed) `Shot` of a few-shot stage: then the probe trains on the
subset `harness.runs.fewshot` chooses from its training split, and evaluates as the full run does.

Nothing is written here: `run_probe` returns the record and the text of its per-sample scores file
(`RunKey.samples_path`), and the stage writes them only once every run of the stage has succeeded, so a
failure never replaces what an earlier successful run left.
"""

from __future__ import annotations

import math
import sys
import time
import traceback
from dataclasses import dataclass
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
from harness.runs.records import BackboneInfo, DatasetInfo, Failure, Record
from harness.runs.samples import samples_file


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


class ProbeOutcome(tuple):
    """`(record, samples_text)`, as `run_probe` has always returned (samples_text None when the run failed), and
    `.head_bytes`: the trained head's file (`harness.heads.file`), None when it failed or trained nothing."""

    head_bytes: bytes | None

    def __new__(cls, record: Record, samples_text: str | None, head_bytes: bytes | None = None) -> ProbeOutcome:
        outcome = super().__new__(cls, (record, samples_text))
        outcome.head_bytes = head_bytes
        return outcome

    @property
    def record(self) -> Record:
        return self[0]


def run_probe(job: ProbeJob, params: Params, probe_params: dict[str, Any], shot: Shot | None = None,
              saved_head: SavedHead | None = None) -> ProbeOutcome:
    """One run: its record, samples file and trained head. With `saved_head` (read by `harness.heads.file`), that
    head is checked against the features and scored instead of training one; the record's protocol_params.head
    names the file's SHA-256 (and, for a head allowed with strict=False, its mismatches)."""
    started = time.monotonic()
    key = job.key.at(shot)
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
    base: dict[str, Any] = {
        "run_id": key.run_id,
        "backbone_name": key.backbone.name,
        "task": job.task,
        "level": spec.level,
        "protocol": spec.protocol,
        "pooling_requested": pooling,
        "feature_mode": spec.feature_mode,
        "layers": list(layers) if isinstance(layers, list) and layers else None,
        "precision": None,
        "seed": seed,
        "headline_metric": headline,
        "environment": environment_fingerprint(),
        "k_shot": None if shot is None else shot.k,
    }
    backbone_info = dataset_info = request = result = None
    pooling_resolved = image_size = samples_text = head_bytes = None
    samples_path = key.samples_path
    phase = "extract"
    try:
        feature_dir = paths.features_dir(job.feature_grid, job.backbone, job.dataset)
        extraction = read_extraction(feature_dir)
        described = extraction["backbone"]
        # the device this run computes on (pooled probes: the CPU, whatever was asked) and the one its features
        # were computed on: each record names what did its work, never what was merely present
        device = str(resolve_device(requested_device(params.settings.device))) if spec.uses_device else "cpu"
        if device != "cpu":  # the same GPU gives the same bits: deterministic kernels, no TF32 (harness.core.devices)
            set_deterministic(resolve_device(device))
        base["environment"] = environment_fingerprint(device, extraction.get("device"))
        # the precision the features were computed at is the backbone's (its identity includes it)
        base["precision"] = described["precision"]
        backbone_info = BackboneInfo(
            name=described["name"], identity=described["identity"], control=described["control"],
            weights=described["weights"], architecture=described["architecture"],
            preprocess=described["preprocess"],
        )
        image_size = described["preprocess"]["crop"]
        phase = "load_dataset"
        manifest = Manifest.load(paths.manifest_path(job.dataset))
        base["protocol"] = spec.resolve_protocol(manifest)
        if manifest.identity != extraction["dataset_identity"]:
            raise RuntimeError("features were extracted from a different version of the dataset")
        dataset_identity = manifest.identity
        if shot is not None:
            phase = "select_subset"
            manifest, subset = fewshot_manifest(manifest, probe_params["train_split"], fewshot_unit(job.task), shot)
            protocol_params |= subset
        phase = "probe"
        request = _matching_request(extraction, spec.feature_mode, pooling, layers, spec.fit)
        pooling_resolved = request["pooling_resolved"]
        if isinstance(layers, str):  # a named set: the record says which layers it resolved to
            base["layers"] = list(request["layers_resolved"])
        cache = FeatureCache(feature_dir / "entries")
        geometry_spec = {k: v for k, v in described["preprocess"].items() if k != "library"}
        geometry = Preprocess(**{**geometry_spec, "mean": tuple(geometry_spec["mean"]),
                                 "std": tuple(geometry_spec["std"])})
        rebuild = {"name": key.backbone.name, "identity": described["identity"],
                   "precision": described["precision"], "seed": params.settings.seed,
                   "checkpoint": key.backbone.checkpoint(params.checkpoints)}
        inputs = ProbeInputs(manifest, _feature_lookup(cache, described, request), probe_params, seed, geometry,
                             rebuild, device=device)
        split = probe_params.get(spec.eval_split_param) or "test"
        dataset_info = DatasetInfo(
            name=job.dataset, identity=dataset_identity, split=split,
            size=len(manifest.split(split)), params=manifest.params,
            target_sources=manifest.extra.get("target_sources", {}),
        )
        if saved_head is None:
            result = spec.run(inputs)
        else:
            phase = "check_head"
            protocol_params["head"] = saved_head.provenance()  # a refused head's failed record names it too
            if saved_head.task != job.task:
                raise ValueError(f"the head was trained for task {saved_head.task!r}, not {job.task!r}")
            saved_head.check(described, request, spec.fit)
            phase = "probe"
            result = saved_head.evaluate_inputs(inputs)
            protocol_params["head"] = saved_head.provenance()
        check_result(spec, result, headline)
        samples_text, samples = samples_file(samples_path, result.sample_ids, result.samples, result.unit,
                                             result.auxiliary, result.statistics)
        metrics, failure, warnings = result.metrics, None, list(result.warnings)
        for warning in warnings:  # said where the run is watched, and kept in the record
            print(f"warning: {job.task}@{job.backbone}: {warning}", file=sys.stderr)
    except Exception as error:
        failure = Failure(phase=phase, error_type=type(error).__name__, message=str(error)[:2000])
        traceback.print_exc()
    fields = {  # which run it was, whether it succeeded or not
        **base,
        "precision": base["precision"] or params.settings.precision,
        "protocol_params": protocol_params,
        "backbone": backbone_info,
        "dataset": dataset_info,
        "pooling_resolved": pooling_resolved,
        "image_size": image_size,
        "duration_s": round(time.monotonic() - started, 3),
    }
    if failure is not None:
        return ProbeOutcome(failed_record(failure, **fields), samples_text, None)
    record = Record(
        **fields,
        metrics=metrics,
        higher_is_better=spec.higher_is_better(metrics),
        tolerances=spec.tolerances(metrics, base["protocol"]),
        status="ok",
        samples=samples,
        warnings=warnings,
    )
    if result.head is not None:
        train_split = probe_params.get(spec.train_split_param) if spec.train_split_param else None
        head_bytes = serialize_head(result.head, head_identity(record, request, spec.fit, train_split))
    return ProbeOutcome(record, samples_text, head_bytes)
