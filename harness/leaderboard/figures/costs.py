"""A level's score-against-cost chart, drawn with `svg`: each plotted row's mean normalised rank over the level's
boards against the GFLOPs of one image's forward, with the Pareto front (`costs.pareto_front`) as a staircase.

GFLOPs run on a log10 axis (the backbones here span three decades: a CIFAR ResNet at 32² to HED's VGG at 320²);
normalised rank runs from 0 (first on every board) at the top to 1 (last) at the bottom, so better is up and
cheaper is left, and the front is the lower-left-to-upper-right edge no row gets past. Each dot carries its
number, and the legend under the plot, one line per row, names it with its numbers: names beside the dots would
collide, and the legend keeps the chart at a phone's width (figures.boards.WIDTH). Front rows are vermillion, the
others grey (Okabe–Ito, as every chart here).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Protocol

from harness.leaderboard.figures.boards import WIDTH, wrapped
from harness.leaderboard.figures.style import AXIS_STROKE, FONT, GRID_STROKE, PAD, PALETTE
from harness.leaderboard.figures.svg import Svg, text_width
from harness.leaderboard.markdown import GENERATED_HEADER, short
from harness.leaderboard.sources.costs import BackboneCost, gflops_text

PLOT_H = 200.0
FRONT_COLOUR, OTHER_COLOUR = PALETTE[1], "#999999"
RANK_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)


class Point(Protocol):
    label: str
    cost: BackboneCost
    score: float
    front: bool


def log_ticks(low: float, high: float) -> list[float]:
    """Decades covering [low, high] (both > 0); with 1-2-5 steps between them where the span is two decades or
    less, so a narrow span still has ticks to read."""
    first, last = math.floor(math.log10(low) + 1e-9), math.ceil(math.log10(high) - 1e-9)
    last = max(last, first + 1)
    steps = (1.0, 2.0, 5.0) if last - first <= 2 else (1.0,)
    ticks = [m * 10.0**e for e in range(first, last) for m in steps] + [10.0**last]
    return [round(t, max(0, -first) + 1) for t in ticks]


def tick_text(value: float) -> str:
    return f"{value:g}"


def cost_svg(level: str, points: Sequence[Point], boards: int) -> str:
    """The chart of `points` (at least one, every cost's FLOPs > 0) over the level's `boards` boards."""
    gflops = [p.cost.gflops for p in points]
    ticks = log_ticks(min(gflops), max(gflops))
    lo, hi = math.log10(ticks[0]), math.log10(ticks[-1])
    entries = [(f"{i + 1}  {p.label}: {gflops_text(p.cost.gflops)} GF, rank {short(p.score)}"
                + (", front" if p.front else ""), FRONT_COLOUR if p.front else "#000000")
               for i, p in enumerate(points)]
    # an entry wider than the chart goes on to an indented line: a wider chart would scroll on a phone
    width = max(WIDTH, max(text_width(word, FONT) for text, _ in entries for word in text.split()) + 2 * PAD + 24)
    legend = [(24.0 * bool(j), line, colour) for text, colour in entries  # (indent, line, colour)
              for j, line in enumerate(wrapped(text, width - 2 * PAD - 24))]
    title = wrapped(f"{level} level: mean normalised rank over {boards} boards against GFLOPs per image",
                    width - 2 * PAD)
    y_title = "mean normalised rank (0 best, up)"
    top = 18.0 * len(title) + 34
    bottom = top + PLOT_H
    left = PAD + text_width("0.75", FONT) + 8
    plot_w = width - left - PAD - 6
    legend_top = bottom + 60
    svg = Svg(width, legend_top + 18 * len(legend) + PAD,
              f"{level} level: mean normalised rank against GFLOPs per image, with the Pareto front", GENERATED_HEADER)
    for i, line in enumerate(title):
        svg.text(PAD, 18 + 18 * i, line, FONT, bold=True)
    svg.text(PAD, top - 12, y_title, FONT)

    def x_of(value: float) -> float:
        return left + 6 + (math.log10(value) - lo) / (hi - lo) * (plot_w - 12)

    def y_of(rank: float) -> float:
        return top + 6 + rank * (PLOT_H - 12)

    for rank in RANK_TICKS:
        svg.line(left, y_of(rank), left + plot_w, y_of(rank), GRID_STROKE)
        svg.text(left - 6, y_of(rank) + 4, f"{rank:.2f}", FONT, "end")
    for tick in ticks:
        svg.line(x_of(tick), top, x_of(tick), bottom, GRID_STROKE)
        svg.text(x_of(tick), bottom + 18, tick_text(tick), FONT, "middle")
    svg.line(left, top, left, bottom, AXIS_STROKE)
    svg.line(left, bottom, left + plot_w, bottom, AXIS_STROKE)
    svg.text(left + plot_w / 2, bottom + 38, "GFLOPs per image (log scale)", FONT, "middle")
    front = sorted((p for p in points if p.front), key=lambda p: (p.cost.gflops, p.score))
    steps: list[tuple[float, float]] = []
    for a, b in itertools.pairwise(front):  # across to the next front row's cost, then up to its rank
        steps += [(x_of(a.cost.gflops), y_of(a.score)), (x_of(b.cost.gflops), y_of(a.score))]
    if front:
        steps.append((x_of(front[-1].cost.gflops), y_of(front[-1].score)))
    if len(steps) > 1:
        svg.polyline(steps, FRONT_COLOUR, width=1.5, dashed=True)
    for i, point in enumerate(points):
        x, y = x_of(point.cost.gflops), y_of(point.score)
        colour = FRONT_COLOUR if point.front else OTHER_COLOUR
        tip = (f"{point.label}: mean normalised rank {short(point.score)}, {gflops_text(point.cost.gflops)} GFLOPs "
               f"per {point.cost.input}² image" + ("; on the Pareto front" if point.front else ""))
        svg.circle(x, y, 4.5, colour, tip)
        svg.text(x + 6, y - 6, str(i + 1), FONT, fill=colour)
    for j, (indent, line, colour) in enumerate(legend):
        svg.text(PAD + indent, legend_top + 18 * j, line, FONT, fill=colour)
    return svg.render()
