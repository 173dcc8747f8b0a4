"""The rank-agreement matrix, drawn with `svg`, over the boards that share enough rows to be compared.

Boards are named by their labels ("classification (cifar10)"), which tell them apart; a board's code (B-3031) is in
its label's tooltip. The figure is a phone's width (figures.boards.WIDTH) at its natural size, every text at least
11 px (tests/test_browser.py): no "task (dataset)" label fits beside or above 28 columns there, so each matrix row
is its board's numbered label with its cells below it (as the interval charts put a row's name above its whisker)
and the columns are headed by the same numbers, top and bottom. Each board is named where its row is read, and a
column's number is found among the row labels of the same figure, never in a separate legend. Where the cells are
wide enough (a few boards) they show the correlation with two decimals and no leading zero (".42", "−.07", "1")
and the diagonal each board's row count; at 28 boards a cell is 11 px wide and shows its colour only (the agreement
page's table gives every pair's ρ and τ with intervals). Colours are a fixed ramp, keyed under the matrix; every
cell's tooltip names the pair, the value and their common rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from harness.leaderboard.figures.boards import WIDTH, wrapped
from harness.leaderboard.figures.svg import Svg, escape, mix, text_width
from harness.leaderboard.markdown import GENERATED_HEADER, NO_AGGREGATE, short
from harness.leaderboard.statistics.analysis import Analysis, BoardStats
from harness.leaderboard.statistics.bootstrap import MIN_CORRELATION_N, Correlation

# -1 blue → white → +1 red: ColorBrewer RdBu ends.
CORRELATION_RAMP = [(-1.0, (33, 102, 172)), (0.0, (247, 247, 247)), (1.0, (178, 24, 43))]
DIAGONAL_FILL, DIAGONAL_TEXT = "#d9d9d9", "#444444"
EMPTY_FILL, EMPTY_STROKE, EMPTY_TEXT = "#ffffff", "#cccccc", "#777777"
FONT = 12.0  # labels, numbers, title and key
# the cells' values and n, where they fit: above the 11-px floor tests/test_browser.py holds every figure to
# (a figure a hair narrower than its column is drawn at 0.99998×)
CELL_FONT = 11.5
PAD = 10.0
MAX_CELL = 56.0  # a cell's width when there are few boards
LINE = 15.0  # a row label's line
KEY_STEPS = 21  # slices of the colour key, -1 to 1 by 0.1


@contextmanager
def titled(svg: Svg, tooltip: str) -> Iterator[None]:
    """What is drawn inside shows `tooltip` on hover: a <g> whose first child is its <title>."""
    svg.elements.append(f"<g><title>{escape(tooltip)}</title>")
    yield
    svg.elements.append("</g>")


def compact(value: float) -> str:
    """A correlation in at most four characters: two decimals without the leading zero, ±1 as "1"."""
    digits = f"{abs(value):.2f}"
    digits = "1" if digits == "1.00" else digits.removeprefix("0")
    return ("−" if value < 0 and digits != ".00" else "") + digits


def _name(stats: BoardStats) -> str:
    return f"{stats.label} ({stats.code})"


def _cell(svg: Svg, x: float, y: float, w: float, h: float, values: bool, first: BoardStats, second: BoardStats,
          correlation: Correlation, spearman: bool) -> None:
    """One off-diagonal cell: `first` and `second` in column order, Spearman's ρ below the diagonal, Kendall's τ
    above; a pair with fewer than MIN_CORRELATION_N common rows is not estimated (as in the page's table)."""
    name, value = ("Spearman ρ", correlation.spearman) if spearman else ("Kendall τ", correlation.kendall)
    pair = f"{_name(first)} vs {_name(second)}"
    if correlation.n < MIN_CORRELATION_N:
        value = None
        tip = f"{pair}: {correlation.n} common rows, fewer than {MIN_CORRELATION_N}: not estimated"
    else:
        tip = f"{name}, {pair}: {short(value)} over {correlation.n} rows"
    if value is None:
        svg.rect(x, y, w, h, EMPTY_FILL, EMPTY_STROKE, tip)
        if values:
            svg.text(x + w / 2, y + h / 2 + 4, NO_AGGREGATE, CELL_FONT, "middle", EMPTY_TEXT)
        else:  # the tables' dash, drawn: at 11 px an empty cell and a ρ near 0 are both near white
            svg.line(x + w * 0.25, y + h / 2, x + w * 0.75, y + h / 2, EMPTY_TEXT)
        return
    svg.rect(x, y, w, h, mix(CORRELATION_RAMP, value), "#ffffff", tip)
    if values:  # the ramp's ends are dark: white text there, black elsewhere
        svg.text(x + w / 2, y + h / 2 + 4, compact(value), CELL_FONT, "middle",
                 "#ffffff" if abs(value) > 0.6 else "#000000")


def _key(svg: Svg, y: float, width: float, swatch: float, values: bool) -> float:
    """The colour ramp from −1 to 1 and the two cells that are not a correlation, from `y`; returns the y below."""
    step = (width - 2 * PAD) / KEY_STEPS
    for i in range(KEY_STEPS):
        svg.rect(PAD + i * step, y, step, 12, mix(CORRELATION_RAMP, -1 + 2 * i / (KEY_STEPS - 1)))
    svg.text(PAD, y + 28, "−1: reversed order", FONT)
    svg.text(width / 2, y + 28, "0", FONT, "middle")
    svg.text(width - PAD, y + 28, "1: same order", FONT, "end")
    y += 44
    entries = [(DIAGONAL_FILL, None, "the board itself" + (", n: its rows" if values else "")),
               (EMPTY_FILL, EMPTY_STROKE, f"fewer than {MIN_CORRELATION_N} common rows: not estimated")]
    for fill, stroke, text in entries:
        svg.rect(PAD, y, swatch, 12, fill, stroke)
        if stroke:
            svg.line(PAD + swatch * 0.25, y + 6, PAD + swatch * 0.75, y + 6, EMPTY_TEXT)
        svg.text(PAD + swatch + 8, y + 11, text, FONT)
        y += 20
    return y


def agreement_svg(analysis: Analysis) -> str:
    """Spearman ρ below the diagonal, Kendall τ above it, the number of rows on the diagonal, over
    `analysis.agreement_columns`; a pair with fewer than MIN_CORRELATION_N common rows is not estimated."""
    columns = analysis.agreement_columns
    boards = [analysis.stats[b["comparability_key"]] for b in columns]
    # a label longer than the chart wraps (a single word too long for it widens the chart rather than being cut)
    width = max(WIDTH, max((text_width(w, FONT) for s in boards for w in s.label.split()), default=0.0) + 2 * PAD)
    inner = width - 2 * PAD
    cell_w = min(MAX_CELL, inner / max(len(boards), 1))
    values = cell_w >= max(text_width(t, CELL_FONT) for t in ("−.00", "n=99")) + 4
    cell_h = 26.0 if values else max(12.0, min(cell_w, 16.0))
    number_w = text_width(str(len(boards)), FONT)
    upright = number_w + 2 > cell_w  # two-digit numbers stand upright over cells narrower than they are
    head_h = number_w + 8 if upright else 18.0
    title = wrapped("Rank agreement: Spearman ρ below the diagonal, Kendall τ above", inner)
    labels = [wrapped(f"{i + 1}  {s.label}", inner) for i, s in enumerate(boards)]
    top = 18.0 * len(title) + 8
    rows_h = sum(LINE * len(lines) + 4 + cell_h + 6 for lines in labels)
    bottom = top + head_h + rows_h
    svg = Svg(width, 0.0, title=" ".join(title), header=GENERATED_HEADER)  # its height once the key is drawn
    for i, line in enumerate(title):
        svg.text(PAD, 18 + 18 * i, line, FONT, bold=True)

    def heads(y: float, above: bool) -> None:
        """Column numbers along `y`: the grid's top edge (`above` it) or its bottom edge."""
        for c, stats in enumerate(boards):
            x = PAD + (c + 0.5) * cell_w
            with titled(svg, f"{c + 1}: {_name(stats)}"):
                if upright:  # reads upwards, its digits centred on the column
                    svg.text(x + 4, y - 4 if above else y + 4 + number_w, str(c + 1), FONT, "start", rotate=-90)
                else:
                    svg.text(x, y - 5 if above else y + 14, str(c + 1), FONT, "middle")

    heads(top + head_h, above=True)
    y = top + head_h
    for r, (stats, lines) in enumerate(zip(boards, labels, strict=True)):
        with titled(svg, f"{stats.code}: {stats.title}"):
            for j, line in enumerate(lines):
                svg.text(PAD, y + 12 + LINE * j, line, FONT)
        y += LINE * len(lines) + 4
        for c in range(len(boards)):
            x = PAD + c * cell_w
            first, second = sorted((r, c))
            correlation = analysis.agreement[columns[first]["comparability_key"], columns[second]["comparability_key"]]
            if r == c:
                svg.rect(x, y, cell_w, cell_h, DIAGONAL_FILL, "#ffffff", f"{_name(stats)}: {correlation.n} rows")
                if values:
                    svg.text(x + cell_w / 2, y + cell_h / 2 + 4, f"n={correlation.n}", CELL_FONT, "middle",
                             DIAGONAL_TEXT)
            else:
                _cell(svg, x, y, cell_w, cell_h, values, boards[first], boards[second], correlation, r > c)
        y += cell_h + 6
    heads(bottom, above=False)
    svg.height = _key(svg, bottom + head_h + 14, width, min(cell_w, 24.0), values) + PAD
    return svg.render()
