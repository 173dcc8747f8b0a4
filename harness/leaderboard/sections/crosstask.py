"""The home page's cross-task table: one row per backbone and layer set, one column per board (named by task
and dataset), each cell the row's headline value there, coloured by its normalised rank, linking to the board;
each pretrained row's mean normalised rank over the boards it has, with how many those are, and which it lacks.

Plain Markdown with attributes (attr_list) on the links, so it reads without JavaScript: each column head
carries the board's level, dataset and label (`data-level`, `data-dataset`, `data-label`), each cell its exact
normalised rank (`data-nr`). docs/javascripts/crosstask.js reads them to filter columns by level and dataset
and to recompute the means over the columns shown, under the same rule; tablesort.js sorts.
"""

from __future__ import annotations

from typing import Any

from harness.leaderboard.figures.svg import mix
from harness.leaderboard.markdown import NO_AGGREGATE, attribute, backbone_link, board_link, cell, short, table
from harness.leaderboard.sitemap import page_stem
from harness.leaderboard.statistics.analysis import Analysis, CrossTaskRow

# 0 (best) green → yellow → red (worst): ColorBrewer RdYlGn ends, reversed. Text on it stays black.
RANK_RAMP = [(0.0, (26, 152, 80)), (0.5, (254, 224, 139)), (1.0, (215, 48, 39))]
CONTROL_FILL = "#d9d9d9"
BASELINE_FILL = "#c6dbef"  # a fixed-filter baseline (sobel): a reference to beat, not a random init
MAX_LISTED = 3  # name at most this many missing boards; count them beyond


def _head(board: dict[str, Any], analysis: Analysis, prefix: str) -> str:
    stats = analysis.stats[board["comparability_key"]]
    url = f"{prefix}tasks/{page_stem(board['task'])}.md#board-{board['comparability_key']}"
    return (f'[{cell(stats.label)}]({url} "{attribute(stats.code + ": " + stats.title)}")'
            f'{{ .vb-board data-level="{attribute(board["level"])}" '
            f'data-dataset="{attribute(str(board["dataset_name"]))}" data-code="{attribute(stats.code)}" '
            f'data-label="{attribute(stats.label)}" }}')


def _cell(row: CrossTaskRow, board: dict[str, Any], analysis: Analysis, prefix: str) -> str:
    key = board["comparability_key"]
    found = analysis.cells.get((row.backbone_name, row.layers, key))
    if found is None:
        return NO_AGGREGATE
    stats = analysis.stats[key]
    value = found["normalised_rank"]
    if found["control"]:
        kind, fill = ("baseline", BASELINE_FILL) if found["baseline"] else ("control", CONTROL_FILL)
        place = f"{kind}, not ranked: would place at " + short(value)
    elif found["gated"]:
        place = f"under the board's floor, not ranked: counted as last of {found['ranked_count']}"
        fill = mix(RANK_RAMP, value)
    else:
        place = f"rank {found['rank']} of {found['ranked_count']}"
        if found["run_id"] in stats.groups:
            place += f", tie group {stats.groups[found['run_id']]}"
        fill = mix(RANK_RAMP, value)
    tip = (f"{row.label} on {stats.label}: {board['headline_metric']} {found['headline_value']:.4f}, {place}; "
           f"normalised rank {short(value)}")
    url = f"{prefix}tasks/{page_stem(board['task'])}.md#board-{key}"
    # repr: the exact value, so the page's script averages what the aggregate here averages
    return (f'[{headline(found["headline_value"])}]({url} "{attribute(tip)}")'
            f'{{ .vb-nr data-nr="{value!r}" style="background-color: {fill}" }}')


def headline(value: float | None) -> str:
    """A cell's headline value: three decimals keep 18 columns readable; the board has four, with intervals."""
    return NO_AGGREGATE if value is None else f"{value:.3f}"


def _why(row: CrossTaskRow, analysis: Analysis) -> str:
    if row.control:
        return f"{'baseline' if row.baseline else 'control'}: never aggregated"
    if not row.missing:
        return ""
    labels = [analysis.stats[b["comparability_key"]].label for b in analysis.columns
              if b["comparability_key"] in set(row.missing)]
    if len(labels) <= MAX_LISTED:
        return "no result on " + ", ".join(labels)
    return f"no result on {len(labels)} of {len(analysis.columns)} boards"


def render_crosstask(analysis: Analysis, prefix: str = "") -> list[str]:
    """The table (inside a div the stylesheet and script find it by), or a sentence when no board ranks."""
    if not analysis.columns:
        return ["No board ranks a pretrained backbone yet.", ""]
    header = ["Backbone", '<span data-role="mean">Mean normalised rank</span>',
              '<span data-role="coverage">Over boards</span>',
              *(_head(b, analysis, prefix) for b in analysis.columns), '<span data-role="why">Missing</span>']
    rows = []
    for row in analysis.rows:
        name = backbone_link(row.backbone_name, prefix, row.label)
        name += (f'{{ data-control="{"true" if row.control else "false"}" '
                 f'data-baseline="{"true" if row.baseline else "false"}" }}')
        present = len(analysis.columns) - len(row.missing)
        rows.append([name, NO_AGGREGATE if row.aggregate is None else short(row.aggregate),
                     f"{present} of {len(analysis.columns)}",
                     *(_cell(row, b, analysis, prefix) for b in analysis.columns), _why(row, analysis)])
    return ['<div class="vb-pinned vb-crosstask" markdown>', "", *table(header, rows), "", "</div>", ""]


def render_board_legend(analysis: Analysis, prefix: str) -> list[str]:
    """Name, title, level, headline, ranked rows and code of every column of the cross-task table."""
    rows = []
    for board in analysis.columns:
        stats = analysis.stats[board["comparability_key"]]
        rows.append([board_link(stats.label, board["task"], board["comparability_key"], prefix), cell(stats.title),
                     cell(board["level"]), cell(board["headline_metric"]),
                     str(sum(1 for r in board["rows"] if r["rank"] is not None)), stats.code])
    return table(["Board", "What it is", "Level", "Headline", "Ranked rows", "Code"], rows)
