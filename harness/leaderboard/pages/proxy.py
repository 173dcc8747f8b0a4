"""The proxy-validity page (`proxy_validity`'s fits as tables, one section per proxy board) and its figures:
Spearman ρ against the proxy threshold T, one line per target board (BioBench's figure)."""

from __future__ import annotations

from harness.leaderboard.figures.style import FONT, PAD, PALETTE, PLOT_W, draw_axes, draw_legend_entry, nice_ticks
from harness.leaderboard.figures.svg import Svg, text_width
from harness.leaderboard.markdown import GENERATED_HEADER, MISSING, board_link, cell, page, table
from harness.leaderboard.sitemap import PROXY_DATA, proxy_figure_path
from harness.leaderboard.statistics.analysis import Analysis
from harness.leaderboard.statistics.bootstrap import MIN_CORRELATION_N, RESAMPLES, Interval
from harness.leaderboard.statistics.proxy_validity import ProxyFit

PLOT_H = 200.0  # shorter than a learning curve's: ρ spans a fixed [-1, 1]


def _interval(interval: Interval | None) -> str:
    if interval is None:
        return MISSING
    return f"{interval.estimate:.2f} [{interval.low:.2f}, {interval.high:.2f}]"


def _proxies(analysis: Analysis, fits: list[ProxyFit]) -> list[str]:
    """Proxy keys that have at least one fit, in the cross-task table's column order."""
    keys = {fit.proxy for fit in fits}
    return [b["comparability_key"] for b in analysis.columns if b["comparability_key"] in keys]


def render_proxy_page(analysis: Analysis, fits: list[ProxyFit]) -> str:
    lines = [
        "# Proxy validity",
        "",
        "If a backbone ranks high on one board, will it rank high on another? Each board is taken in turn as the "
        "*proxy* for every other board (the *target*), over the pretrained rows (backbone and layer set) with a "
        "headline value on both, each oriented so that higher is better; controls are left out, since being bad "
        "everywhere they would make any proxy look valid. For each pair:",
        "",
        "- **R²**: the squared Pearson correlation of the headline values, the share of the target's variance a "
        "straight line through the proxy explains;",
        "- **Spearman ρ** and **Kendall τ-b**: agreement of the two orders (1 the same, −1 reversed);",
        "- **mis-rank rate**: of the pairs of backbones the target orders, the share the proxy orders the other "
        "way (a pair the proxy ties counts one half); 0 is a perfect proxy, 0.5 a coin;",
        "- the **threshold sweep**: ρ and the mis-rank rate over only the rows whose proxy value is at T or "
        f"better, for every T among the proxy's values that leaves at least {MIN_CORRELATION_N} rows. A proxy "
        "can order the whole range well and still fail among the strong backbones, which are the ones a reader "
        "chooses between.",
        "",
        f"Intervals are 95% percentile bootstrap intervals over the rows ({RESAMPLES} resamples with replacement; "
        "a resample where a statistic is undefined, e.g. all values equal, is left out of its interval). "
        "**Caveat**: with as few rows as these boards share, the intervals are wide and themselves rough (a "
        "bootstrap over four to seven backbones has few distinct resamples); read them as \"how little is "
        f"known\", not as a test. Below {MIN_CORRELATION_N} shared rows nothing is estimated, and each section "
        "says which targets that leaves out.",
        "",
        f"Every number here, and every sweep point, is in the data table [{PROXY_DATA}]({PROXY_DATA}) (CSV, boards "
        "by code, empty where not estimated); [rank agreement](agreement.md) shows ρ and τ as a matrix.",
        "",
    ]
    proxies = _proxies(analysis, fits)
    if not proxies:
        return page([*lines, "No two boards share two pretrained rows yet."])
    for proxy in proxies:
        lines += _proxy_section(analysis, proxy, [fit for fit in fits if fit.proxy == proxy])
    return page(lines)


