"""The site's two figures, drawn with `svg`: the normalised-rank heatmap and the rank-agreement matrix.

Boards are columns named by code (B1, B2, …) with a legend under the figure, since "task (dataset)"
labels are too long for column heads. Colours are fixed ramps; numbers use two decimals.
"""

from __future__ import annotations

from typing import Any

from harness.leaderboard.analysis import Analysis
from harness.leaderboard.markdown import GENERATED_HEADER, NO_AGGREGATE, short
from harness.leaderboard.svg import Svg, mix, text_width

# 0 (best) green → yellow → red (worst): ColorBrewer RdYlGn ends, reversed.
RANK_RAMP = [(0.0, (26, 152, 80)), (0.5, (254, 224, 139)), (1.0, (215, 48, 39))]
# -1 blue → white → +1 red: ColorBrewer RdBu ends.
CORRELATION_RAMP = [(-1.0, (33, 102, 172)), (0.0, (247, 247, 247)), (1.0, (178, 24, 43))]
CONTROL_FILL, CONTROL_TEXT = "#d9d9d9", "#555555"
EMPTY_FILL, EMPTY_STROKE, EMPTY_TEXT = "#ffffff", "#cccccc", "#999999"
FONT, SMALL = 12.0, 10.0
PAD = 10.0


def _legend(svg: Svg, analysis: Analysis, y: float) -> float:
    """Board codes and labels, one per line, from `y`; returns the y below the last line."""
    for board in analysis.columns:
        stats = analysis.stats[board["comparability_key"]]
        svg.text(PAD, y, f"{stats.code}  {stats.label}", FONT)
        y += 16
    return y


def _legend_width(analysis: Analysis) -> float:
    labels = [f"{analysis.stats[b['comparability_key']].code}  {analysis.stats[b['comparability_key']].label}"
              for b in analysis.columns]
    return max((text_width(label, FONT) for label in labels), default=0.0) + 2 * PAD


def heatmap_svg(analysis: Analysis) -> str:
    cell_w, cell_h, title_h, head_h = 52.0, 22.0, 24.0, 20.0
    rows, columns = analysis.heatmap, analysis.columns
    name_w = max((text_width(r.backbone_name, FONT) for r in rows), default=60.0) + 2 * PAD
    grid_x, grid_y = name_w, title_h + head_h
    mean_x = grid_x + len(columns) * cell_w + PAD
    grid_bottom = grid_y + len(rows) * cell_h
    key_y = grid_bottom + 2 * PAD
    legend_y = key_y + 18 + 12 + 3 * PAD  # below the swatches and their captions
    title = "Normalised rank per board (0 = best, 1 = worst among pretrained backbones)"
    width = max(mean_x + cell_w + PAD, _legend_width(analysis), text_width(title, FONT) + 2 * PAD, 420.0)
    height = legend_y + 16 * len(columns) + PAD
    svg = Svg(width, height, title, GENERATED_HEADER)
    svg.text(PAD, 16, title, FONT, bold=True)

    for i, board in enumerate(columns):
        svg.text(grid_x + (i + 0.5) * cell_w, grid_y - 6, analysis.stats[board["comparability_key"]].code,
                 FONT, "middle", bold=True)
    svg.text(mean_x + cell_w / 2, grid_y - 6, "mean", FONT, "middle", bold=True)

    for j, row in enumerate(rows):
        y = grid_y + j * cell_h
        svg.text(name_w - PAD, y + cell_h / 2 + 4, row.backbone_name, FONT, "end",
                 CONTROL_TEXT if row.control else "#000000")
        for i, board in enumerate(columns):
            x = grid_x + i * cell_w
            code = analysis.stats[board["comparability_key"]].code
            cell = analysis.cells.get((row.backbone_name, board["comparability_key"]))
            if cell is None:
                svg.rect(x, y, cell_w, cell_h, EMPTY_FILL, EMPTY_STROKE, f"{row.backbone_name} on {code}: no result")
                svg.text(x + cell_w / 2, y + cell_h / 2 + 4, NO_AGGREGATE, FONT, "middle", EMPTY_TEXT)
            elif cell["control"]:
                tip = (f"{row.backbone_name} on {code}: control, not ranked; would place at "
                       f"{short(cell['normalised_rank'])}")
                svg.rect(x, y, cell_w, cell_h, CONTROL_FILL, "#ffffff", tip)
                svg.text(x + cell_w / 2, y + cell_h / 2 + 4, short(cell["normalised_rank"]), FONT, "middle",
                         CONTROL_TEXT)
            else:
                tip = (f"{row.backbone_name} on {code}: rank {cell['rank']} of {board_size(board)} "
                       f"(normalised {short(cell['normalised_rank'])})")
                svg.rect(x, y, cell_w, cell_h, mix(RANK_RAMP, cell["normalised_rank"]), "#ffffff", tip)
                svg.text(x + cell_w / 2, y + cell_h / 2 + 4, short(cell["normalised_rank"]), FONT, "middle")
        if row.aggregate is None:
            why = "control: never aggregated" if row.control else f"missing {len(row.missing)} board(s)"
            svg.rect(mean_x, y, cell_w, cell_h, EMPTY_FILL, EMPTY_STROKE, f"{row.backbone_name}: no mean ({why})")
            svg.text(mean_x + cell_w / 2, y + cell_h / 2 + 4, NO_AGGREGATE, FONT, "middle", EMPTY_TEXT)
        else:
            svg.rect(mean_x, y, cell_w, cell_h, mix(RANK_RAMP, row.aggregate), "#ffffff",
                     f"{row.backbone_name}: mean normalised rank {short(row.aggregate)}")
            svg.text(mean_x + cell_w / 2, y + cell_h / 2 + 4, short(row.aggregate), FONT, "middle", bold=True)

    # Key: the ramp in eleven steps, then the grey and empty swatches.
    swatch = 18.0
    for step in range(11):
        svg.rect(PAD + step * swatch, key_y, swatch, swatch, mix(RANK_RAMP, step / 10))
    svg.text(PAD, key_y + swatch + 12, "0 best", SMALL)
    svg.text(PAD + 11 * swatch, key_y + swatch + 12, "1 worst", SMALL, "end")
    x = PAD + 11 * swatch + 2 * PAD
    svg.rect(x, key_y, swatch, swatch, CONTROL_FILL)
    svg.text(x + swatch + 4, key_y + 13, "control (not ranked)", SMALL)
    x += swatch + 4 + text_width("control (not ranked)", SMALL) + 2 * PAD
    svg.rect(x, key_y, swatch, swatch, EMPTY_FILL, EMPTY_STROKE)
    svg.text(x + swatch + 4, key_y + 13, f"{NO_AGGREGATE} no result", SMALL)
    _legend(svg, analysis, legend_y)
    return svg.render()


