"""The home page's cross-task table: one row per backbone and layer set, one column per board, each cell the
row's normalised rank there, coloured, linking to the board; the mean only for a row complete on every
column, and why not otherwise.

Plain Markdown with attributes (attr_list) on the links, so it reads without JavaScript: each column head
carries the board's level and dataset (`data-level`, `data-dataset`), each cell its exact normalised rank
(`data-nr`). docs/javascripts/crosstask.js reads them to filter columns by level and dataset and to
recompute the mean over the columns shown, under the same rule (complete rows only); tablesort.js sorts.
"""

from __future__ import annotations

from typing import Any

from harness.leaderboard.analysis import Analysis, CrossTaskRow
from harness.leaderboard.markdown import (
    NO_AGGREGATE,
    attribute,
    backbone_link,
    board_link,
    cell,
    page_stem,
    short,
    table,
)
from harness.leaderboard.svg import mix

# 0 (best) green → yellow → red (worst): ColorBrewer RdYlGn ends, reversed. Text on it stays black.
RANK_RAMP = [(0.0, (26, 152, 80)), (0.5, (254, 224, 139)), (1.0, (215, 48, 39))]
CONTROL_FILL = "#d9d9d9"
MAX_LISTED = 3  # name at most this many missing boards; count them beyond


def _head(board: dict[str, Any], analysis: Analysis, prefix: str) -> str:
    stats = analysis.stats[board["comparability_key"]]
    url = f"{prefix}tasks/{page_stem(board['task'])}.md#board-{board['comparability_key']}"
    return (f'[{cell(stats.code)} {cell(stats.label)}]({url} "{attribute(stats.title)}")'
            f'{{ .vb-board data-level="{attribute(board["level"])}" '
            f'data-dataset="{attribute(str(board["dataset_name"]))}" data-code="{attribute(stats.code)}" }}')


def _cell(row: CrossTaskRow, board: dict[str, Any], analysis: Analysis, prefix: str) -> str:
    key = board["comparability_key"]
    found = analysis.cells.get((row.backbone_name, row.layers, key))
    if found is None:
        return NO_AGGREGATE
    stats = analysis.stats[key]
    value = found["normalised_rank"]
    if found["control"]:
        place, fill = "control, not ranked: would place at " + short(value), CONTROL_FILL
    else:
        place = f"rank {found['rank']} of {found['ranked_count']}"
        if found["run_id"] in stats.groups:
            place += f", tie group {stats.groups[found['run_id']]}"
        fill = mix(RANK_RAMP, value)
    tip = (f"{row.label} on {stats.code} {stats.label}: {board['headline_metric']} "
           f"{found['headline_value']:.4f}, {place}")
    url = f"{prefix}tasks/{page_stem(board['task'])}.md#board-{key}"
    # repr: the exact value, so the page's script averages what the aggregate here averages
    return (f'[{short(value)}]({url} "{attribute(tip)}")'
            f'{{ .vb-nr data-nr="{value!r}" style="background-color: {fill}" }}')


def _why(row: CrossTaskRow, analysis: Analysis) -> str:
    if row.control:
        return "control: never aggregated"
    if not row.missing:
        return ""
    codes = [analysis.stats[b["comparability_key"]].code for b in analysis.columns
             if b["comparability_key"] in set(row.missing)]
    if len(codes) <= MAX_LISTED:
        return "no result on " + ", ".join(codes)
    return f"no result on {len(codes)} of {len(analysis.columns)} boards"


def render_crosstask(analysis: Analysis, prefix: str = "") -> list[str]:
    """The table (inside a div the stylesheet and script find it by), or a sentence when no board ranks."""
    if not analysis.columns:
        return ["No board ranks a pretrained backbone yet.", ""]
    header = ["Backbone", '<span data-role="mean">Mean normalised rank</span>',
              '<span data-role="coverage">Boards with a result</span>',
              *(_head(b, analysis, prefix) for b in analysis.columns), '<span data-role="why">Why no mean</span>']
    rows = []
    for row in analysis.rows:
        name = backbone_link(row.backbone_name, prefix, row.label)
        name += f'{{ data-control="{"true" if row.control else "false"}" }}'
        present = len(analysis.columns) - len(row.missing)
        rows.append([name, NO_AGGREGATE if row.aggregate is None else short(row.aggregate),
                     f"{present} of {len(analysis.columns)}",
                     *(_cell(row, b, analysis, prefix) for b in analysis.columns), _why(row, analysis)])
    return ['<div class="vb-pinned vb-crosstask" markdown>', "", *table(header, rows), "", "</div>", ""]


def render_board_legend(analysis: Analysis, prefix: str) -> list[str]:
    """Code, title, level, dataset, headline and ranked rows of every column of the cross-task table."""
    rows = []
    for board in analysis.columns:
        stats = analysis.stats[board["comparability_key"]]
        rows.append([stats.code, board_link(stats.title, board["task"], board["comparability_key"], prefix),
                     cell(board["level"]), cell(board["dataset_name"]), cell(board["headline_metric"]),
                     str(sum(1 for r in board["rows"] if r["rank"] is not None))])
    return table(["Code", "Board", "Level", "Dataset", "Headline", "Ranked rows"], rows)
