"""The table that ends a successful run: each selected run's headline metric, read back from its record.

Without it a run ends with "all N runs ok" and the numbers are only in files, which in a throw-away container
(`docker run --rm`) are gone with it. Few-shot stages write one record per (k, seed); they are shown as the mean
over seeds per k, as the board shows them.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from harness.core.config import Params
from harness.pipeline.plan import Run
from harness.runs.fewshot import stage_shots
from harness.runs.records import Record, read_records

MAX_ROWS = 40  # a grid=all run selects hundreds; the corpus and the site hold them all


def _ok_record(path) -> Record | None:
    try:
        records = read_records(path)
    except (OSError, ValueError):
        return None
    return records[0] if records and records[0].status == "ok" else None


def summary_rows(runs: list[Run], params: Params) -> list[tuple[str, str, str]]:
    """(run, headline metric, value) per run with ok records; few-shot stages one row per k."""
    rows = []
    for run in runs:
        by_k: dict[int | None, list[Record]] = defaultdict(list)
        for shot in stage_shots(params, run.grid):
            record = _ok_record(run.key.at(shot).record_path)
            if record is not None and record.headline is not None:
                by_k[None if shot is None else shot.k].append(record)
        for k, records in by_k.items():
            values = [r.headline for r in records]
            if k is None:
                rows.append((run.stage, records[0].headline_metric, f"{values[0]:.4f}"))
            else:
                spread = f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else ""
                rows.append((f"{run.stage} k={k}", records[0].headline_metric,
                             f"{statistics.fmean(values):.4f}{spread} ({len(values)} seeds)"))
    return rows


def summary_lines(runs: list[Run], params: Params) -> list[str]:
    rows = summary_rows(runs, params)
    if not rows:
        return []
    shown = rows[:MAX_ROWS]
    run_width = max(len(r[0]) for r in shown)
    metric_width = max(len(r[1]) for r in shown)
    lines = ["results (headline metric; every metric in results/<grid>/<task>/):"]
    lines += [f"  {run:<{run_width}}  {metric:<{metric_width}}  {value}" for run, metric, value in shown]
    if len(rows) > len(shown):
        lines.append(f"  … and {len(rows) - len(shown)} more (leaderboard/corpus.jsonl)")
    return lines
