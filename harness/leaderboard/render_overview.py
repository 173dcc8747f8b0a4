"""The home page (heatmap, reading guide, aggregates, levels, tasks, backbones) and the agreement page."""

from __future__ import annotations

from typing import Any

from harness.leaderboard.analysis import Analysis
from harness.leaderboard.markdown import (
    NO_AGGREGATE,
    backbone_link,
    board_link,
    cell,
    page,
    protocol_link,
    short,
    table,
    task_link,
)
from harness.leaderboard.render_boards import level_link
from harness.leaderboard.statistics import ALPHA, MIN_CORRELATION_N, RESAMPLES, Correlation, Interval

READING_GUIDE = [
    "### Reading guide { #reading-guide }",
    "",
    "- **Normalised rank.** On each board, a pretrained backbone's normalised rank is the number of "
    "pretrained backbones strictly better than it divided by one less than their count: 0 is the best, "
    "1 the worst, whatever the board's size (a board with a single pretrained backbone gives it 0). "
    "Ranks only compare runs on the same board, i.e. with the same comparability key.",
    "- **Mean normalised rank.** The mean of a backbone's normalised ranks over every board of the "
    f"heatmap, shown only when it has a result on all of them; otherwise the cell reads {NO_AGGREGATE} and "
    "the table below names the missing boards. Missing results are never averaged over or filled in.",
    "- **Controls** (random-init `NAME@random`) are grey. Their number is the normalised rank they would "
    "take among the pretrained backbones (capped at 1); they are never ranked and never aggregated.",
    "- **Confidence intervals** on task pages are 95% percentile bootstrap intervals of the headline "
    f"metric from the run's per-sample scores ({RESAMPLES} resamples, seeded by the run id and metric, so "
    "every build gives the same interval). Boards whose runs have no per-sample scores show none.",
    "- **Ties.** Every pair of ranked rows on a board gets a paired bootstrap test on the same samples; "
    f"the p-values are Holm-adjusted over all pairs of the board. A row is tied with the row above when "
    f"that adjacent pair's adjusted p-value is ≥ {ALPHA}; tied rows share a group letter (A for the top "
    "group). Chained ties are not transitive: A-rows at either end of a group may still differ.",
    "- **Rank agreement** between boards is on the [agreement page](agreement.md).",
    "- **Few-shot runs** (k training items, several subset seeds) are on no board and in no rank, heatmap or "
    "agreement: a backbone has one such run per seed. Task pages draw them as learning curves instead.",
]


def render_index(
    levels: list[dict[str, Any]], tasks: list[dict[str, Any]], backbones: list[dict[str, Any]], analysis: Analysis
) -> str:
    lines = [
        "# visbench-harness leaderboard",
        "",
        "This leaderboard compares frozen vision backbones by training small probes on their features "
        "for high-, mid- and low-level tasks. Each number comes from one validated run record in "
        "`leaderboard/corpus.jsonl`, and every page here is generated from that file and the per-sample "
        "scores beside each record. Runs are ranked only against runs with the same comparability key: "
        "the same protocol, dataset content, split, pooling, layers, precision and image size. Random-init "
        "controls are listed beside the pretrained backbones for reference but never take a rank.",
        "",
        "How each number is measured: [Protocols](protocols.md). How to re-run any row: "
        "[Reproduce](reproduce.md). Whether boards agree on the order: [Rank agreement](agreement.md).",
        "",
        "## Normalised rank",
        "",
    ]
    if analysis.columns:
        lines += ["![Normalised rank of every backbone on every board](plots/heatmap.svg)", ""]
    else:
        lines += ["No board ranks a pretrained backbone yet.", ""]
    lines += [*READING_GUIDE, ""]
    if analysis.columns:
        lines += ["### Boards", "", *_board_legend(analysis, ""), "", "### Mean normalised rank", ""]
        lines += _aggregate_table(analysis)
        lines.append("")
    lines += ["## Levels", ""]
    if levels:
        lines += table(["Level", "Tasks", "Boards", "OK runs", "Failed runs"],
                       [[level_link(v["level"], ""), str(v["tasks"]), str(v["boards"]), str(v["ok_runs"]),
                         str(v["failed_runs"])] for v in levels])
    else:
        lines.append("No runs recorded yet.")
    lines += ["", "## Tasks", ""]
    if tasks:
        lines += table(
            ["Level", "Task", "Boards", "OK runs", "Failed runs"],
            [[t["level"], task_link(t["task"], ""), str(t["boards"]), str(t["ok_runs"]),
              str(t["failed_runs"])] for t in tasks],
        )
    else:
        lines.append("No runs recorded yet.")
    lines += ["", "## Backbones", ""]
    if backbones:
        lines += table(
            ["Backbone", "Control", "Tasks", "OK runs", "Failed runs"],
            [[backbone_link(b["backbone_name"], ""), "yes" if b["control"] else "no", str(b["tasks"]),
              str(b["ok_runs"]), str(b["failed_runs"])] for b in backbones],
        )
    else:
        lines.append("No backbones recorded yet.")
    return page(lines)


