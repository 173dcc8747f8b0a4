"""The learning-curve figure of one few-shot curve, drawn with `svg`: the headline metric against k.

k is on a log2 axis (the k values double), one line per backbone through the mean over the subset
seeds, with an error bar from the lowest to the highest seed's value at every point; controls are
dashed. Lines are nudged apart sideways by a few pixels so that error bars at the same k do not hide
each other. Colours are the Okabe–Ito palette (distinguishable with the common colour-vision
deficiencies), assigned in line order; every number is printed with fixed decimals.
"""

from __future__ import annotations

import math
from typing import Any

from harness.leaderboard.figures.style import (
    FONT,
    PAD,
    PALETTE,
    PLOT_H,
    PLOT_W,
    draw_axes,
    draw_legend_entry,
    nice_ticks,
)
from harness.leaderboard.figures.svg import Svg, text_width
from harness.leaderboard.markdown import GENERATED_HEADER

INSET = 18.0  # the first and last k sit this far inside the axes
DODGE = 4.0  # sideways offset between neighbouring lines, in pixels
UNIT_TEXT = {"images_per_class": "training images per class", "images": "training images"}


def _x_of(ks: list[int]) -> dict[int, float]:
    if len(ks) == 1:
        return {ks[0]: PLOT_W / 2}
    lo, hi = math.log2(ks[0]), math.log2(ks[-1])
    return {k: INSET + (math.log2(k) - lo) / (hi - lo) * (PLOT_W - 2 * INSET) for k in ks}


def _point_tip(name: str, point: dict[str, Any]) -> str:
    sd = "n/a" if point["sd"] is None else f"{point['sd']:.4f}"
    seeds = ", ".join(str(s) for s in point["seeds"])
    return (f"{name}, k={point['k_shot']}: mean {point['mean']:.4f}, sd {sd}, min {point['low']:.4f}, "
            f"max {point['high']:.4f} over {point['n']} seed(s) ({seeds})")


def curve_svg(curve: dict[str, Any], label: str) -> str:
    lines, ks = curve["lines"], curve["k_shots"]
    values = [v for line in lines for p in line["points"] for v in (p["low"], p["high"])]
    ticks, decimals = nice_ticks(min(values), max(values))
    y_low, y_high = ticks[0], ticks[-1]
    title = f"{curve['task']}: {curve['headline_metric']} vs k"  # then the label on a line of its own
    direction = "higher" if curve["higher_is_better"] else "lower"
    y_title = f"{curve['headline_metric']} ({direction} is better); mean over seeds, bars min to max"
    tick_w = max(text_width(f"{t:.{decimals}f}", FONT) for t in ticks)
    left, top = PAD + tick_w + 8, 70.0
    names = [line["row_label"] + (" (control)" if line["control"] else "") for line in lines]
    bottom = top + PLOT_H
    # The legend goes under the axis title, one line each: beside the plot it would make the figure wider
    # than a page column, and a narrower figure is what keeps its 12 px text at 12 px on screen.
    legend_top = bottom + 62
    width = max(left + PLOT_W + 2 * PAD, PAD + 30 + max(text_width(n, FONT) for n in names) + PAD,
                text_width(label, FONT) + 2 * PAD, text_width(y_title, FONT) + 2 * PAD)
    svg = Svg(width, legend_top + 18 * len(lines) + PAD, f"{title}, {label}", GENERATED_HEADER)
    svg.text(PAD, 16, title, FONT, bold=True)
    svg.text(PAD, 34, label, FONT)
    svg.text(PAD, top - 14, y_title, FONT)

    def y_of(value: float) -> float:
        return bottom - (value - y_low) / (y_high - y_low) * PLOT_H

    x_of = _x_of(ks)
    draw_axes(svg, left, top, bottom, [(y_of(t), f"{t + 0.0:.{decimals}f}") for t in ticks],
              [(left + x_of[k], str(k)) for k in ks])
    svg.text(left + PLOT_W / 2, bottom + 38, f"k = {UNIT_TEXT.get(curve['unit'], curve['unit'])} (log2 scale)",
             FONT, "middle")

    for index, (line, name) in enumerate(zip(lines, names, strict=True)):
        colour = PALETTE[index % len(PALETTE)]
        shift = (index - (len(lines) - 1) / 2) * DODGE
        xy = [(left + x_of[p["k_shot"]] + shift, y_of(p["mean"])) for p in line["points"]]
        for (x, _), point in zip(xy, line["points"], strict=True):
            svg.line(x, y_of(point["low"]), x, y_of(point["high"]), colour)
            svg.line(x - 3, y_of(point["low"]), x + 3, y_of(point["low"]), colour)
            svg.line(x - 3, y_of(point["high"]), x + 3, y_of(point["high"]), colour)
        if len(xy) > 1:
            svg.polyline(xy, colour, dashed=line["control"])
        for (x, y), point in zip(xy, line["points"], strict=True):
            svg.circle(x, y, 3.5, colour, _point_tip(name, point))
        draw_legend_entry(svg, legend_top + index * 18, colour, line["control"], name)
    return svg.render()
