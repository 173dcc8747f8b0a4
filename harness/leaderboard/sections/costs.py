"""Cost beside score on the site's pages: a level page's score-against-cost section (its chart, `figures.costs`, and a
small table), a board row's compact cost cell and a backbone page's cost line. Costs come from `costs` (the
results files of benchmarks/backbone_costs.py), scores from the analysis the pages already share.

A level's score is the home page's measure restricted to the level: a pretrained row's mean normalised rank over
the level's boards in the cross-task table. Under the home page's rule a mean compares rows only over the same
boards, so a row is plotted only where it has a result on every one of them; the others are named with how many
they have. Controls are never plotted: their cost is their architecture's, and their place is no score to trade.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.leaderboard.figures.costs import cost_svg
from harness.leaderboard.markdown import attribute, backbone_link, cell, code, count, short, table
from harness.leaderboard.sitemap import level_cost_figure_path
from harness.leaderboard.sources.costs import (
    COMMAND,
    BackboneCost,
    cost_cell,
    cost_of,
    gflops_text,
    parameters_text,
    pareto_front,
    rate_text,
)
from harness.leaderboard.statistics.analysis import Analysis

ANCHOR = "cost"


@dataclass(frozen=True)
class CostPoint:
    backbone_name: str
    label: str  # the row's label: "name", or "name · layers 3"
    cost: BackboneCost
    score: float  # mean normalised rank over the level's boards (0 best)
    front: bool = False


@dataclass(frozen=True)
class LevelCosts:
    level: str
    boards: int  # the level's boards in the cross-task table
    points: list[CostPoint]  # plotted, cheapest first
    left_out: list[str]  # rows not plotted, each with why


def device_text(device: str | None) -> str:
    """`cpu:Intel(R) Xeon(R) Processor:avx2,…:2threads` → `Intel(R) Xeon(R) Processor, 2 threads`; a GPU's model."""
    if not device:
        return "an unnamed device"
    kind, _, rest = device.partition(":")
    parts = rest.split(":")
    if kind == "cpu" and len(parts) >= 3:
        return f"{parts[0]}, {parts[-1].removesuffix('threads')} threads"
    return parts[0] if kind == "cuda" and parts[0] else device


def level_costs(level: str, analysis: Analysis, costs: Mapping[str, BackboneCost]) -> LevelCosts:
    keys = [b["comparability_key"] for b in analysis.columns if b["level"] == level]
    points, left_out = [], []
    for row in analysis.rows:
        if row.control or not keys:
            continue
        ranks = [analysis.cells[(row.backbone_name, row.layers, key)]["normalised_rank"] for key in keys
                 if (row.backbone_name, row.layers, key) in analysis.cells]
        cost = cost_of(row.backbone_name, costs)
        if not ranks:
            continue
        if len(ranks) < len(keys):
            left_out.append(f"{row.label} ({len(ranks)} of {len(keys)} boards)")
        elif cost is None or cost.flops <= 0:
            left_out.append(f"{row.label} (no cost measured)")
        else:  # fsum: exact whatever order the ranks came in, as the home page's mean
            points.append(CostPoint(row.backbone_name, row.label, cost, math.fsum(ranks) / len(ranks)))
    points.sort(key=lambda p: (p.cost.flops, p.score, p.label))
    front = set(pareto_front([(p.cost.flops, p.score) for p in points], higher_is_better=False))
    points = [CostPoint(p.backbone_name, p.label, p.cost, p.score, i in front) for i, p in enumerate(points)]
    return LevelCosts(level, len(keys), points, left_out)


def level_cost_figures(levels: list[str], analysis: Analysis, costs: Mapping[str, BackboneCost]) -> dict[str, str]:
    """{path relative to docs/: chart} for every level with a row to plot."""
    figures = {}
    for level in levels:
        found = level_costs(level, analysis, costs)
        if found.points:
            figures[level_cost_figure_path(level)] = cost_svg(level, found.points, found.boards)
    return figures


