"""`python -m harness.stages.collect`: gather every grid's records into the committed corpus.

leaderboard/corpus.jsonl holds the ok records (sorted by run id); leaderboard/failures.jsonl holds the failed
attempts kept under failures/ for runs that are still in params.yaml, apart, so a failure never displaces a
good number and is still shown (the site lists them on each task page with the command that retries).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from harness.core import dvcfiles, paths
from harness.core.config import Params, load_params
from harness.core.run_key import BackboneRef, RunKey
from harness.runs import failed_records, failures
from harness.runs.fewshot import stage_shots
from harness.runs.records import Record, RecordError, read_records, write_records
from harness.stages import common

log = logging.getLogger("visbench")


def _retry(stage: RunKey) -> str:
    return f"visbench-harness grid={stage.grid} task={stage.task} backbone={stage.backbone.name}"


def _read(path: Path, fix: str, read: Callable[[], list[Record]]) -> list[Record]:
    """The records `read` finds in `path`; a file cut short or edited by hand stops the stage in one line naming
    it and `fix` (not a traceback, and not a corpus without it)."""
    try:
        records = read()
    except (RecordError, UnicodeDecodeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise common.StageFailed(f"{path} cannot be read ({first[:300]}): {fix}; the corpus is left as it "
                                 "was") from None
    if not records:  # emptied: as lost as a deleted record
        raise common.StageFailed(f"{path} is empty: {fix}; the corpus is left as it was")
    return records


def run(params: Params) -> list[Record]:
    records, failed = [], []
    locks: dict[str, dict] | None = None
    for grid_name, grid in sorted(params.grids.items()):
        for task in sorted(grid.tasks):
            for backbone in grid.backbones:
                key = RunKey(grid_name, task, BackboneRef.parse(backbone))
                stage, retry = key.stage, _retry(key)
                for shot in stage_shots(params, grid_name):
                    path = key.at(shot).record_path
                    if path.is_file():
                        fix = f"`{retry}` runs its stage again and rewrites it"
                        records += [r for r in _read(path, fix, partial(read_records, path)) if r.status == "ok"]
                        continue
                    # a run that never ran has no record; one whose stage dvc.lock names it had one, and a
                    # corpus without it would drop its row from the site without a word
                    locks = dvcfiles.read_locks() if locks is None else locks
                    outs = {os.path.normpath(out.get("path", "")) for out in locks.get(stage, {}).get("outs", [])}
                    # a few-shot stage's out is its folder: a (k, seed) added to params.yaml has no file yet
                    folder = os.path.normpath(path.parent) in outs and not path.parent.exists()
                    if os.path.normpath(path) in outs or folder:
                        raise common.StageFailed(
                            f"{path} is missing, though dvc.lock says stage {stage} wrote it (deleted or moved?): "
                            f"`{retry}` (or any `visbench-harness` run) runs its stage again and restores it; the "
                            "corpus is left as it was")
                if failures.exists(stage):
                    failed += _read(failures.location(stage), f"delete it (a failed attempt only) and run `{retry}` "
                                    "to try again", partial(failed_records.failed_records, stage))
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