def board_size(board: dict[str, Any]) -> int:
    return sum(1 for row in board["rows"] if row["rank"] is not None)


def agreement_svg(analysis: Analysis) -> str:
    """Spearman ρ below the diagonal, Kendall τ above it, the number of backbones on the diagonal."""
    cell_w, cell_h, title_h, head_h = 64.0, 40.0, 24.0, 20.0
    columns = analysis.columns
    codes = [analysis.stats[b["comparability_key"]].code for b in columns]
    label_w = 4 * PAD
    grid_x, grid_y = label_w, title_h + head_h
    grid_bottom = grid_y + len(columns) * cell_h
    legend_y = grid_bottom + 2 * PAD
    title = "Rank agreement between boards: Spearman ρ below the diagonal, Kendall τ above"
    width = max(grid_x + len(columns) * cell_w + PAD, _legend_width(analysis), text_width(title, FONT) + 2 * PAD)
    height = legend_y + 16 * len(columns) + PAD
    svg = Svg(width, height, title, GENERATED_HEADER)
    svg.text(PAD, 16, title, FONT, bold=True)
    for i, code in enumerate(codes):
        svg.text(grid_x + (i + 0.5) * cell_w, grid_y - 6, code, FONT, "middle", bold=True)
        svg.text(grid_x - 6, grid_y + (i + 0.5) * cell_h + 4, code, FONT, "end", bold=True)
    for r in range(len(columns)):
        for c in range(len(columns)):
            x, y = grid_x + c * cell_w, grid_y + r * cell_h
            first, second = sorted((r, c))
            pair = (columns[first]["comparability_key"], columns[second]["comparability_key"])
            correlation = analysis.agreement[pair]
            if r == c:
                svg.rect(x, y, cell_w, cell_h, CONTROL_FILL, "#ffffff", f"{codes[r]}: {correlation.n} backbones")
                svg.text(x + cell_w / 2, y + cell_h / 2 + 4, f"n={correlation.n}", SMALL, "middle", CONTROL_TEXT)
                continue
            name, value = ("Spearman", correlation.spearman) if r > c else ("Kendall", correlation.kendall)
            tip = f"{name} {codes[first]} vs {codes[second]}: {short(value)} over {correlation.n} backbones"
            if value is None:
                svg.rect(x, y, cell_w, cell_h, EMPTY_FILL, EMPTY_STROKE, tip)
                svg.text(x + cell_w / 2, y + cell_h / 2, NO_AGGREGATE, FONT, "middle", EMPTY_TEXT)
                faint = CONTROL_TEXT
            else:
                svg.rect(x, y, cell_w, cell_h, mix(CORRELATION_RAMP, value), "#ffffff", tip)
                # The ramp's ends are dark: white text there, black elsewhere.
                faint = "#ffffff" if abs(value) > 0.6 else "#000000"
                svg.text(x + cell_w / 2, y + cell_h / 2, short(value), FONT, "middle", faint)
            svg.text(x + cell_w / 2, y + cell_h / 2 + 14, f"n={correlation.n}", SMALL, "middle", faint)
    _legend(svg, analysis, legend_y)
    return svg.render()
