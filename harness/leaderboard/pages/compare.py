"""The compare page: any two rows (backbone and layer set) on every board they share, with the paired
difference of their per-sample headline scores, its interval and a verdict.

Pairs of pretrained rows reuse the board's own paired tests (`analysis`), so a verdict here is the same
test, Holm-adjusted over the same pairs, that draws the board's tie groups. A pair with a control gets its
paired difference and interval, computed the same way, but no test: controls are never ranked.

Every pair is one table row, in one orientation (A's label before B's); with JavaScript,
docs/javascripts/compare.js offers two menus, shows the chosen pair's rows and flips a row whose A and B
are the other way round. The rows' links carry what it needs (data-a, data-b, data-winner).
"""

from __future__ import annotations

from typing import Any

from harness.leaderboard.markdown import (
    MISSING,
    attribute,
    backbone_link,
    board_link,
    cell,
    number,
    p_value,
    page,
    table,
)
from harness.leaderboard.statistics.analysis import TIED_SEED, TIED_TOLERANCE, Analysis
from harness.leaderboard.statistics.bootstrap import ALPHA, RESAMPLES, PairedTest, paired_bootstrap, paired_seed

# |SQL's mean paired difference − the bootstrap's| above this means the two pairings disagree.
_DIFFERENCE_TOLERANCE = 1e-9


def _signed(value: float) -> str:
    return f"{value:+.4f}"


def _test(pair: dict[str, Any], board: dict[str, Any], analysis: Analysis) -> tuple[PairedTest | None, float | None]:
    """The paired test of a − b and its Holm-adjusted p-value (None for a pair the board does not test)."""
    stats = analysis.stats[board["comparability_key"]]
    a, b = pair["run_a"], pair["run_b"]
    if (a, b) in stats.pairs:
        return stats.pairs[a, b], stats.adjusted[a, b]
    if (b, a) in stats.pairs:
        test = stats.pairs[b, a]
        flipped = PairedTest(-test.difference, -test.high, -test.low, test.p_value, test.count)
        return flipped, stats.adjusted[b, a]
    headline = board["headline_metric"]
    sample_a, sample_b = analysis.samples.get(a), analysis.samples.get(b)
    if pair["paired_n"] is None or sample_a is None or sample_b is None \
            or not pair["paired_n"] == pair["samples_a"] == pair["samples_b"]:
        return None, None
    seed = paired_seed(board["comparability_key"], sample_a.sha256, sample_b.sha256, headline)  # as the board's
    return paired_bootstrap(sample_a.ids, sample_a.columns[headline], sample_b.ids, sample_b.columns[headline],
                            seed), None


def _verdict(pair: dict[str, Any], board: dict[str, Any], test: PairedTest | None, adjusted: float | None,
             board_verdict: str | None = None) -> tuple[str, str]:
    """(winner: "a", "b", "tie" or "", the verdict as text); `board_verdict`: the board's for a pair it tests
    (`BoardStats.verdicts`), which also asks the difference to exceed the rows' cross-CPU tolerance and the board's
    seed margin."""
    if test is None:
        if pair["paired_n"] is not None and pair["paired_n"] < max(pair["samples_a"], pair["samples_b"]):
            return "", "not comparable sample by sample (different samples)"
        return "", "no per-sample scores: no interval, no test"
    if adjusted is None:
        if not (pair["control_a"] or pair["control_b"]):
            return "", "not tested: a row under the board's floor is never ranked (interval only)"
        return "", "not tested: a control is never ranked (interval only)"
    if adjusted >= ALPHA:
        return "tie", "tied"
    if board_verdict in (TIED_TOLERANCE, TIED_SEED):
        return "tie", board_verdict
    a_better = (test.difference > 0) == bool(board["higher_is_better"])
    return ("a", f"{pair['label_a']} better") if a_better else ("b", f"{pair['label_b']} better")


def render_compare(analysis: Analysis, pairs: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "# Compare two backbones",
        "",
        "Choose two rows (a backbone, with its layer set where it has several) to see every board both are on: "
        "their headline values, the paired difference A − B over the samples both were scored on, its 95% "
        f"percentile bootstrap interval ({RESAMPLES} resamples of the samples, shared by both runs), the "
        f"Holm-adjusted p-value and the verdict. Two pretrained rows are *tied* when the adjusted p-value is ≥ "
        f"{ALPHA}, or *tied within the cross-CPU tolerance* when the difference does not exceed the larger of the "
        "two rows' recorded tolerances on the headline, or *tied within the seed-to-seed spread* when it does not "
        "exceed the board's seed margin (where a seed sweep measured one: 1.96 × √2 × the spread of the head over "
        "probe seeds); otherwise the better one is named, following the board's "
        "direction (for a lower-is-better metric a negative difference favours A). The test is the board's own: "
        "the same paired bootstrap, adjusted over all pairs of pretrained rows on the board, that draws its tie "
        "groups. A control, or a row under its board's floor (chance or an image-blind baseline), gets its "
        "difference and interval but no test, since neither is ranked.",
        "",
        "Without JavaScript the table lists every pair on every board.",
        "",
    ]
    rows = []
    for board in analysis.boards:
        key = board["comparability_key"]
        stats = analysis.stats[key]
        for pair in pairs.get(key, []):
            test, adjusted = _test(pair, board, analysis)
            if test is not None and pair["difference"] is not None \
                    and abs(test.difference - pair["difference"]) > _DIFFERENCE_TOLERANCE:
                raise AssertionError(f"board {stats.code}: {pair['run_a']} vs {pair['run_b']}: the SQL and bootstrap "
                                     "pairings give different mean differences")
            board_verdict = stats.verdicts.get((pair["run_a"], pair["run_b"]),
                                               stats.verdicts.get((pair["run_b"], pair["run_a"])))
            winner, verdict = _verdict(pair, board, test, adjusted, board_verdict)
            difference = (f"{_signed(test.difference)} [{_signed(test.low)}, {_signed(test.high)}]" if test
                          else _signed(pair["value_a"] - pair["value_b"]))
            direction = "higher" if board["higher_is_better"] else "lower"
            link = board_link(f"{stats.code} {stats.label}", board["task"], key, "")
            link += (f'{{ .vb-pair data-a="{attribute(pair["label_a"])}" data-b="{attribute(pair["label_b"])}" '
                     f'data-winner="{winner}" }}')
            rows.append([link, f"{cell(board['headline_metric'])} ({direction})",
                         backbone_link(pair["backbone_a"], "", pair["label_a"]),
                         backbone_link(pair["backbone_b"], "", pair["label_b"]),
                         number(pair["value_a"]), number(pair["value_b"]), difference,
                         MISSING if adjusted is None else p_value(adjusted), cell(verdict)])
    if not rows:
        return page([*lines, "No board holds two rows yet: nothing to compare."])
    header = ["Board", "Headline", "A", "B", "A value", "B value", "A − B [95% CI]", "Holm p", "Verdict"]
    return page([*lines, '<div class="vb-pinned vb-compare" markdown>', "", *table(header, rows), "", "</div>"],
                ["hide:", "  - toc"])  # no table of contents beside the page: the table gets the room