def _proxy_section(analysis: Analysis, proxy: str, fits: list[ProxyFit]) -> list[str]:
    stats = analysis.stats[proxy]
    board = analysis.board(proxy)
    lines = [f"## {cell(stats.label)} as the proxy", "",
             f"Proxy: {board_link(stats.title, board['task'], proxy, '')} (board {stats.code}), headline "
             f"{cell(board['headline_metric'])}.", ""]
    estimated = [fit for fit in fits if fit.whole is not None]
    if estimated:
        rows = []
        for fit in estimated:
            target = analysis.stats[fit.target]
            rows.append([board_link(target.label, analysis.board(fit.target)["task"], fit.target, ""),
                         cell(analysis.board(fit.target)["level"]), str(fit.n), _interval(fit.whole.r2),
                         _interval(fit.whole.spearman), _interval(fit.whole.kendall), _interval(fit.whole.misrank)])
        lines += table(["Target", "Level", "n", "R² [95% CI]", "Spearman ρ [95% CI]", "Kendall τ-b [95% CI]",
                        "Mis-rank rate [95% CI]"], rows)
        lines.append("")
    too_few = [fit for fit in fits if fit.whole is None]
    if too_few:
        names = ", ".join(f"{cell(analysis.stats[f.target].label)} (n = {f.n})" for f in too_few)
        lines += [f"Not estimated, fewer than {MIN_CORRELATION_N} shared pretrained rows: {names}.", ""]
    swept = [fit for fit in estimated if fit.sweep]
    if swept:
        lines += [f"![Spearman ρ above a threshold of {cell(stats.label)}]({proxy_figure_path(stats.code)})"
                  "{ .vb-figure }", "",
                  f'??? note "Threshold sweep of {cell(stats.label)}: ρ and mis-rank rate at each T"', ""]
        rows = [[cell(analysis.stats[fit.target].label), f"{point.threshold:.4f}", str(point.estimates.n),
                 _interval(point.estimates.spearman), _interval(point.estimates.misrank)]
                for fit in swept for point in fit.sweep]
        lines += ["    " + line for line in table(["Target", f"T ({cell(board['headline_metric'])})", "n",
                                                    "Spearman ρ [95% CI]", "Mis-rank rate [95% CI]"], rows)]
        lines.append("")
    else:
        lines += [f"No threshold sweep: no target shares more than {MIN_CORRELATION_N} rows with this proxy, so "
                  f"any threshold past the weakest row leaves fewer than {MIN_CORRELATION_N}.", ""]
    return lines


def proxy_figures(analysis: Analysis, fits: list[ProxyFit]) -> dict[str, str]:
    """{path relative to docs/: SVG} per proxy with a sweep."""
    figures = {}
    for proxy in _proxies(analysis, fits):
        swept = [fit for fit in fits if fit.proxy == proxy and fit.whole is not None and fit.sweep]
        if swept:
            figures[proxy_figure_path(analysis.stats[proxy].code)] = _sweep_svg(analysis, proxy, swept)
    return figures


def _sweep_svg(analysis: Analysis, proxy: str, fits: list[ProxyFit]) -> str:
    stats, board = analysis.stats[proxy], analysis.board(proxy)
    # Each line starts at the whole range: T = the weakest shared row's value, where every row counts.
    series = [(analysis.stats[fit.target].label,
               [(fit.weakest, fit.whole.spearman), *((p.threshold, p.estimates.spearman) for p in fit.sweep)])
              for fit in fits]
    thresholds = [t for _, points in series for t, _ in points]
    x_ticks, x_decimals = nice_ticks(min(thresholds), max(thresholds))
    y_ticks = [-1.0, -0.5, 0.0, 0.5, 1.0]
    title = f"Spearman ρ among the rows at or beyond T on {stats.label}"
    x_title = f"T: {board['headline_metric']} of the proxy ({'higher' if board['higher_is_better'] else 'lower'}" \
              " is better); rows at T or better count"
    left, top = PAD + text_width("-0.5", FONT) + 8, 50.0
    bottom = top + PLOT_H
    legend_top = bottom + 62
    names = [name for name, _ in series]
    width = max(left + PLOT_W + 2 * PAD, PAD + 30 + max(text_width(n, FONT) for n in names) + PAD,
                text_width(title, FONT) + 2 * PAD, text_width(x_title, FONT) + 2 * PAD)
    svg = Svg(width, legend_top + 18 * len(series) + PAD, title, GENERATED_HEADER)
    svg.text(PAD, 16, title, FONT, bold=True)
    svg.text(PAD, top - 14, "Spearman ρ with the target (bars: 95% bootstrap interval)", FONT)
    low, high = x_ticks[0], x_ticks[-1]
    sign = 1.0 if board["higher_is_better"] else -1.0

    def x_of(value: float) -> float:
        # Better proxy values to the right, whichever way the proxy's metric runs.
        fraction = (value - low) / (high - low)
        return left + (fraction if sign > 0 else 1.0 - fraction) * PLOT_W

    def y_of(value: float) -> float:
        return bottom - (value + 1.0) / 2.0 * PLOT_H

    draw_axes(svg, left, top, bottom, [(y_of(t), f"{t:.1f}") for t in y_ticks],
              [(x_of(t), f"{t + 0.0:.{x_decimals}f}") for t in x_ticks])
    svg.text(PAD, bottom + 38, x_title, FONT)
    for index, (name, points) in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        dashed = index >= len(PALETTE)  # a second pass through the palette is told apart by its dashes
        defined = [(t, rho) for t, rho in points if rho is not None]
        xy = [(x_of(t), y_of(rho.estimate)) for t, rho in defined]
        for (x, _), (_, rho) in zip(xy, defined, strict=True):
            svg.line(x, y_of(rho.low), x, y_of(rho.high), colour)
        if len(xy) > 1:
            svg.polyline(xy, colour, dashed=dashed)
        for (x, y), (t, rho) in zip(xy, defined, strict=True):
            svg.circle(x, y, 3.5, colour, f"{name}: ρ {rho.estimate:.2f} [{rho.low:.2f}, {rho.high:.2f}] at "
                                          f"T = {t:.4f}")
        draw_legend_entry(svg, legend_top + index * 18, colour, dashed, name)
    return svg.render()