def _board_legend(analysis: Analysis, prefix: str) -> list[str]:
    rows = []
    for board in analysis.columns:
        stats = analysis.stats[board["comparability_key"]]
        rows.append([stats.code, board_link(stats.label, board["task"], board["comparability_key"], prefix),
                     cell(board["level"]), protocol_link(board["protocol"], prefix), cell(board["headline_metric"]),
                     str(sum(1 for r in board["rows"] if r["rank"] is not None))])
    return table(["Code", "Board", "Level", "Protocol", "Headline", "Ranked backbones"], rows)


def _aggregate_table(analysis: Analysis) -> list[str]:
    codes = {b["comparability_key"]: analysis.stats[b["comparability_key"]].code for b in analysis.columns}
    order = list(codes)
    rows = []
    for row in analysis.heatmap:
        present = len(analysis.columns) - len(row.missing)
        if row.control:
            why = "control: never aggregated"
        elif row.missing:
            why = "no result on " + ", ".join(codes[k] for k in sorted(row.missing, key=order.index))
        else:
            why = ""
        rows.append([backbone_link(row.backbone_name, ""), "yes" if row.control else "no",
                     f"{present} of {len(analysis.columns)}",
                     NO_AGGREGATE if row.aggregate is None else short(row.aggregate), why])
    return table(["Backbone", "Control", "Boards with a result", "Mean normalised rank", "Why no mean"], rows)


# -- agreement ---------------------------------------------------------------------------------------


def _correlation(value: float | None) -> str:
    return NO_AGGREGATE if value is None else short(value)


def _interval(correlation: Correlation, interval: Interval | None) -> str:
    if correlation.n < MIN_CORRELATION_N:
        return "n too small"
    return NO_AGGREGATE if interval is None else f"[{interval.low:.2f}, {interval.high:.2f}]"


def _matrix(analysis: Analysis, which: str) -> list[str]:
    keys = [b["comparability_key"] for b in analysis.columns]
    codes = [analysis.stats[k].code for k in keys]
    rows = []
    for i, first in enumerate(keys):
        cells = []
        for j, second in enumerate(keys):
            correlation = analysis.agreement[(first, second) if i <= j else (second, first)]
            value = getattr(correlation, which)
            cells.append(f"{_correlation(value)} (n={correlation.n})")
        rows.append([f"**{codes[i]}**", *cells])
    return table(["", *codes], rows)


def render_agreement(analysis: Analysis) -> str:
    lines = [
        "# Rank agreement",
        "",
        "Do boards order the backbones the same way? For every pair of boards (each task on each dataset "
        "and setting is its own column), the pretrained backbones present on both are compared by their "
        "headline values, each oriented so that higher is better: Spearman's ρ (correlation of ranks) and "
        "Kendall's τ-b (pairs in the same order minus pairs in the opposite order, ties corrected). "
        "1 means the same order, −1 the reverse. Controls are left out: bad everywhere, they would make "
        "any two boards look in agreement.",
        "",
        f"Intervals are 95% percentile bootstrap intervals over backbones ({RESAMPLES} resamples of the "
        "common backbones with replacement; resamples where a board's values are all equal have no "
        f"correlation and are left out). With fewer than {MIN_CORRELATION_N} common backbones there is no "
        f"interval (\"n too small\"), and with fewer than 2 no correlation ({NO_AGGREGATE}).",
        "",
    ]
    if not analysis.columns:
        return page([*lines, "No board ranks a pretrained backbone yet."])
    lines += [
        "![Rank agreement between boards](plots/agreement.svg)",
        "",
        "## Boards",
        "",
        *_board_legend(analysis, ""),
        "",
        "## Spearman ρ",
        "",
        *_matrix(analysis, "spearman"),
        "",
        "## Kendall τ-b",
        "",
        *_matrix(analysis, "kendall"),
        "",
        "## Pairs",
        "",
    ]
    rows = []
    for (first, second), correlation in analysis.agreement.items():
        if first == second:
            continue
        rows.append([analysis.stats[first].code, analysis.stats[second].code, str(correlation.n),
                     _correlation(correlation.spearman), _interval(correlation, correlation.spearman_ci),
                     _correlation(correlation.kendall), _interval(correlation, correlation.kendall_ci)])
    if rows:
        lines += table(["Board", "Board", "n", "Spearman ρ", "95% CI", "Kendall τ-b", "95% CI"], rows)
    else:
        lines.append("Only one board: nothing to compare.")
    return page(lines)
