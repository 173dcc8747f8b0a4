"""A boundary board's precision–recall curves, drawn with `svg`, as BSDS papers draw them.

Each row whose run recorded its images' BSDS counts (`harness.probes.statistics.boundary.count_columns`) gets one curve:
the counts pooled over the evaluation images, recall and precision at every threshold, joined in threshold
order, with a dot at the run's ODS point (the best F along the curve, `boundary.metrics.best_f_batch`: the
value the board ranks). Dotted iso-F contours (F = 0.1 … 0.9) are the background, as in the benchmark's own
plots. Ranked rows take the palette in rank order; a fixed-filter baseline is blue-grey and random-init
controls grey, both dashed. The legend names each row with its ODS F.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.leaderboard.figures.boards import BASELINE_COLOUR, CONTROL_COLOUR
from harness.leaderboard.figures.style import AXIS_STROKE, FONT, GRID_STROKE, PAD, PALETTE
from harness.leaderboard.figures.svg import Svg, text_width
from harness.leaderboard.markdown import GENERATED_HEADER
from harness.leaderboard.statistics.analysis import Analysis
from harness.probes.boundary.metrics import best_f_batch, recall_precision
from harness.probes.statistics.boundary import counts_of

SIDE = 320.0  # the square plot, px
ISO_F = [round(0.1 * i, 1) for i in range(1, 10)]


def pr_curves(board: dict[str, Any], analysis: Analysis) -> list[dict[str, Any]]:
    """Per row with BSDS counts, in the board's order: label, recall and precision per threshold, the ODS point,
    colour and whether it is a control (dashed)."""
    curves, rank = [], 0
    for row in board["rows"]:
        run = analysis.samples.get(row["run_id"])
        if run is None or not any(name.startswith("cnt_r_") for name in run.auxiliary):
            continue
        recall, precision = recall_precision(counts_of(run.auxiliary).sum(axis=0))
        best = best_f_batch(recall[None], precision[None])
        if row["control"]:
            colour = BASELINE_COLOUR if row["baseline"] else CONTROL_COLOUR
        else:
            colour, rank = PALETTE[rank % len(PALETTE)], rank + 1
        curves.append({"label": row["row_label"], "recall": recall, "precision": precision,
                       "ods": (float(best.recall[0]), float(best.precision[0]), float(best.f[0])),
                       "colour": colour, "dashed": bool(row["control"])})
    return curves


def pr_svg(board: dict[str, Any], analysis: Analysis) -> str | None:
    """The figure, or None for a board none of whose runs recorded BSDS counts."""
    curves = pr_curves(board, analysis)
    if not curves:
        return None
    stats = analysis.stats[board["comparability_key"]]
    title = f"{stats.code} {stats.label}: precision–recall, pooled over images"
    left, top = PAD + 44.0, 30.0
    bottom = top + SIDE
    legend = [f"{c['label']}  ODS F {c['ods'][2]:.3f}" for c in curves]
    legend_x = left + SIDE + 24.0
    width = max(legend_x + 22.0 + max(text_width(t, FONT) for t in legend) + PAD, text_width(title, FONT) + 2 * PAD)
    height = max(bottom + 44.0, top + 18.0 * len(legend) + PAD)
    svg = Svg(width, height, f"{stats.title}: precision against recall per row, with its ODS point",
              GENERATED_HEADER)
    svg.text(PAD, 18, title, FONT, bold=True)

    def xy(recall: float, precision: float) -> tuple[float, float]:
        return left + recall * SIDE, bottom - precision * SIDE

    for f in ISO_F:  # P = fR / (2R - f) for R in (f/2, 1]
        recall = np.linspace(f / 2 + 1e-3, 1.0, 60)
        precision = f * recall / (2 * recall - f)
        keep = precision <= 1.0
        svg.polyline([xy(r, p) for r, p in zip(recall[keep], precision[keep], strict=True)], GRID_STROKE,
                     width=1.0, dashed=True)
    for tick in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        x, y = xy(tick, tick)
        svg.line(x, bottom, x, bottom + 4, AXIS_STROKE)
        svg.text(x, bottom + 16, f"{tick:.1f}", FONT, "middle")
        svg.line(left - 4, y, left, y, AXIS_STROKE)
        svg.text(left - 6, y + 4, f"{tick:.1f}", FONT, "end")
    svg.line(left, top, left, bottom, AXIS_STROKE)
    svg.line(left, bottom, left + SIDE, bottom, AXIS_STROKE)
    svg.text(left + SIDE / 2, bottom + 34, "recall", FONT, "middle")
    svg.text(PAD, top + 12, "precision", FONT)
    for curve in reversed(curves):  # the best-ranked drawn last, on top
        points = [xy(r, p) for r, p in zip(curve["recall"], curve["precision"], strict=True) if r > 0 or p > 0]
        svg.polyline(points, curve["colour"], width=1.5, dashed=curve["dashed"])
        recall, precision, f = curve["ods"]
        svg.circle(*xy(recall, precision), 4.0, curve["colour"],
                   f"{curve['label']}: ODS F {f:.4f} at recall {recall:.3f}, precision {precision:.3f}")
    for i, (curve, text) in enumerate(zip(curves, legend, strict=True)):
        y = top + 12 + 18.0 * i
        svg.polyline([(legend_x, y - 4), (legend_x + 16, y - 4)], curve["colour"], width=2.0, dashed=curve["dashed"])
        svg.text(legend_x + 22, y, text, FONT)
    return svg.render()
