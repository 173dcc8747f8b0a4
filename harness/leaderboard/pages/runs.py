"""One provenance page per record: what exactly was run, on what, where, and how to run it again."""

from __future__ import annotations

import json
import re
from typing import Any

from harness.core import dvcfiles
from harness.core.run_key import BackboneRef, RunKey
from harness.leaderboard.figures.curves import UNIT_TEXT
from harness.leaderboard.markdown import (
    MISSING,
    backbone_link,
    board_link,
    cell,
    code,
    key_value_table,
    level_link,
    number,
    page,
    protocol_link,
    table,
    task_link,
    value_text,
    with_interval,
)
from harness.leaderboard.queries.comparability import comparability_key, curve_key, is_seed_replicate
from harness.leaderboard.sections.identity import weights_items
from harness.leaderboard.sections.overlap import overlap_detail
from harness.leaderboard.sitemap import curve_anchor, page_stem, run_path
from harness.leaderboard.statistics.analysis import Analysis
from harness.runs.fewshot import UNIT_PARAM
from harness.runs.records import Record

ENVIRONMENT_FIELDS = (
    "harness_version", "git_commit", "git_dirty", "python", "torch", "timm", "open_clip", "numpy", "opencv", "device",
    "image",
)


def run_key(record: Record) -> RunKey | None:
    """The run that wrote the record: its stage, and its (k, seed) where a few-shot stage wrote one per shot; None
    for a run id that names no stage (a record made by hand: the schema takes any run id)."""
    try:
        return RunKey.from_run_id(record.run_id, record.k_shot, record.seed)
    except ValueError:
        return None


def stage_of(record: Record) -> str:
    """The DVC stage that wrote the record (a few-shot stage writes one record per (k, seed)); a run id that names
    no stage is shown as it stands."""
    key = run_key(record)
    return record.run_id if key is None else key.stage


def grid_of(record: Record) -> str:
    """The grid a run belongs to; for a run id that names no stage, its text up to the first "-", as a stage's."""
    key = run_key(record)
    return record.run_id.split("-", 1)[0] if key is None else key.grid


def rerun_commands(record: Record) -> list[str]:
    """DVC's address of the stage (the row file of the record's grid and backbone: for a committed run, its run
    key's `address`) and the CLI's verify command."""
    grid = grid_of(record)
    # the row of the record's backbone name: a user's row beside a board is renamed NAME@yours (harness.user.score)
    row = BackboneRef.parse(record.backbone_name).spelled
    return [
        f"dvc repro {dvcfiles.row_address(grid, row, stage_of(record))}",
        f"visbench-harness verify grid={grid} task={record.task} backbone={record.backbone_name}",
    ]


def run_fields(record: Record) -> dict[str, Any]:
    """What `markdown.run_path` needs to place a record's page."""
    return {"run_id": record.run_id, "task": record.task, "k_shot": record.k_shot,
            "dataset_name": record.dataset.name if record.dataset else None,
            "split": record.dataset.split if record.dataset else None}


def render_run_page(record: Record, analysis: Analysis) -> str:
    """The run's page, to be written at `run_path(run_fields(record))`."""
    prefix = "../" * run_path(run_fields(record)).count("/")
    lines = [
        f"# {cell(record.run_id)}",
        "",
        f"Status: **{record.status}**. Task {task_link(record.task, prefix)} (level "
        f"{level_link(record.level, prefix)}), backbone {backbone_link(record.backbone_name, prefix)}.",
        "",
        *_placement(record, analysis, prefix),
        "## Re-run",
        "",
        f"DVC stage {code(stage_of(record))}. Re-run it through DVC, or re-run it into a scratch folder and "
        "compare every metric with this record"
        + (" (a few-shot stage runs, and verify compares, every k and seed):" if record.k_shot else ":"),
        "",
        "```bash",
        *rerun_commands(record),
        "```",
        "",
        "## Result",
        "",
    ]
    if record.failure is not None:
        failure = record.failure
        lines += [f"Failed in phase {code(failure.phase)} with {code(failure.error_type)}:", "",
                  *_fenced(failure.message), ""]
    if record.warnings:
        lines += ['!!! warning "Warnings on this run"', ""]
        for warning in record.warnings:  # each an indented paragraph of the admonition
            lines += [f"    {cell(warning)}", ""]
    if record.metrics:
        lines += table(
            ["Metric", "Value [95% CI]", "Higher is better", "Tolerance"],
            [[cell(name), with_interval(value, analysis.intervals.get((record.run_id, name))),
              _yes_no(record.higher_is_better.get(name)), number(record.tolerances.get(name))]
             for name, value in sorted(record.metrics.items(), key=lambda kv: (kv[0] != record.headline_metric,
                                                                               kv[0]))],
        )
        lines += ["", f"Headline metric: {cell(record.headline_metric)}. Intervals are percentile bootstrap "
                  "intervals over the per-sample scores; a metric that is not their mean has one where the run "
                  "recorded the rows it is recomputed from (macro-F1, ODS, OIS, AP), others have none.", ""]
    lines += overlap_detail(record.run_id, analysis)
    lines += _identities(record)
    lines += _settings(record, prefix)
    lines += ["## Environment", ""]
    lines += key_value_table([(name, getattr(record.environment, name)) for name in ENVIRONMENT_FIELDS])
    if record.throughput is not None:  # the extraction's timed batch (runs.throughput), beside its device
        timed = record.throughput
        lines += ["", f"Extraction forward: {timed.images_per_s:.1f} img/s over a timed batch of {timed.batch} "
                  f"images on {code(timed.device)} ([how cost is measured]({prefix}protocols.md#cost))."]
    lines += ["", f"Schema version {record.schema_version}; duration {record.duration_s:.3f} s."]
    return page(lines, _front_matter(record))


