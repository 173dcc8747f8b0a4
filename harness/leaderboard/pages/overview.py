"""The home page (cross-task table, reading guide, board legend, levels, tasks, backbones) and the agreement page."""

from __future__ import annotations

from typing import Any

from harness.leaderboard.markdown import (
    NO_AGGREGATE,
    backbone_link,
    board_link,
    cell,
    level_link,
    page,
    short,
    table,
    task_link,
    with_interval,
)
from harness.leaderboard.sections.crosstask import render_board_legend, render_crosstask
from harness.leaderboard.statistics.analysis import Analysis, Standing
from harness.leaderboard.statistics.bootstrap import ALPHA, MIN_CORRELATION_N, RESAMPLES, Interval

READING_GUIDE = [
    "### Reading guide { #reading-guide }",
    "",
    "- **Rows.** A row is a backbone with the layers its features were read from: dense tasks may probe "
    "several layer sets of one backbone, each its own row (\"efficientnet_lite0 · layers 3\"); a backbone "
    "with one layer set is named alone. Each backbone sees images at its own native input size.",
    "- **Normalised rank.** On each board, a pretrained row's normalised rank is the number of "
    "pretrained rows strictly better than it divided by one less than their count: 0 is the best, "
    "1 the worst, whatever the board's size (a board with a single pretrained row gives it 0). "
    "Ranks only compare runs on the same board, i.e. with the same comparability key. A row no better than its "
    "board's floor (its chance row or an image-blind baseline) is not ranked and counts as last "
    "([protocols](protocols.md#chance-rows)); a board where no row clears its floor is not a column.",
    "- **Mean normalised rank.** The mean of a row's normalised ranks over the boards it has a result on; "
    "the next column says how many boards that is, the last which are missing. Missing results are never "
    "filled in, so two means compare rows only when they cover the same boards: rows are sorted by coverage, "
    "rows missing the same boards side by side, best mean first. Filtering the table by level or dataset "
    "recomputes the means over the boards left.",
    "- **Controls** are never ranked and never aggregated; their tooltip says where they would place among "
    "the pretrained rows. Random-init controls (`NAME@random`) are grey and listed after the pretrained rows; "
    "fixed-filter **baselines** (`sobel`) are blue and listed among them at their value, as the reference a "
    "learned feature should beat.",
    "- **Confidence intervals** on task pages are 95% percentile bootstrap intervals of the headline "
    f"metric from the run's per-sample scores ({RESAMPLES} resamples, seeded by the run id and metric, so "
    "every build gives the same interval). A headline that is not a mean of per-sample scores (macro-F1, "
    "BSDS's ODS, mIoU, a pooled Pearson r, VOC or mask AP) is recomputed on every resample from the rows the "
    "run recorded for it (its images' labels and predictions, boundary counts, per-class pixel counts, "
    "correlation sums, or ranked detections). Boards whose runs have no per-sample scores show none.",
    "- **Ties.** Every pair of ranked rows on a board gets a paired bootstrap test on the same samples; "
    f"the p-values are Holm-adjusted over all pairs of the board. A row is tied with the row above when "
    f"that adjacent pair's adjusted p-value is ≥ {ALPHA}, or when their difference is within the larger of the "
    "two runs' recorded cross-CPU tolerances, or (on boards a seed sweep measured) within 1.96 × √2 × the "
    "board's seed-to-seed spread of the trained head; tied rows share a group letter (A for the top group). Each board "
    "states the smallest difference it resolves (the median half-width of its paired differences' intervals): "
    "tied means under about that, not equal. Chained ties are not transitive: A-rows at either end of a group may "
    "still differ. "
    "[Compare](compare.md) gives the verdict for any two rows directly.",
    "- **Board codes** (B-3031, in each board's tooltip and the list below) are the first hex digits of the "
    "board's comparability key: a code never changes when another board is added.",
    "- **Rank agreement** between boards is on the [agreement page](agreement.md); how well one board "
    "predicts another (R², ρ, mis-rank rate, and among the strongest rows only) on "
    "[proxy validity](proxy.md).",
    "- **Chance rows** on a board (never ranked) show what a predictor that never looks at the image scores, "
    "where the protocol has an exact value for it ([protocols](protocols.md#chance-rows)).",
    "- **Few-shot runs** (k training items, several subset seeds) are on no board and in no rank, mean or "
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
        "the same protocol, dataset content, split, pooling and precision. Random-init controls are listed "
        "beside the pretrained backbones for reference but never take a rank.",
        "",
        "How each number is measured: [Protocols](protocols.md). Two backbones side by side, with intervals "
        "and tie verdicts: [Compare](compare.md). Whether boards agree on the order: "
        "[Rank agreement](agreement.md); whether one board predicts another: [Proxy validity](proxy.md). "
        "The data, in CSV, Parquet and JSON, and how to cite it: "
        "[Downloads](downloads.md). How to re-run any row: [Reproduce](reproduce.md).",
        "",
        *render_standing(analysis),
        "## All boards at a glance { #cross-task }",
        "",
    ]
    if analysis.columns:
        lines += [
            "Each cell is a row's headline value on a board, coloured by its normalised rank there (green "
            "best, red worst among the pretrained rows; grey: a random-init control, blue: a fixed-filter "
            "baseline); hover for the rank and tie group, "
            "click for the board with its intervals. Click a column head to sort; choose a level or dataset "
            f"to narrow the boards. {NO_AGGREGATE}: no result. Diagnostics (class and target overlap, the "
            "head-family sweep) re-read a task's data to explain its numbers, so their boards are on their task "
            "pages only.",
            "",
        ]
    lines += render_crosstask(analysis)
    lines += [*READING_GUIDE, ""]
    if analysis.columns:
        lines += ["### Boards", "", *render_board_legend(analysis, ""), ""]
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
    # No table of contents beside the page: the cross-task table gets the room.
    return page(lines, ["hide:", "  - toc"])


# -- overall standing ---------------------------------------------------------------------------------

FIRST_SURE = 0.95  # a row first in at least this share of board resamples leads for real; below, the lead is open


def _top_groups(standing: Standing, analysis: Analysis) -> int:
    """Boards on which the row is in tie group A: where nothing ranked resolves above it."""
    row = standing.row
    return sum(1 for b in analysis.columns
               if (found := analysis.cells.get((row.backbone_name, row.layers, b["comparability_key"]))) is not None
               and analysis.stats[b["comparability_key"]].groups.get(found["run_id"]) == "A")


def _standing_rows(standings: list[Standing], analysis: Analysis) -> list[list[str]]:
    tiers = [s.tier for s in analysis.standings]
    # a row alone on its boards is first of nothing: no other row's mean is over the same boards
    return [[backbone_link(s.row.backbone_name, "", s.row.label),
             with_interval(s.row.aggregate, s.interval, digits=2), f"{s.covered} of {len(analysis.columns)}",
             f"{s.first:.0%}" if tiers.count(s.tier) > 1 else "alone on its boards",
             str(_top_groups(s, analysis))] for s in standings]


def render_standing(analysis: Analysis) -> list[str]:
    """Who is best overall, at what, and whether it is real: each pretrained row's mean normalised rank with a
    bootstrap interval over boards, its coverage, how often it comes first, and on how many boards it is in the
    top tie group; rows covering every board apart from rows covering fewer, which are never sorted above them."""
    if not analysis.standings:
        return []
    header = ["Backbone", "Mean normalised rank [95% CI]", "Boards", "First in", "Tie group A on"]
    full = [s for s in analysis.standings if not s.tier]
    partial = [s for s in analysis.standings if s.tier]
    lines = [
        "## Overall standing { #standing }",
        "",
        "A row's mean normalised rank over the boards it has a result on (0: best on every board, 1: last), with a "
        f"95% percentile interval from resampling the boards with replacement ({RESAMPLES} resamples, seeded from "
        "the board keys): how much the mean depends on which boards happen to be in the corpus. *First in*: the "
        "share of those resamples in which the row's mean is the best (or tied best) of the rows covering the same "
        f"boards; under {FIRST_SURE:.0%}, its lead is not resolved by these boards. *Tie group A on*: the boards "
        "where no ranked row is resolved above it. The interval does not cover the boards' own sampling error, "
        "which each board's tie groups do.",
        "",
    ]
    if full:
        best = min(full, key=lambda s: (s.row.aggregate, s.row.label))
        verdict = ("the only row on every board, so compared with none" if len(full) == 1 else
                   f"first in {best.first:.0%} of board resamples: a resolved lead" if best.first >= FIRST_SURE else
                   f"first in {best.first:.0%} of board resamples: not a resolved lead (under {FIRST_SURE:.0%})")
        interval = with_interval(best.row.aggregate, best.interval, digits=2)
        lines += [f"Best over all {len(analysis.columns)} boards: **{cell(best.row.label)}**, mean normalised rank "
                  f"{interval}, {verdict}.", "",
                  *table(header, _standing_rows(full, analysis)), ""]
    else:
        lines += ["No row has a result on every board, so no row's mean covers them all.", ""]
    if partial:
        lines += ["### Partial coverage", "",
                  "Rows with results on fewer boards: each mean is over its own boards, so it compares only with rows "
                  "covering the same boards (listed together, most boards first; *First in* is among those). "
                  "A low mean over a few boards does not place a row above the rows covering more.", "",
                  *table(header, _standing_rows(partial, analysis)), ""]
    return lines