def render_level_costs(level: str, analysis: Analysis, costs: Mapping[str, BackboneCost]) -> list[str]:
    """The level page's section: what is plotted, the chart, a table of the plotted rows, the rows left out."""
    found = level_costs(level, analysis, costs)
    lines = [f"## Score against cost {{ #{ANCHOR} }}", ""]
    if not costs:
        return [*lines, f"No cost measured yet: `{COMMAND}` writes the results file this section reads.", ""]
    if not found.points:
        return [*lines, "No pretrained row has a result on every board of this level and a measured cost.", ""]
    devices = sorted({device_text(p.cost.device) for p in found.points if p.cost.images_per_s is not None})
    paths = sorted({p.cost.path for p in found.points})
    lines += [
        f"Each pretrained row with a result on all {count(found.boards, 'board')} of this level in the "
        "cross-task table: its mean normalised rank over them (0 = first on every board, 1 = last) against the "
        "FLOPs of one image's extraction forward at its own input size. The Pareto front joins the rows no other "
        "row beats on both: none is as cheap and ranks as well. Cost is the architecture's (a control shares it) "
        "and counts the whole forward to the last layer, whichever layer a row reads; img/s is the extraction "
        f"forward on {', '.join(devices) or 'no device'}, {_rate_source(found.points)} "
        "([how cost is measured](../protocols.md#cost); "
        f"{', '.join(code(p) for p in paths)}).",
        "",
        f"![{attribute(level)} level: mean normalised rank against GFLOPs per image, with the Pareto front]"
        f"(../{level_cost_figure_path(level)}){{ .vb-figure }}",
        "",
        *table(["Backbone", "Mean rank", "Params", "GFLOPs", "img/s", "Front"],
               [[backbone_link(p.backbone_name, "../", p.label), short(p.score), parameters_text(p.cost.parameters),
                 f"{gflops_text(p.cost.gflops)} @ {p.cost.input}²", rate_text(p.cost.images_per_s),
                 "yes" if p.front else ""] for p in found.points]),
        "",
    ]
    if found.left_out:
        lines += ["Not plotted (a mean over fewer boards is not comparable): " + cell(", ".join(found.left_out))
                  + ".", ""]
    return lines


def _rate_source(points: Sequence) -> str:
    """Where the plotted rows' img/s come from: their records' timed extractions, the benchmark, or each in part."""
    timed = {p.cost.rate_extractions is not None for p in points if p.cost.images_per_s is not None}
    if timed == {True}:
        return "as the rows' own records timed it (the median over the extractions each row's records timed)"
    if timed == {False}:
        return "as the benchmark measured it"
    return "as a row's own records timed it where they carry a timing, else as the benchmark measured it"


def board_cost_cell(backbone_name: str, costs: Mapping[str, BackboneCost]) -> str:
    """A board row's Cost cell: `11.7M · 3.6 GF · 95 img/s`, or n/a."""
    return cell(cost_cell(cost_of(backbone_name, costs)))


def backbone_cost_line(backbone_name: str, costs: Mapping[str, BackboneCost]) -> list[str]:
    """A backbone page's cost paragraph, or nothing where none was measured."""
    cost = cost_of(backbone_name, costs)
    if cost is None:
        return []
    rate = ("" if cost.images_per_s is None else
            f", {rate_text(cost.images_per_s)} img/s through its extraction forward on {device_text(cost.device)}")
    source = code(cost.path) + (f"; img/s the median over {count(cost.rate_extractions, 'extraction')} its "
                                "records timed" if cost.rate_extractions else "")
    return [f"Cost ([how it is measured](../protocols.md#cost)): {parameters_text(cost.parameters)} parameters, "
            f"{gflops_text(cost.gflops)} GFLOPs per {cost.input}² image{cell(rate)} ({source}).", ""]
