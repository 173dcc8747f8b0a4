"""The thin entry points that `dvc.yaml` stages call: prepare, extract, probe, collect, site.

Each reads only what its stage declares (deps and params) and writes only its outs. A failure inside a
run becomes a `failed` record for that run and the stage exits 0, so one broken backbone never stops
the grid; only a bug in the harness itself (e.g. an invalid record) exits non-zero.

The probe stage imports no backbone library: it reads `extraction.json` and cached arrays.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import paths
from harness.config import Params, canonical_backbone, load_params
from harness.records import (
    Record,
    dump_record,
    read_records,
    write_records,
    write_text_atomic,
)

if TYPE_CHECKING:
    from harness.fewshot import Shot

log = logging.getLogger("visbench")


def prepare(dataset: str, params: Params) -> None:
    from harness.datasets import prepare_dataset

    manifest = prepare_dataset(dataset, params.datasets[dataset], paths.dataset_dir(dataset))
    log.info("prepared %s: %d items, identity %s", dataset, len(manifest.items), manifest.identity)


def feature_requests(dataset: str, params: Params) -> list:
    """What the probes that read this dataset need from its features (union over grids' tasks)."""
    from harness.extract import FeatureRequest
    from harness.probes import get_probe

    requests = set()
    for grid in params.grids.values():
        for task, task_dataset in grid.tasks.items():
            if task_dataset != dataset:
                continue
            probe, spec = get_probe(task), params.probes[task]
            layers = tuple(spec["layers"]) if spec.get("layers") else None
            pooling = spec.get("pooling", "default") if probe.feature_mode == "pooled" else "default"
            requests.add(FeatureRequest(probe.feature_mode, pooling, layers, probe.fit))
    return sorted(requests, key=lambda r: (r.mode, r.pooling, r.layers or (), r.fit))


def extract(grid: str, backbone_name: str, dataset: str, params: Params) -> None:
    from harness.datasets import Manifest
    from harness.extract import extract_dataset, write_extraction

    out_dir = paths.features_dir(grid, backbone_name, dataset)
    name = canonical_backbone(backbone_name)
    phase = "load_backbone"
    try:
        from harness.backbones import create_backbone

        backbone = create_backbone(
            name, checkpoint=params.checkpoints.get(name), precision=params.settings.precision,
            seed=params.settings.seed,
        )
        phase = "extract"
        manifest = Manifest.load(paths.manifest_path(dataset))
        description = extract_dataset(
            backbone, manifest, feature_requests(dataset, params), out_dir, params.settings.batch_size
        )
    except Exception as error:  # recorded as a failed run by every probe that reads these features
        log.error("%s × %s failed in %s: %s", name, dataset, phase, error)
        description = {"status": "failed", "phase": phase, "error_type": type(error).__name__,
                       "message": str(error), "traceback": traceback.format_exc(limit=3)}
    out_dir.mkdir(parents=True, exist_ok=True)
    write_extraction(out_dir, description)


def stage_shots(params: Params, grid: str) -> list[Shot | None]:
    """The runs one probe stage of `grid` makes: [None] (the full split), or every (k, seed) of its
    `fewshot` spec, k-major."""
    from harness.fewshot import Shot

    spec = params.grids[grid].fewshot
    if spec is None:
        return [None]
    return [Shot(k, seed) for k in spec.k_shots for seed in spec.seeds]


def stage_run_ids(params: Params, grid: str, task: str, backbone_name: str) -> list[str]:
    """The run ids of the records one probe stage writes, in the order it writes them."""
    return [paths.run_id(grid, task, backbone_name, shot) for shot in stage_shots(params, grid)]


def probe(grid: str, task: str, backbone_name: str, params: Params) -> list[Record]:
    """Run one probe stage on cached features; write its record(s) and its DVC metrics file.

    A grid with a `fewshot` spec runs every (k, seed) into the stage's folder (`paths.fewshot_dir`), one
    record and samples file each; a failed (k, seed) is a failed record and the others still run.
    """
    from harness.probe_run import run_probe_stage

    shots = stage_shots(params, grid)
    records = []
    for shot in shots:
        # A task that trains nothing has no few-shot protocol: run_probe_stage raises ConfigError at once.
        record = run_probe_stage(grid, task, backbone_name, params, shot)
        write_text_atomic(paths.record_path(grid, task, backbone_name, shot), dump_record(record) + "\n")
        log.info("%s: %s %s", record.run_id, record.status,
                 f"{record.headline_metric}={record.headline:.4f}" if record.status == "ok" else record.failure)
        records.append(record)
    if shots == [None]:
        metrics: dict[str, Any] = dict(records[0].metrics)
    else:
        _remove_stale_runs(grid, task, backbone_name, shots)
        metrics = fewshot_metrics(records)
    write_text_atomic(paths.metrics_path(grid, task, backbone_name), json.dumps(metrics, indent=1, sort_keys=True))
    return records


def _remove_stale_runs(grid: str, task: str, backbone_name: str, shots: list[Shot]) -> None:
    """Leave the stage's folder holding exactly this run's files, as DVC expects of an out (a k or seed
    dropped from params.yaml must not linger; DVC itself clears outs before a stage runs)."""
    wanted = {paths.record_path(grid, task, backbone_name, s) for s in shots}
    wanted |= {paths.samples_path(grid, task, backbone_name, s) for s in shots}
    for path in sorted(paths.fewshot_dir(grid, task, backbone_name).iterdir()):
        if path not in wanted and path.is_file() and path.name.endswith((".json", ".samples.csv")):
            path.unlink()


def fewshot_metrics(records: list[Record]) -> dict[str, dict[str, float | int]]:
    """The few-shot stage's DVC metrics: per k ("k4"), how many seeds ran and succeeded and, only when all
    of them succeeded, every metric's mean over the seeds (never a mean over the survivors)."""
    by_k: dict[int, list[Record]] = {}
    for record in records:
        by_k.setdefault(record.k_shot, []).append(record)
    summary = {}
    for k, group in sorted(by_k.items()):
        ok = [r for r in group if r.status == "ok"]
        entry: dict[str, float | int] = {"seeds": len(group), "seeds_ok": len(ok)}
        if len(ok) == len(group):
            for name in sorted(set.intersection(*(set(r.metrics) for r in ok))):
                entry[name] = math.fsum(r.metrics[name] for r in ok) / len(ok)
        summary[f"k{k}"] = entry
    return summary


def collect(params: Params) -> list[Record]:
    """Gather every grid's records into the committed corpus, sorted by run id."""
    records = []
    for grid_name, grid in sorted(params.grids.items()):
        for task in sorted(grid.tasks):
            for backbone in grid.backbones:
                for shot in stage_shots(params, grid_name):
                    path = paths.record_path(grid_name, task, backbone, shot)
                    if path.is_file():
                        records += read_records(path)
    records.sort(key=lambda r: r.run_id)
    write_records(paths.CORPUS, records)
    log.info("corpus: %d records (%d failed) → %s", len(records),
             sum(r.status == "failed" for r in records), paths.CORPUS)
    return records


def site() -> list[Path]:
    from harness.leaderboard import render_site

    written = render_site(read_records(paths.CORPUS), paths.DOCS)
    log.info("site: %d generated pages under %s", len(written), paths.DOCS)
    return written


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    parser = argparse.ArgumentParser(prog="python -m harness.stages", description=__doc__)
    sub = parser.add_subparsers(dest="stage", required=True)
    sub.add_parser("prepare").add_argument("dataset")
    p = sub.add_parser("extract")
    p.add_argument("grid")
    p.add_argument("backbone")
    p.add_argument("dataset")
    p = sub.add_parser("probe")
    p.add_argument("grid")
    p.add_argument("task")
    p.add_argument("backbone")
    sub.add_parser("collect")
    sub.add_parser("site")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.stage == "site":
        site()
    else:
        params = load_params()
        if args.stage == "prepare":
            prepare(args.dataset, params)
        elif args.stage == "extract":
            extract(args.grid, args.backbone, args.dataset, params)
        elif args.stage == "probe":
            probe(args.grid, args.task, args.backbone, params)
        else:
            collect(params)
    log.info("stage %s done in %.1fs", args.stage, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
