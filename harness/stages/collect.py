"""`python -m harness.stages.collect`: gather every grid's records into the committed corpus.

leaderboard/corpus.jsonl holds the ok records (sorted by run id); leaderboard/failures.jsonl holds the failed
attempts kept under failures/ for runs that are still in params.yaml, apart, so a failure never displaces a
good number and is still shown (the site lists them on each task page with the command that retries).
"""

from __future__ import annotations

import argparse
import logging
import sys

from harness.core import paths
from harness.core.config import Params, load_params
from harness.runs.fewshot import stage_shots
from harness.runs.records import Record, read_records, write_records
from harness.stages import common

log = logging.getLogger("visbench")


def run(params: Params) -> list[Record]:
    records, failed = [], []
    for grid_name, grid in sorted(params.grids.items()):
        for task in sorted(grid.tasks):
            for backbone in grid.backbones:
                for shot in stage_shots(params, grid_name):
                    path = paths.record_path(grid_name, task, backbone, shot)
                    if path.is_file():
                        records += [r for r in read_records(path) if r.status == "ok"]
                attempt = paths.failure_path(paths.stage_name(grid_name, task, backbone))
                if attempt.is_file():
                    failed += read_records(attempt)
    records.sort(key=lambda r: r.run_id)
    failed.sort(key=lambda r: r.run_id)
    write_records(paths.CORPUS, records)
    write_records(paths.FAILED_CORPUS, failed)
    log.info("corpus: %d ok records → %s; %d failed attempts → %s", len(records), paths.CORPUS, len(failed),
             paths.FAILED_CORPUS)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.stages.collect", description=__doc__)
    return common.stage_main("collect", parser, lambda _: run(load_params()), argv)


if __name__ == "__main__":
    sys.exit(main())
