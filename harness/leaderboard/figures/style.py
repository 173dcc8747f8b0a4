"""The one chart style every figure of the site draws in: the Okabe–Ito palette (distinguishable with the common
colour-vision deficiencies, assigned in line order), one font size, the grid and axis strokes, tick steps, and the
frame and legend entries line charts share."""

from __future__ import annotations

import math

from harness.leaderboard.figures.svg import Svg

PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]
GRID_STROKE, AXIS_STROKE = "#dddddd", "#000000"
FONT = 12.0  # every text, axis ticks included: ≥ 11 px on screen at natural size (tests/test_browser.py)
PAD = 10.0
PLOT_W, PLOT_H = 440.0, 240.0


def nice_ticks(low: float, high: float, count: int = 5) -> tuple[list[float], int]:
    """Tick values covering [low, high] at a 1-2-2.5-5 step, and the decimals that step needs."""
    if high <= low:
        pad = 0.05 * max(abs(low), 1e-3)
        low, high = low - pad, high + pad
    raw = (high - low) / (count - 1)
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * magnitude >= raw * (1 - 1e-9))
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    decimals = max(0, -math.floor(math.log10(step) + 1e-9) + (1 if round(step / magnitude, 6) == 2.5 else 0))
    return [round(i * step, decimals + 2) for i in range(first, last + 1)], decimals


def draw_axes(svg: Svg, left: float, top: float, bottom: float, y_ticks: list[tuple[float, str]],
              x_ticks: list[tuple[float, str]]) -> None:
    """Grid lines and labels at each (y, label), tick marks and labels under the plot at each (x, label), then
    the two axis lines: the frame every line chart here shares."""
    for y, label in y_ticks:
        svg.line(left, y, left + PLOT_W, y, GRID_STROKE)
        svg.text(left - 6, y + 4, label, FONT, "end")
    for x, label in x_ticks:
        svg.line(x, bottom, x, bottom + 4, AXIS_STROKE)
        svg.text(x, bottom + 18, label, FONT, "middle")
    svg.line(left, top, left, bottom, AXIS_STROKE)
    svg.line(left, bottom, left + PLOT_W, bottom, AXIS_STROKE)


def draw_legend_entry(svg: Svg, y: float, colour: str, dashed: bool, name: str) -> None:
    svg.polyline([(PAD, y), (PAD + 22, y)], colour, dashed=dashed)
    svg.text(PAD + 30, y + 4, name, FONT)
