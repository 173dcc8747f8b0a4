"""The rank-agreement matrix, drawn with `svg`, over the boards that share enough rows to be compared.

Boards are named by code (B-3031, …) with a legend under the figure, since "task (dataset)" labels are too
long for column heads; the column heads stand upright so that a column is as narrow as its values. Every text
is FONT px and the page shows the figure at its natural size (scrolling sideways if it must) rather than
shrinking it: legible axis text is checked in tests/test_browser.py. Colours are a fixed ramp; a cell shows its
correlation with two decimals and no leading zero (".42", "−.07", "1"), the diagonal each board's row count,
and every cell's tooltip the pair's common rows.
"""

from __future__ import annotations

from typing import Any

from harness.leaderboard.analysis import Analysis
from harness.leaderboard.markdown import GENERATED_HEADER, NO_AGGREGATE, short
from harness.leaderboard.statistics import MIN_CORRELATION_N
from harness.leaderboard.svg import Svg, mix, text_width

# -1 blue → white → +1 red: ColorBrewer RdBu ends.
CORRELATION_RAMP = [(-1.0, (33, 102, 172)), (0.0, (247, 247, 247)), (1.0, (178, 24, 43))]
DIAGONAL_FILL, DIAGONAL_TEXT = "#d9d9d9", "#444444"
EMPTY_FILL, EMPTY_STROKE, EMPTY_TEXT = "#ffffff", "#cccccc", "#777777"
FONT = 12.0
# the cells' values and n, the figure's smallest text: above the 11-px floor tests/test_browser.py holds every figure
# to (a figure a hair narrower than its column is drawn at 0.99998×), so that 28 boards' cells fit a laptop's column
CELL_FONT = 11.5
PAD = 10.0
FIT_WIDTH = 930.0  # the site's content column at a 1280-px window (tests/test_browser.py measures 938 px)


def _legend(svg: Svg, analysis: Analysis, columns: list[dict[str, Any]], y: float) -> float:
    """Board codes and labels, one per line, from `y`; returns the y below the last line."""
    for board in columns:
        stats = analysis.stats[board["comparability_key"]]
        svg.text(PAD, y, f"{stats.code}  {stats.label}", FONT)
        y += 18
    return y


def _legend_width(analysis: Analysis, columns: list[dict[str, Any]]) -> float:
    labels = [f"{analysis.stats[b['comparability_key']].code}  {analysis.stats[b['comparability_key']].label}"
              for b in columns]
    return max((text_width(label, FONT) for label in labels), default=0.0) + 2 * PAD


def compact(value: float) -> str:
    """A correlation in at most four characters: two decimals without the leading zero, ±1 as "1"."""
    digits = f"{abs(value):.2f}"
    digits = "1" if digits == "1.00" else digits.removeprefix("0")
    return ("−" if value < 0 and digits != ".00" else "") + digits


def agreement_svg(analysis: Analysis) -> str:
    """Spearman ρ below the diagonal, Kendall τ above it, the number of rows on the diagonal, over
    `analysis.agreement_columns`; a pair with fewer than MIN_CORRELATION_N common rows shows its n only."""
    columns = analysis.agreement_columns
    codes = [analysis.stats[b["comparability_key"]].code for b in columns]
    # 56 px a cell, narrower as boards are added (down to what a code, a value or an n needs), so that the matrix
    # keeps fitting a laptop's content column (FIT_WIDTH); past that floor the page scrolls it sideways
    label_w = text_width(max(codes, key=len, default=""), FONT) + 2 * PAD
    legible = max(text_width(t, CELL_FONT) for t in ("−.00", "n=99")) + 2
    fit = (FIT_WIDTH - label_w - PAD) / max(len(columns), 1)
    head_h = text_width(max(codes, key=len, default=""), FONT) + 12  # upright codes
    cell_w, cell_h, title_h = max(legible, min(56.0, fit)), 44.0, 24.0
    grid_x, grid_y = label_w, title_h + head_h
    legend_y = grid_y + len(columns) * cell_h + 2 * PAD
    title = "Rank agreement: Spearman ρ below the diagonal, Kendall τ above"
    width = max(grid_x + len(columns) * cell_w + PAD, _legend_width(analysis, columns),
                text_width(title, FONT) + 2 * PAD)
    height = legend_y + 18 * len(columns) + PAD
    svg = Svg(width, height, title, GENERATED_HEADER)
    svg.text(PAD, 16, title, FONT, bold=True)
    for i, code in enumerate(codes):
        svg.text(grid_x + (i + 0.5) * cell_w + 4, grid_y - 6, code, FONT, "start", bold=True, rotate=-90)
        svg.text(grid_x - 6, grid_y + (i + 0.5) * cell_h + 4, code, FONT, "end", bold=True)
    for r in range(len(columns)):
        for c in range(len(columns)):
            x, y = grid_x + c * cell_w, grid_y + r * cell_h
            first, second = sorted((r, c))
            pair = (columns[first]["comparability_key"], columns[second]["comparability_key"])
            correlation = analysis.agreement[pair]
            if r == c:
                svg.rect(x, y, cell_w, cell_h, DIAGONAL_FILL, "#ffffff", f"{codes[r]}: {correlation.n} rows")
                svg.text(x + cell_w / 2, y + cell_h / 2 + 4, f"n={correlation.n}", CELL_FONT, "middle", DIAGONAL_TEXT)
                continue
            name, value = ("Spearman", correlation.spearman) if r > c else ("Kendall", correlation.kendall)
            tip = f"{name} {codes[first]} vs {codes[second]}: {short(value)} over {correlation.n} rows"
            if correlation.n < MIN_CORRELATION_N:  # as the page's table: too few common rows to mean anything
                value, tip = None, (f"{codes[first]} vs {codes[second]}: {correlation.n} common rows, fewer than "
                                    f"{MIN_CORRELATION_N}: not estimated")
            if value is None:
                svg.rect(x, y, cell_w, cell_h, EMPTY_FILL, EMPTY_STROKE, tip)
                svg.text(x + cell_w / 2, y + cell_h / 2 + 4, NO_AGGREGATE, CELL_FONT, "middle", EMPTY_TEXT)
            else:
                svg.rect(x, y, cell_w, cell_h, mix(CORRELATION_RAMP, value), "#ffffff", tip)
                # The ramp's ends are dark: white text there, black elsewhere.
                faint = "#ffffff" if abs(value) > 0.6 else "#000000"
                svg.text(x + cell_w / 2, y + cell_h / 2 + 4, compact(value), CELL_FONT, "middle", faint)
    _legend(svg, analysis, columns, legend_y)
    return svg.render()
