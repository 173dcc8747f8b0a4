"""`python -m harness.stages.extract GRID BACKBONE DATASET --code FAMILY_MODULE --reads TASK=MODE/FIT,…`:
one forward pass per image of the dataset into the feature cache, for every way `--reads` tasks read it.

What each task reads (its `layers`, and `pooling` for pooled tasks) comes from params.yaml, declared as this
stage's params; the backbone comes from the one module `--code` names, so the stage depends on that family's
code and no other. A failure (weights missing or refused, an undecodable image) writes the failed attempt
under failures/ and exits 1; DVC then leaves the stage unlocked and the next run retries it.
"""

from __future__ import annotations

import argparse
import logging
import sys

from harness.core import paths
from harness.core.config import Params, load_params, probe_block
from harness.core.contents import write_contents
from harness.core.registry import load_code
from harness.core.run_key import BackboneRef
from harness.runs import failures
from harness.stages import common

log = logging.getLogger("visbench")


def feature_requests(params: Params, reads: list[str]) -> list:
    """What the reading tasks need from the features: (mode, pooling, layers, fit) each, deduplicated."""
    from harness.runs.extract import FeatureRequest
    from harness.runs.feature_reads import FeatureRead

    requests = set()
    for read in map(FeatureRead.parse, reads):
        block = probe_block(params, read.grid, read.task)
        layers = block.get("layers") or None
        layers = tuple(layers) if isinstance(layers, list) else layers
        pooling = block.get("pooling", "default") if read.mode == "pooled" else "default"
        requests.add(FeatureRequest(read.mode, pooling, layers, read.fit))
    return sorted(requests, key=lambda r: (r.mode, r.pooling, str(r.layers or ""), r.fit))


def _early_decode(name: str, dataset: str, requests: list):
    """Decoding started beside the backbone's build, when its family registered its preprocessing as data and
    the dataset's manifest reads; otherwise None (a missing manifest is reported where the extraction loads it)."""
    from harness.backbones.registry import declared_preprocess
    from harness.datasets.manifest import Manifest
    from harness.runs.extract import EarlyDecode

    try:
        preprocess = declared_preprocess(name)
        manifest = Manifest.load(paths.manifest_path(dataset))
    except Exception:  # the build or the extraction meets the same problem and reports it in its phase
        return None
    return EarlyDecode(manifest, preprocess, sorted({r.fit for r in requests})) if preprocess else None


def run(grid: str, backbone_name: str, dataset: str, params: Params, code: str | None = None,
        reads: list[str] = (), prune: bool = True) -> dict:
    from harness.datasets.manifest import Manifest
    from harness.runs.extract import extract_dataset
    from harness.runs.feature_cache import write_extraction
    from harness.runs.throughput import write_throughput

    stage = paths.extract_stage_name(grid, backbone_name, dataset)
    out_dir = paths.features_dir(grid, backbone_name, dataset)
    backbone_ref = BackboneRef.parse(backbone_name)
    name = backbone_ref.name
    phase, early = "load_backbone", None
    try:
        from harness.core.devices import requested_device, resolve_device

        device = resolve_device(requested_device(params.settings.device))
        requests = feature_requests(params, list(reads))
        if code:
            load_code(code)
        from harness.backbones import create_backbone

        early = _early_decode(name, dataset, requests)
        backbone = create_backbone(
            name, checkpoint=backbone_ref.checkpoint(params.checkpoints),
            precision=params.settings.precision, seed=params.settings.seed,
        )
        phase = "extract"
        manifest = Manifest.load(paths.manifest_path(dataset))
        cap = params.settings.batch_size if device.type == "cpu" else params.settings.cuda_batch_size
        # the stage's folder is a persisted DVC out: it keeps exactly what this extraction verified or wrote
        description = extract_dataset(backbone, manifest, requests, out_dir, cap, early, device=device, prune=prune,
                                      measure=True)
        timing = description.pop("timing")  # this run's, not the features': it stays out of the DVC output
        log.info("%s × %s: %d images computed in %.1f s (waiting for decode %.1f s, forward %.1f s, cache %.1f s)",
                 name, dataset, timing["images"], timing["total_s"], timing["decode_wait_s"], timing["forward_s"],
                 timing["store_s"])
    except Exception as error:
        if early is not None:
            early.stop()
        log.error("%s × %s failed in %s: %s", name, dataset, phase, error)
        failures.record_stage_failure(stage, phase, error)
        raise common.StageFailed(f"{stage}: {phase}: {type(error).__name__}: {error}") from error
    write_extraction(out_dir, description)
    timed = timing.get("throughput")
    if timed is not None:  # beside the folder, outside its DVC out; the probe stages' records carry it
        measured = write_throughput(out_dir, description, timed["images"], timed["seconds"], timed["device"])
        log.info("%s: %.1f img/s through the extraction forward (batches of %d on %s)", name,
                 measured["images_per_s"], measured["batch"], measured["device"])
    write_contents(out_dir)  # last: what the probe stages depend on (core.contents)
    failures.clear(stage)
    return description


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.stages.extract", description=__doc__)
    parser.add_argument("grid")
    parser.add_argument("backbone")
    parser.add_argument("dataset")
    parser.add_argument("--code", help="the module that registers the backbone (its family or a plugin)")
    parser.add_argument("--reads", type=common.csv_list, default=[], help="GRID:TASK=pooled|dense/crop|squash,…")
    return common.stage_main(
        "extract", parser, lambda a: run(a.grid, a.backbone, a.dataset, load_params(), a.code, a.reads), argv)


if __name__ == "__main__":
    sys.exit(main())
