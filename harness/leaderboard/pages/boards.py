"""Task pages (every board of a task, with intervals, tie groups and failed runs) and level pages."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from harness.core.run_key import RunKey
from harness.leaderboard.markdown import (
    MISSING,
    attribute,
    backbone_link,
    board_link,
    cell,
    code,
    count,
    dataset_text,
    level_link,
    number,
    p_value,
    page,
    protocol_link,
    run_link,
    table,
    task_link,
    truncate,
    value_text,
    with_interval,
)
from harness.leaderboard.sections.costs import board_cost_cell, render_level_costs
from harness.leaderboard.sections.curves import render_curves
from harness.leaderboard.sections.overlap import overlap_versus_linear
from harness.leaderboard.sitemap import board_anchor, board_distribution_path, board_figure_path, pr_figure_path
from harness.leaderboard.sources.costs import NO_COSTS, BackboneCost
from harness.leaderboard.statistics.analysis import BETTER, TIED, TIED_SEED, Analysis, BoardStats, seed_margin
from harness.leaderboard.statistics.bootstrap import ALPHA, RESAMPLES
from harness.leaderboard.statistics.chance import chance_rows


def render_board(board: dict[str, Any], analysis: Analysis, costs: Mapping[str, BackboneCost] = NO_COSTS
                 ) -> list[str]:
    """One board: its title, what it ranks by, caveats, the ranked table with intervals and tie groups, each row's
    cost (`sections.costs`), the paired tests, and (collapsed) the identity hashes and parameters that define it."""
    # imported here: the backbones package loads torch, which importing the leaderboard (`visbench-harness
    # pipeline` reads its plot definitions) should not pay for
    from harness.backbones.cards import trained_on

    key = board["comparability_key"]
    stats = analysis.stats[key]
    headline = board["headline_metric"]
    direction = "higher" if board["higher_is_better"] else "lower"
    lines = [
        f"## {cell(stats.title)} {{ #{board_anchor(key)} }}",
        "",
        *_warnings_at_top(board, stats),
        f"Board **{stats.code}**. Ranked by **{cell(headline)}** ({direction} is better) under "
        f"{protocol_link(board['protocol'], '../')}; tied values share a rank. "
        f"Data: [downloads](../downloads.md) (the whole corpus and every per-sample score)"
        + (f", [this board's score distributions](../{board_distribution_path(stats.code)}) (CSV)."
           if _scored(board, analysis) else "."),
        "",
        "Caveats: " + "; ".join(_caveats(board, stats)) + ".",
        "",
        *_certainty(board, stats),
    ]
    if stats.disagreements:
        parts = [f"{cell(headline)} and {cell(metric)} (Kendall τ-b {tau:.2f} over {n} rows)"
                 for metric, tau, n in stats.disagreements]
        lines += [f"Metric disagreement: the metrics order the rows differently: {'; '.join(parts)}. "
                  f"The rank follows {cell(headline)}.", ""]
    names = [m["metric"] for m in board["metrics"]]
    has_interval = any((row["run_id"], headline) in analysis.intervals for row in board["rows"])
    headline_head = f"**{cell(headline)}**" + (" [95% CI]" if has_interval else "")
    others = [n for n in names if n != headline]
    # Metrics that are not means (macro-F1, OIS, AP) carry their interval beside the value: the runs' per-sample
    # rows were kept for them (`RunSamples.statistics`); a mean's interval is on its run page.
    resampled = {n for n in others for row in board["rows"]
                 if n in getattr(analysis.samples.get(row["run_id"]), "statistics", {})}

    def other(row: dict[str, Any], name: str) -> str:
        interval = analysis.intervals.get((row["run_id"], name)) if name in resampled else None
        return with_interval(row["metrics"].get(name), interval) if interval else number(row["metrics"].get(name))

    # Rank, row, headline and tie group first: with the backbone column pinned (docs/stylesheets/site.css)
    # they stay in view however far a wide board scrolls, and on a phone's width before it scrolls.
    # Cost (parameters · GFLOPs · img/s, one compact cell) after the metrics: it widens the scrolled part only.
    header = ["Rank", "Backbone", headline_head, "Tie group",
              *(cell(n) + (" [95% CI]" if n in resampled else "") for n in others), "Cost", "Run"]
    # a board has one dataset, so one collection its rows' training data can overlap (DATASET_SOURCES)
    rows, seen_by, seen_source = [], set(), None
    for row in board["rows"]:
        overlap = trained_on(row["backbone_name"], board["dataset_name"])
        if overlap is not None:
            seen_by.add(row["backbone_name"])
            seen_source = overlap.name
        rank = ("baseline" if row["baseline"] else "control") if row["control"] else (
            "under floor" if row.get("gated") else MISSING if row["rank"] is None else str(row["rank"]))
        # A missing cell stays visibly missing: never filled, never averaged over.
        value = with_interval(row["metrics"].get(headline), analysis.intervals.get((row["run_id"], headline)))
        rows.append([rank, backbone_link(row["backbone_name"], "../", row["row_label"]) + (" †" if overlap else ""),
                     value,
                     stats.groups.get(row["run_id"], MISSING),
                     *(other(row, n) for n in others), board_cost_cell(row["backbone_name"], costs),
                     run_link({"run_id": row["run_id"], "task": board["task"]}, "../")
                     + (f" ⚠ {count(row['warnings'], 'warning')}" if row["warnings"] else "")])
    chances = chance_rows(board, analysis.sample_ids(board))
    for chance in chances:
        rows.append(["chance", cell(f"chance: {chance.predictor}"), number(chance.metrics.get(headline)), MISSING,
                     *(number(chance.metrics.get(n)) for n in others), MISSING, "analytic"])
    if stats.floor is not None and not any(f"chance ({c.predictor})" == stats.floor.source for c in chances):
        # an image-blind baseline the runs recorded: the floor the table's "under floor" rows did not beat
        rows.append(["floor", cell(stats.floor.source), number(stats.floor.value), MISSING,
                     *(MISSING for _ in others), MISSING, "recorded by the runs"])
    lines += ['<div class="vb-pinned vb-ranking" markdown>', "", *table(header, rows), "", "</div>", ""]
    if any(row["metrics"].get(headline) is not None for row in board["rows"]):  # what figures.boards draws
        lines += [f"![{attribute(stats.label)}: {cell(headline)} per row with its 95% interval]"
                  f"(../{board_figure_path(board['comparability_key'])}){{ .vb-figure }}", ""]
    if any(name.startswith("cnt_r_") for row in board["rows"] if row["run_id"] in analysis.samples
           for name in analysis.samples[row["run_id"]].auxiliary):  # what figures.pr draws
        lines += [f"![{attribute(stats.label)}: precision against recall per row, pooled over images, with each "
                  f"row's ODS point](../{pr_figure_path(board['comparability_key'])}){{ .vb-figure }}", ""]
    if chances:
        lines += ["Chance rows are never ranked: what a predictor that never looks at the image scores, derived "
                  "from the board's labels (see [chance rows](../protocols.md#chance-rows)); n/a where that "
                  "predictor has no exact value.", ""]
    if seen_by:
        lines += ["†: trained on this data: the declared training data of "
                  + f"{', '.join(cell(n) for n in sorted(seen_by))} includes {cell(seen_source)}"
                  + f", which this board's dataset ({cell(board['dataset_name'])}) is drawn from, so its features "
                  "have seen these images' collection: a measure of what it learned there, not of transfer. The row "
                  "is ranked as it scored; its backbone page names the training data.", ""]
    if any(row["warnings"] for row in board["rows"]):
        lines += ["⚠: the run carries warnings (what a reader must know to trust its numbers, such as a head near "
                  "chance): read them on its run page. Its numbers are what ran, and it stays on the board.", ""]
    return lines + overlap_versus_linear(board, analysis) + _adjacent_tests(board, stats) + _identity(board, stats)


def _warnings_at_top(board: dict[str, Any], stats: BoardStats) -> list[str]:
    """What changes how every row of the board reads, before anything else: no row beating the floor, rows from
    different machines."""
    lines = []
    if stats.ranked_none and stats.floor is not None:
        lines += ['!!! warning "No row clears this board\'s floor"', "",
                  f"    Every pretrained row scores no better than {cell(stats.floor.source)} "
                  f"({cell(board['headline_metric'])} {stats.floor.value:.4f}), so nothing on this board is ranked: "
                  "its rows are shown at their values, and the board is in no cross-task mean.", ""]
    if len(stats.devices) > 1:
        lines += [f'!!! note "Rows computed on {len(stats.devices)} kinds of device"', "",
                  "    This board's runs ran on " + "; ".join(f"`{d}`" for d in stats.devices) + ". A difference "
                  "between rows from different devices includes the devices' arithmetic: verdicts call it better "
                  "only beyond the rows' cross-CPU tolerance (below).", ""]
    return lines


def _certainty(board: dict[str, Any], stats: BoardStats) -> list[str]:
    """How certain the board's order is: its floor, the smallest difference it resolves, the tolerance verdicts use,
    and the seed spread it does not measure."""
    headline = cell(board["headline_metric"])
    parts = []
    if stats.floor is not None:
        gated = (f" Not beating it, shown but not ranked (*under floor*): {', '.join(cell(n) for n in stats.gated)}."
                 if stats.gated and not stats.ranked_none else "")
        parts.append(f"**Floor:** a row is ranked only when its {headline} beats {cell(stats.floor.source)}, "
                     f"{stats.floor.value:.4f} ([chance rows](../protocols.md#chance-rows)).{gated}")
    if stats.resolvable is not None:
        parts.append(f"**Smallest resolvable difference:** about {stats.resolvable:.4f} in {headline}, the median "
                     f"over the board's {len(stats.pairs)} tested pairs of the half-width of the paired difference's "
                     f"95% interval: *tied* means a difference under about that, not equality.")
    tolerances = [stats.tolerances[run_id] for run_id in stats.tested if run_id in stats.tolerances]
    if tolerances and max(tolerances) > 0:
        parts.append(f"**Cross-CPU tolerance:** a pair is *better* only when the difference also exceeds the larger "
                     f"of the two rows' recorded {headline} tolerance (here up to {max(tolerances):.4g}); the same run "
                     "on another CPU may move that far.")
    elif tolerances:
        parts.append(f"**Cross-CPU tolerance:** these rows' records carry none for {headline} (0), so the paired "
                     "test alone decides; a pair is *better* only beyond a tolerance where records carry one.")
    if stats.seed_spread is not None:
        swept = stats.seed_spread.rows
        parts.append(f"**Seed spread:** up to {stats.seed_spread.sd:.4f} in {headline} (the standard deviation over "
                     f"probe seeds of {count(len(swept), 'swept row')}, the largest); a pair is *better* only when "
                     f"the difference also exceeds {seed_margin(stats.seed_spread):.4f} (1.96 × √2 × that: two heads "
                     "each trained from one seed could differ that much by their seeds alone).")
    elif stats.trains_head:
        parts.append("**Seed spread not measured:** this protocol trains its head from a seeded start, and no "
                     "record re-trains it with another seed, so intervals cover the evaluation samples only.")
    return [" ".join(parts), ""] if parts else []


def _scored(board: dict[str, Any], analysis: Analysis) -> bool:
    """Whether any row has the headline as a per-sample score column: what the board's distribution CSV holds (a
    resampled statistic such as ODS has intervals but no per-sample score to plot)."""
    return any(board["headline_metric"] in analysis.samples[row["run_id"]].columns
               for row in board["rows"] if row["run_id"] in analysis.samples)


def _identity(board: dict[str, Any], stats: BoardStats) -> list[str]:
    """The hashes and parameters that make the board, folded away: what a reader checks, not reads."""
    sizes = ", ".join(f"{s} px" for s in board["image_sizes"]) or MISSING
    layer_sets = ", ".join(board["layer_sets"])
    items = [
        ("board code", stats.code), ("comparability key", board["comparability_key"]),
        ("dataset", f"{board['dataset_name']} ({board['split']} split)"),
        ("dataset identity", board["dataset_identity"]), ("protocol", board["protocol"]),
        *((f"protocol: {name}", value) for name, value in sorted(json.loads(board["protocol_params"]).items())),
        ("features", board["feature_mode"]), ("pooling requested", board["pooling_requested"]),
        ("precision", board["precision"]),
        ("input sizes", f"{sizes} (each backbone's own, not part of the key)"),
        ("layer sets", f"{layer_sets} (a row's, not part of the key)"),
        ("metrics", _directions(board["metrics"])),
    ]
    rows = [[cell(name), code(value) if name in _HASHES else value_text(value)] for name, value in items]
    return [f'??? info "What defines board {stats.code}: comparability key, dataset identity, parameters"', "",
            *("    " + line for line in table(["Field", "Value"], rows)), ""]


_HASHES = ("comparability key", "dataset identity")


def _caveats(board: dict[str, Any], stats: BoardStats) -> list[str]:
    ranked = sum(1 for row in board["rows"] if row["rank"] is not None)
    notes = []
    if stats.sample_count is not None:
        notes.append(f"{count(stats.sample_count, cell(stats.unit))} per run")
    if stats.without_samples and not stats.tested:
        notes.append("no per-sample scores, so no confidence intervals or tie groups on this board")
    elif stats.without_samples:
        notes.append("no per-sample scores for " + ", ".join(cell(n) for n in stats.without_samples)
                     + " (no interval or tie group)")
    if ranked == 0:
        notes.append("controls only: nothing is ranked")
    elif ranked == 1:
        notes.append("one pretrained row: its rank compares it with nothing")
    if len(stats.tested) > 1 and stats.p_floor >= ALPHA:
        notes.append(f"with {len(stats.pairs)} pairs and {RESAMPLES} resamples no Holm-adjusted p-value can fall "
                     f"below {stats.p_floor:.4f}, so every row is tied: ties here mean \"not resolvable\"")
    notes.append(f"see the protocol's notes in {protocol_link(board['protocol'], '../')}")
    return notes


def _adjacent_tests(board: dict[str, Any], stats: BoardStats) -> list[str]:
    if len(stats.tested) < 2:
        return []
    names = {row["run_id"]: row["row_label"] for row in board["rows"]}
    lines = [
        f"Paired bootstrap on {cell(board['headline_metric'])} between adjacent ranked rows (difference = upper − "
        f"lower, {RESAMPLES} resamples); p-values Holm-adjusted over all {len(stats.pairs)} pairs on this board. "
        f"A row is tied with the row above when the adjusted p-value is ≥ {ALPHA} (tied: under the board's "
        f"resolvable difference), or when the difference is within the larger of the two rows' cross-CPU "
        f"tolerances (tied: within tolerance).",
        "",
    ]
    rows = []
    for upper, lower in stats.adjacent:
        test = stats.pairs[upper, lower]
        adjusted = stats.adjusted[upper, lower]
        rows.append([cell(names[upper]), cell(names[lower]),
                     f"{test.difference:+.4f} [{test.low:+.4f}, {test.high:+.4f}]",
                     p_value(test.p_value), p_value(adjusted), _tied(stats.verdicts[upper, lower], stats)])
    return [*lines, '<div class="vb-pinned" markdown>', "",
            *table(["Upper", "Lower", "Difference [95% CI]", "p", "Holm p", "Tied"], rows), "", "</div>", ""]


def _tied(verdict: str, stats: BoardStats) -> str:
    if verdict == BETTER:
        return "no"
    if verdict == TIED:
        return f"yes: under {stats.resolvable:.4f}" if stats.resolvable is not None else "yes"
    if verdict == TIED_SEED:
        return "yes: within seed spread"
    return "yes: within tolerance"


def _directions(metrics: list[dict[str, Any]]) -> str:
    parts = []
    for wanted, label in ((True, "Higher is better"), (False, "Lower is better")):
        names = [cell(m["metric"]) for m in metrics if m["higher_is_better"] is wanted]
        if names:
            parts.append(f"{label}: {', '.join(names)}.")
    return " ".join(parts)


def retry_command(failure: dict[str, Any]) -> str:
    """The CLI command that re-runs the stage behind a failed record (its grid, when the run id names one)."""
    try:
        where = f"grid={RunKey.from_run_id(failure['run_id'], failure['k_shot'], failure['seed']).grid} "
    except ValueError:
        where = ""
    return f"visbench-harness {where}task={failure['task']} backbone={failure['backbone_name']}"


def render_task_page(
    task: dict[str, Any], boards: list[dict[str, Any]], failed: list[dict[str, Any]], analysis: Analysis,
    curves: list[dict[str, Any]], curve_labels: dict[str, str], reference: list[str] = (),
    costs: Mapping[str, BackboneCost] = NO_COSTS,
) -> str:
    """`reference`: what the boards are measured against outside the corpus (harness.leaderboard.sources.references)."""
    fewshot = task["fewshot_runs"]
    runs = f"{count(task['ok_runs'] - fewshot, 'successful run')} on {count(task['boards'], 'board')}, "
    if fewshot:
        runs += (f"{count(fewshot, 'few-shot run')} on {count(task['curves'], 'learning curve')} "
                 "([below](#learning-curves)), ")
    lines = [
        f"# {cell(task['task'])}",
        "",
        f"Level: {level_link(task['level'], '../')}. {runs}{count(task['failed_runs'], 'failed run')}. "
        "Each board ranks the runs that share a comparability key; a row is a backbone with the layers its "
        "features were read from. Numbers on different boards are not comparable. Headline values carry a "
        "95% bootstrap interval over the run's per-sample rows; rows sharing a tie group letter are not "
        "significantly different (see the [reading guide](../index.md#reading-guide)); "
        "[compare](../compare.md) puts any two rows side by side on every board they share.",
        "",
    ]
    if not boards:
        lines += ["No successful runs on a board." if fewshot else "No successful runs.", ""]
    for board in boards:
        lines += render_board(board, analysis, costs)
    lines += render_curves(curves, curve_labels)
    lines += reference
    lines += ["## Failed runs", ""]
    if failed:
        lines += ["The latest failed attempt of each run; an earlier ok record of the same run, if any, is still the "
                  "one on the boards. Re-running the command retries it.", ""]
        lines += table(
            ["Run", "Backbone", "Dataset", "Phase", "Error type", "Message", "Retry"],
            [[run_link(f, "../") if f["in_corpus"] else cell(f["run_id"]),
              backbone_link(f["backbone_name"], "../"), dataset_text(f),
              cell(f["failure_phase"]), cell(f["failure_type"]), cell(truncate(f["failure_message"])),
              f"`{retry_command(f)}`"]
             for f in failed],
        )
    else:
        lines.append("None.")
    return page(lines)


def render_level_page(level: dict[str, Any], tasks: list[dict[str, Any]], analysis: Analysis,
                      costs: Mapping[str, BackboneCost] = NO_COSTS) -> str:
    boards = [b for b in analysis.boards if b["level"] == level["level"]]
    lines = [
        f"# {cell(level['level'])}-level tasks",
        "",
        f"{count(level['tasks'], 'task')}, {count(level['boards'], 'board')}, "
        f"{count(level['ok_runs'], 'successful run')}, {count(level['failed_runs'], 'failed run')}.",
        "",
        "## Tasks",
        "",
        *table(["Task", "Boards", "OK runs", "Failed runs"],
               [[task_link(t["task"], "../"), str(t["boards"]), str(t["ok_runs"]), str(t["failed_runs"])]
                for t in tasks]),
        "",
        "## Boards",
        "",
    ]
    if not boards:
        return page([*lines, "No successful runs."])
    rows = []
    for board in boards:
        stats = analysis.stats[board["comparability_key"]]
        ranked = [r for r in board["rows"] if r["rank"] is not None]
        best = ", ".join(backbone_link(r["backbone_name"], "../", r["row_label"]) for r in ranked if r["rank"] == 1)
        top_group = [backbone_link(r["backbone_name"], "../", r["row_label"]) for r in ranked
                     if stats.groups.get(r["run_id"]) == "A"]
        rows.append([
            stats.code, board_link(stats.label, board["task"], board["comparability_key"], "../"),
            protocol_link(board["protocol"], "../"), cell(board["headline_metric"]), str(len(ranked)),
            str(sum(1 for r in board["rows"] if r["control"])), best or MISSING, ", ".join(top_group) or MISSING,
        ])
    lines += table(["Code", "Board", "Protocol", "Headline", "Ranked", "Controls", "Rank 1", "Tie group A"], rows)
    lines += ["", *render_level_costs(level["level"], analysis, costs)]
    return page(lines)
