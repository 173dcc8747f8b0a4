"""A board's interval chart, drawn with `svg`: each row's headline value with its 95% bootstrap interval.

One line per board row, in the board's order (ranked rows and baselines by value, then random-init controls):
the row's name above a dot at the value and a whisker over the interval (none where the run has no per-sample
scores). Names above their whiskers, not beside them, keep the chart at a phone's width (WIDTH): drawn at its
natural size (its text at 12 px) it fits a 390-px screen with every row's dot in view, where names beside the
whiskers made it ~650 px wide and a phone showed only its left third, names without their dots. Ranked rows
are coloured by tie group (the Okabe–Ito palette, group A first), a fixed-filter baseline blue-grey, a
random-init control or a row under the board's floor grey; an analytic chance row, where the protocol has one,
is a dashed vertical line. The axis spans every value and interval shown, so what overlaps on the chart
overlaps in the numbers.
"""

from __future__ import annotations

from typing import Any

from harness.leaderboard.figures.style import AXIS_STROKE, FONT, GRID_STROKE, PAD, PALETTE, nice_ticks
from harness.leaderboard.figures.svg import Svg, text_width
from harness.leaderboard.markdown import GENERATED_HEADER
from harness.leaderboard.statistics.analysis import Analysis
from harness.leaderboard.statistics.chance import chance_rows

ROW_H = 34.0  # a name's line, then its whisker's
WIDTH = 340.0  # a 390-px phone's content column is ~358 px (tests/test_browser.py measures it)
CONTROL_COLOUR, BASELINE_COLOUR, CHANCE_COLOUR = "#999999", "#6b8fb3", "#555555"


def _rows(board: dict[str, Any], analysis: Analysis) -> list[dict[str, Any]]:
    headline, stats = board["headline_metric"], analysis.stats[board["comparability_key"]]
    groups = sorted(set(stats.groups.values()))
    rows = []
    for row in board["rows"]:
        value = row["metrics"].get(headline)
        if value is None:
            continue
        interval = analysis.intervals.get((row["run_id"], headline))
        group = stats.groups.get(row["run_id"])
        if row["control"]:
            colour, kind = (BASELINE_COLOUR, "baseline") if row["baseline"] else (CONTROL_COLOUR, "control")
        elif row.get("gated"):  # no better than the board's floor: not ranked, drawn as a control is
            colour, kind = CONTROL_COLOUR, "under floor"
        else:
            colour = PALETTE[groups.index(group) % len(PALETTE)] if group in groups else PALETTE[0]
            kind = f"rank {row['rank']}" + (f", tie group {group}" if group else "")
        rows.append({"label": row["row_label"], "value": value, "interval": interval, "colour": colour,
                     "kind": kind})
    return rows


def board_interval_svg(board: dict[str, Any], analysis: Analysis) -> str | None:
    """The chart, or None for a board with no headline value to draw."""
    rows = _rows(board, analysis)
    if not rows:
        return None
    headline, stats = board["headline_metric"], analysis.stats[board["comparability_key"]]
    chances = [(c.predictor, c.metrics[headline]) for c in chance_rows(board, analysis.sample_ids(board))]
    values = [v for r in rows for v in ([r["value"]] if r["interval"] is None
                                        else [r["value"], r["interval"].low, r["interval"].high])]
    values += [v for _, v in chances]
    ticks, decimals = nice_ticks(min(values), max(values))
    low, high = ticks[0], ticks[-1]
    # a name wider than the chart widens it (then it scrolls on a phone) rather than being cut
    width = max(WIDTH, max(text_width(r["label"], FONT) for r in rows) + 2 * PAD)
    title = wrapped(f"{stats.code} {stats.label}: {headline}, 95% interval", width - 2 * PAD)
    top = 18.0 * len(title) + 14
    bottom = top + len(rows) * ROW_H + 6
    legend = [f"{name}: chance ({value:.{decimals + 1}f})" for name, value in chances]
    height = bottom + 28 + 18 * len(legend) + PAD
    svg = Svg(width, height, f"{stats.title}: {headline} per row with its 95% bootstrap interval", GENERATED_HEADER)
    for i, line in enumerate(title):
        svg.text(PAD, 18 + 18 * i, line, FONT, bold=True)
    left, plot_w = PAD + 6, width - 2 * PAD - 12  # room for a dot at either end

    def x_of(value: float) -> float:
        return left + (value - low) / (high - low) * plot_w if high > low else left + plot_w / 2

    for tick in ticks:
        svg.line(x_of(tick), top, x_of(tick), bottom, GRID_STROKE)
        svg.text(x_of(tick), bottom + 16, f"{tick:.{decimals}f}", FONT, "middle")
    svg.line(left, bottom, left + plot_w, bottom, AXIS_STROKE)
    for _, value in chances:
        svg.polyline([(x_of(value), top), (x_of(value), bottom)], CHANCE_COLOUR, width=1.0, dashed=True)
    for i, row in enumerate(rows):
        y = top + i * ROW_H + 24  # the whisker; the name sits above it
        svg.text(PAD, y - 10, row["label"], FONT)
        interval = row["interval"]
        tip = f"{row['label']}: {headline} {row['value']:.4f}"
        if interval is not None:
            tip += f" [{interval.low:.4f}, {interval.high:.4f}]"
            svg.line(x_of(interval.low), y, x_of(interval.high), y, row["colour"])
            for end in (interval.low, interval.high):
                svg.line(x_of(end), y - 4, x_of(end), y + 4, row["colour"])
        svg.circle(x_of(row["value"]), y, 4.0, row["colour"], f"{tip}; {row['kind']}")
    for j, text in enumerate(legend):
        svg.text(PAD, bottom + 36 + 18 * j, text, FONT, fill=CHANCE_COLOUR)
    return svg.render()


def wrapped(text: str, width: float) -> list[str]:
    """`text` in lines of at most `width` px at FONT, broken at spaces (a longer word stands alone on its line)."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and text_width(f"{lines[-1]} {word}", FONT) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines
