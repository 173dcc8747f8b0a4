"""What a `data=` or `score` run answers in the terminal: each of your headlines with its 95% bootstrap interval
and, where its board has committed rows, the paired verdict against the best ranked one (or, where none is
ranked, the best committed control), all computed by the leaderboard's own code (`analyse`: the same intervals,
seeds, paired tests, Holm adjustment and cross-CPU tolerances) on the records the user site renders, so the
terminal and the site never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.bootstrap import Interval, paired_seed
from harness.leaderboard.queries import db
from harness.leaderboard.statistics.analysis import (
    BETTER,
    TIED,
    TIED_SEED,
    TIED_TOLERANCE,
    Analysis,
    analyse,
    seed_margin,
    verdict,
)
from harness.leaderboard.statistics.bootstrap import PairedTest, paired_bootstrap, paired_statistic_bootstrap
from harness.runs.records import Record

WORSE = "worse"  # the committed row is better: BETTER read from your side
__all__ = ["BETTER", "TIED", "TIED_SEED", "TIED_TOLERANCE", "WORSE", "Headline", "Versus", "headline_table",
           "headlines"]


@dataclass(frozen=True)
class Versus:
    """Your row against one committed row of its board, by the paired bootstrap over their shared samples."""

    against: str  # the committed row's label
    role: str  # "best committed row" or "committed control"
    test: PairedTest  # difference = yours − theirs
    p_value: float
    holm: bool  # p is Holm-adjusted over the board's pairs (both rows ranked), else a single test's
    verdict: str  # BETTER, WORSE, TIED, TIED_TOLERANCE or TIED_SEED (harness.leaderboard.statistics.analysis)


@dataclass(frozen=True)
class Headline:
    run_id: str
    row: str  # your row's label (`NAME@yours` beside committed rows)
    board: str  # the board's code
    metric: str
    value: float | None
    interval: Interval | None  # None without per-sample scores
    versus: Versus | None  # None where the board has no committed row with per-sample scores

    def cells(self) -> list[str]:
        value = "n/a" if self.value is None else f"{self.value:.4f}"
        if self.interval is not None:
            value += f" [{self.interval.low:.4f}, {self.interval.high:.4f}]"
        if self.versus is None:
            return [self.row, self.board, self.metric, value, "no committed row on its board", "", "", ""]
        versus, test = self.versus, self.versus.test
        shown = f"{versus.p_value:.3f}" if versus.p_value >= 0.001 else f"{versus.p_value:.1e}"
        p = f"{'Holm ' if versus.holm else ''}p {shown}"
        return [self.row, self.board, self.metric, value, f"{versus.against} ({versus.role})",
                f"{test.difference:+.4f} [{test.low:+.4f}, {test.high:+.4f}]", p, versus.verdict]


HEADER = ["Row", "Board", "Headline", "Value [95% CI]", "Against", "Δ yours − theirs [95% CI]", "p", "Verdict"]


def headline_table(headlines: list[Headline]) -> str:
    """An aligned plain-text table, one line per run, for the terminal."""
    rows = [HEADER, *(h.cells() for h in headlines)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def headlines(records: list[Record], yours: int, root: Path = Path(".")) -> list[Headline]:
    """One Headline for each of the last `yours` records: what `harness.user.score.beside_boards` returns, your
    records (renamed where they land on a committed board) after the committed rows of those boards."""
    mine = records[len(records) - yours:]
    con = db.connect_corpus(records, [])
    try:
        analysis = analyse(con, records, root)
    finally:
        con.close()
    ours = {r.run_id for r in mine}
    by_run = {r.run_id: r for r in records}
    return [_headline(record, analysis, ours, by_run) for record in mine]


def _headline(record: Record, analysis: Analysis, ours: set[str], by_run: dict[str, Record]) -> Headline:
    board = next((b for b in analysis.boards if any(row["run_id"] == record.run_id for row in b["rows"])), None)
    if board is None:  # a few-shot run is on no board: its number alone
        return Headline(record.run_id, record.backbone_name, "-", record.headline_metric, record.headline, None, None)
    key, metric = board["comparability_key"], board["headline_metric"]
    stats = analysis.stats[key]
    row = next(r for r in board["rows"] if r["run_id"] == record.run_id)
    interval = analysis.intervals.get((record.run_id, metric))  # a column's mean or a resampled statistic
    committed = [r for r in board["rows"] if r["run_id"] not in ours and r["headline_value"] is not None
                 and r["run_id"] in analysis.samples and analysis.samples[r["run_id"]].resamplable(metric)]
    target = next((r for r in committed if r["rank"] is not None), None)
    role = "best committed row"
    if target is None:  # rows come best first; a control where the board ranks no committed row
        target, role = next(iter(committed), None), "committed control"
    versus = None
    if target is not None and record.run_id in analysis.samples:
        versus = _versus(record.run_id, target, role, board, analysis, by_run)
    return Headline(record.run_id, row["row_label"], stats.code, metric, row["headline_value"], interval, versus)


def _versus(run_id: str, target: dict[str, Any], role: str, board: dict[str, Any], analysis: Analysis,
            by_run: dict[str, Record]) -> Versus:
    key, metric = board["comparability_key"], board["headline_metric"]
    stats = analysis.stats[key]
    theirs = target["run_id"]
    if (run_id, theirs) in stats.pairs or (theirs, run_id) in stats.pairs:  # both ranked: the board's own test
        pair = (run_id, theirs) if (run_id, theirs) in stats.pairs else (theirs, run_id)
        test = stats.pairs[pair]
        if pair[0] != run_id:
            test = PairedTest(-test.difference, -test.high, -test.low, test.p_value, test.count)
        p_value, holm, said = stats.adjusted[pair], True, stats.verdicts[pair]
    else:  # a control on either side: one paired test, seeded as the board seeds its pairs
        a, b = analysis.samples[run_id], analysis.samples[theirs]
        seed = paired_seed(key, a.sha256, b.sha256, metric)
        if metric in a.columns and metric in b.columns:
            test = paired_bootstrap(a.ids, a.columns[metric], b.ids, b.columns[metric], seed)
        else:
            test = paired_statistic_bootstrap(a.ids, lambda order: a.statistic(metric, order), b.ids,
                                              lambda order: b.statistic(metric, order), seed)
        tolerance = max(by_run[r].tolerances.get(metric, 0.0) for r in (run_id, theirs))
        p_value, holm = test.p_value, False
        said = verdict(test, p_value, tolerance, seed_margin(stats.seed_spread))
    if said == BETTER:
        higher = bool(board["higher_is_better"])
        said = BETTER if (test.difference > 0) == higher else WORSE
    return Versus(target["row_label"], role, test, p_value, holm, said)