def _front_matter(record: Record) -> list[str]:
    """A short title for the navigation, which already groups run pages by task (and few-shot runs by curve):
    the backbone and grid, or the backbone, k and seed; the page's heading stays the run id. A few-shot run's
    page is left out of search: dozens of near-identical (k, seed) pages would bury the task and board pages."""
    if record.k_shot is None:
        return [f"title: {json.dumps(f'{record.backbone_name} ({grid_of(record)})')}"]
    title = f"{record.backbone_name}, k={record.k_shot}, seed {record.seed}"
    return [f"title: {json.dumps(title)}", "search:", "  exclude: true"]


def _placement(record: Record, analysis: Analysis, prefix: str) -> list[str]:
    if record.k_shot is not None:
        unit = UNIT_TEXT.get(record.protocol_params.get(UNIT_PARAM), "training items")
        what = f"A few-shot run: k = {record.k_shot} {unit}, subset seed {record.seed}; on no board (few-shot runs "
        if record.status != "ok":
            return [what + "are never ranked), and it did not succeed.", ""]
        key = curve_key(record)
        url = f"{prefix}tasks/{page_stem(record.task)}.md#{curve_anchor(key)}"
        where = f"[{cell(record.task)} learning curve {key}]({url})"
        return [what + f"are never ranked), a point of the {where}.", ""]
    if is_seed_replicate(record) and record.status == "ok":
        key = comparability_key(record)
        board = next((b for b in analysis.boards if b["comparability_key"] == key), None)
        where = "its board" if board is None else board_link(
            f"{analysis.stats[key].code} {analysis.stats[key].label}", board["task"], key, prefix)
        return [f"A seed replicate (probe seed {record.seed}) of a row of {where}: on no board itself; the board "
                "shows the seed-to-seed spread its sweep measures.", ""]
    for board in analysis.boards:
        for row in board["rows"]:
            if row["run_id"] != record.run_id:
                continue
            stats = analysis.stats[board["comparability_key"]]
            ranked = sum(1 for r in board["rows"] if r["rank"] is not None)
            where = board_link(f"{stats.code} {stats.label}", board["task"], board["comparability_key"], prefix)
            if row["control"]:
                place = "a control, listed but not ranked"
            elif row.get("gated") and stats.floor is not None:
                place = (f"not ranked: no better than the board's floor, {stats.floor.source} "
                         f"({stats.floor.value:.4f})")
            elif row["rank"] is None:
                place = "not ranked (no headline value)"
            else:
                place = f"rank {row['rank']} of {ranked}"
                if record.run_id in stats.groups:
                    place += f", tie group {stats.groups[record.run_id]}"
            return [f"Board {where}: {place}.", ""]
    return ["On no board: the run did not succeed.", ""] if record.status != "ok" else []


def _identities(record: Record) -> list[str]:
    lines = ["## Identities", "", "### Backbone", ""]
    backbone = record.backbone
    if backbone is None:
        lines += ["None recorded: the backbone failed to build.", ""]
    else:
        lines += key_value_table([("name", backbone.name), ("identity", backbone.identity),
                                  ("control", backbone.control)])
        lines += ["", "Weights:", ""]
        lines += key_value_table(weights_items(backbone.weights))
        lines += ["", "Architecture:", ""]
        lines += key_value_table(sorted(backbone.architecture.items()))
        lines += ["", "Preprocessing:", ""]
        lines += key_value_table(sorted(backbone.preprocess.items()))
        lines.append("")
    lines += ["### Dataset", ""]
    dataset = record.dataset
    if dataset is None:
        lines += ["None recorded: the run failed before the dataset was read.", ""]
    else:
        lines += key_value_table([("name", dataset.name), ("identity", dataset.identity), ("split", dataset.split),
                                  ("size", dataset.size)])
        lines += ["", "Manifest parameters:", ""]
        lines += key_value_table(sorted(dataset.params.items()))
        if dataset.target_sources:
            lines += ["", "Where its targets came from:", ""]
            lines += key_value_table(sorted(dataset.target_sources.items()))
        lines.append("")
    lines += ["### Per-sample scores", ""]
    samples = record.samples
    if samples is None:
        lines += ["No per-sample scores: this run has no confidence intervals and takes no part in tie tests.", ""]
    else:
        lines += key_value_table([("path", samples.path), ("sha256", samples.sha256), ("count", samples.count),
                                  ("unit", samples.unit), ("columns", samples.columns)])
        lines.append("")
    return lines


def _settings(record: Record, prefix: str) -> list[str]:
    items = [
        ("protocol", None), ("pooling_requested", record.pooling_requested),
        ("pooling_resolved", record.pooling_resolved), ("feature_mode", record.feature_mode),
        ("layers", record.layers), ("precision", record.precision), ("image_size", record.image_size),
        ("seed", record.seed), ("comparability_key", comparability_key(record)),
    ]
    if record.k_shot is not None:
        items.append(("k_shot", record.k_shot))
    rows = [[cell(name), protocol_link(record.protocol, prefix) if name == "protocol" else value_text(value)]
            for name, value in items]
    lines = ["## Settings", "", *table(["Field", "Value"], rows), "", "Protocol parameters:", ""]
    return [*lines, *key_value_table(sorted(record.protocol_params.items())), ""]


def _yes_no(value: bool | None) -> str:
    return MISSING if value is None else ("yes" if value else "no")


def _fenced(text: str) -> list[str]:
    """A fenced block that no run of backticks inside `text` can close early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "text", text, fence]
