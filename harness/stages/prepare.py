"""`python -m harness.stages.prepare DATASET --code KIND_MODULE --tasks T,…`: build the dataset's manifest.

Refuses (exit 1, nothing written) a dataset with no items, or with no items in a split one of `--tasks`
reads (their `*_split` parameters, declared as this stage's params).
"""

from __future__ import annotations

import argparse
import logging
import sys

from harness.core import paths
from harness.core.config import Params, load_params, probe_block
from harness.core.contents import write_contents
from harness.core.registry import load_code
from harness.datasets.kinds import prepare_dataset
from harness.datasets.manifest import Manifest
from harness.runs import failures
from harness.stages import common

log = logging.getLogger("visbench")


def required_splits(params: Params, tasks: list[str]) -> list[str]:
    """The splits `tasks` (`grid:task` each) read: the values of their `*_split` / `*_splits` parameters."""
    splits: list[str] = []
    for entry in tasks:
        grid, _, task = entry.partition(":")
        for key, value in probe_block(params, grid, task).items():
            if key.endswith("_split") and value:
                splits.append(value)
            elif key.endswith("_splits") and value:
                splits += list(value)
    return sorted(set(splits))


def run(dataset: str, params: Params, code: str | None = None, tasks: list[str] = ()) -> Manifest:
    stage = paths.prepare_stage_name(dataset)
    if dataset not in params.datasets:
        raise common.StageFailed(f"params.yaml has no datasets.{dataset}")
    try:
        if code:
            load_code(code)
        manifest = prepare_dataset(dataset, params.datasets[dataset], paths.dataset_dir(dataset),
                                   tuple(required_splits(params, list(tasks))))
        write_contents(paths.dataset_dir(dataset))  # what extract and probe stages depend on (core.contents)
    except Exception as error:
        failures.record_stage_failure(stage, "prepare", error)
        raise common.StageFailed(f"{stage}: {type(error).__name__}: {error}") from error
    failures.clear(stage)
    log.info("prepared %s: %d items, identity %s", dataset, len(manifest.items), manifest.identity)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.stages.prepare", description=__doc__)
    parser.add_argument("dataset")
    parser.add_argument("--code", help="the module that defines the dataset's kind")
    parser.add_argument("--tasks", type=common.csv_list, default=[],
                        help="GRID:TASK,… whose splits must be non-empty")
    return common.stage_main("prepare", parser, lambda a: run(a.dataset, load_params(), a.code, a.tasks), argv)


if __name__ == "__main__":
    sys.exit(main())