# -- agreement ---------------------------------------------------------------------------------------


def _correlation(value: float | None) -> str:
    return NO_AGGREGATE if value is None else short(value)


def _interval(interval: Interval | None) -> str:
    return NO_AGGREGATE if interval is None else f"[{interval.low:.2f}, {interval.high:.2f}]"


def render_agreement(analysis: Analysis) -> str:
    lines = [
        "# Rank agreement",
        "",
        "Do boards order the backbones the same way? For every pair of boards (each task on each dataset "
        "and setting is its own column), the pretrained rows present on both are compared by their "
        "headline values, each oriented so that higher is better: Spearman's ρ (correlation of ranks) and "
        "Kendall's τ-b (pairs in the same order minus pairs in the opposite order, ties corrected). "
        "1 means the same order, −1 the reverse. Controls are left out: bad everywhere, they would make "
        "any two boards look in agreement.",
        "",
        f"Intervals are 95% percentile bootstrap intervals over rows ({RESAMPLES} resamples of the common "
        "rows with replacement; resamples where a board's values are all equal have no correlation and are "
        f"left out). Below {MIN_CORRELATION_N} common rows such an interval means nothing, so only pairs of "
        f"boards sharing at least {MIN_CORRELATION_N} pretrained rows are shown, and only boards in such a "
        "pair enter the matrix.",
        "",
    ]
    pairs = [(pair, c) for pair, c in analysis.agreement.items() if pair[0] != pair[1]]
    shown = [(pair, c) for pair, c in pairs if c.n >= MIN_CORRELATION_N]
    if not shown:
        most = max((c.n for _, c in pairs), default=0)
        return page([*lines, f"No two boards share {MIN_CORRELATION_N} pretrained rows yet: of "
                     f"{len(pairs)} pairs of boards, the most any pair shares is {most}. "
                     "Agreement can be measured once more backbones run on the same boards."])
    legend = []
    for number, board in enumerate(analysis.agreement_columns, start=1):
        stats = analysis.stats[board["comparability_key"]]
        legend.append([str(number), board_link(stats.label, board["task"], board["comparability_key"], ""),
                       cell(stats.title), cell(board["level"]), cell(board["headline_metric"]), stats.code])
    lines += [
        "![Rank agreement between boards](plots/agreement.svg){ .vb-figure }",
        "",
        "Each row of the matrix is a board's label above its cells; a column carries its row's number (# below). "
        "With many boards the cells show colour only: every pair's ρ and τ, with intervals, are in the table of "
        "pairs.",
        "",
        "## Boards",
        "",
        *table(["#", "Board", "What it is", "Level", "Headline", "Code"], legend),
        "",
        "## Pairs",
        "",
        f"{len(shown)} of {len(pairs)} pairs of boards share at least {MIN_CORRELATION_N} pretrained rows.",
        "",
    ]
    rows = [[cell(analysis.stats[first].label), cell(analysis.stats[second].label), str(c.n),
             _correlation(c.spearman), _interval(c.spearman_ci), _correlation(c.kendall), _interval(c.kendall_ci)]
            for (first, second), c in shown]
    # no table of contents beside it: the matrix and the tables get the room
    return page([*lines, *table(["Board", "Board", "n", "Spearman ρ", "95% CI", "Kendall τ-b", "95% CI"], rows)],
                ["hide:", "  - toc"])
