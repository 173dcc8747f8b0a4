"""Backbone pages: identities, rank profile across boards (with the aggregate or why it is withheld), runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.leaderboard.markdown import (
    MISSING,
    NO_AGGREGATE,
    board_link,
    cell,
    code,
    key_value_table,
    number,
    page,
    run_link,
    short,
    table,
    task_link,
    with_interval,
)
from harness.leaderboard.sections.costs import backbone_cost_line
from harness.leaderboard.sections.identity import weights_items
from harness.leaderboard.sitemap import curve_anchor, page_stem
from harness.leaderboard.sources.costs import NO_COSTS, BackboneCost
from harness.leaderboard.statistics.analysis import Analysis


def _card_lines(name: str) -> list[str]:
    """Licence, training data (with sizes) and where the weights come from (`harness.backbones.cards`); a control
    was trained on nothing."""
    from harness.backbones.cards import card, describe  # here: the backbones package loads torch (pages/boards.py)

    described = card(name)
    if described is None:
        return [] if "@" in name else ["About: not declared (a backbone of your own: nothing describes it).", ""]
    about = describe(described)
    return [f"About: licence {cell(about['licence'])}; trained on {cell(about['training data'])}; weights: "
            f"{cell(about['source'])}.", ""]


def render_backbone_page(
    summary: dict[str, Any], identities: list[dict[str, Any]], runs: list[dict[str, Any]],
    curves: list[dict[str, Any]], analysis: Analysis, costs: Mapping[str, BackboneCost] = NO_COSTS,
) -> str:
    control = summary["control"]
    kinds = {identity["weights"].get("kind") for identity in identities}
    if control:
        weights = ("Control: yes. Random-init weights, the architecture-only baseline: listed on boards but "
                   "never ranked.")
    elif kinds == {"checkpoint"}:
        weights = ("Control: no. Weights: a checkpoint file of your own, **not the published weights** (its SHA-256 "
                   "and the pin it is not are under Identity).")
    elif "checkpoint" in kinds:
        weights = ("Control: no. Weights: the published ones and a checkpoint file of your own, **not the published "
                   "weights** (one identity each, below); their rows are labelled apart.")
    else:
        weights = "Control: no (pretrained weights)."
    lines = [f"# {cell(summary['backbone_name'])}", "", weights, "", *_card_lines(summary["backbone_name"]),
             *backbone_cost_line(summary["backbone_name"], costs)]
    lines += _rank_profile(summary["backbone_name"], analysis)
    # The identity blocks (hashes, weight pins, preprocessing) after what a visitor came for: the results.
    if not identities:
        lines += ["## Identity", "", "No identity recorded: every run of this backbone failed before it was built.", ""]
    for identity in identities:
        lines += [f"## Identity {code(identity['identity'])}", "", "### Weights", ""]
        lines += key_value_table(weights_items(identity["weights"]))
        lines += ["", "### Architecture", ""]
        lines += key_value_table(sorted(identity["architecture"].items()))
        lines += ["", "### Preprocessing", ""]
        lines += key_value_table(sorted(identity["preprocess"].items()))
        lines.append("")
    lines += ["## Runs", ""]
    lines += table(
        ["Task", "Dataset", "Split", "Layers", "Precision", "Status", "Headline metric", "Value", "Run"],
        [[task_link(r["task"], "../"), cell(r["dataset_name"]), cell(r["split"]), cell(r["layer_set"]),
          cell(r["precision"]), r["status"], cell(r["headline_metric"]), number(r["headline_value"]),
          run_link(r, "../")] for r in runs],
    ) if runs else ["No full-split runs."]
    if curves:
        # One row per learning curve, not per (k, seed) run: each run's page is a click away on the task page.
        lines += ["", "## Few-shot runs", "", *table(
            ["Task", "Dataset", "Split", "Layers", "k", "Seeds", "OK runs", "Failed runs", "Curve"],
            [[task_link(c["task"], "../"), cell(c["dataset_name"]), cell(c["split"]), cell(c["layer_set"]),
              ", ".join(str(k) for k in c["k_shots"]), ", ".join(str(seed) for seed in c["seeds"]), str(c["ok_runs"]),
              str(c["failed_runs"]),
              MISSING if c["curve_key"] is None or not c["ok_runs"] else
              f"[learning curve](../tasks/{page_stem(c['task'])}.md#{curve_anchor(c['curve_key'])})"]
             for c in curves])]
    return page(lines)


def _rank_profile(name: str, analysis: Analysis) -> list[str]:
    lines = ["## Rank profile", ""]
    for row in (r for r in analysis.rows if r.backbone_name == name):
        who = f"{cell(row.label)}: m" if row.label != name else "M"
        if row.aggregate is not None and not row.missing:
            lines.append(f"{who}ean normalised rank over all {len(analysis.columns)} boards of the "
                         f"[cross-task table](../index.md#cross-task): **{short(row.aggregate)}** "
                         "(0 = best, 1 = worst).")
        elif row.control:
            lines.append(f"{who}ean normalised rank: {NO_AGGREGATE}. Controls are never ranked or aggregated; their "
                         "normalised rank is where they would fall among the pretrained rows.")
        else:
            missing = ", ".join(
                board_link(analysis.stats[key].label, analysis.board(key)["task"], key, "../")
                for key in _in_column_order(analysis, row.missing)
            )
            present = len(analysis.columns) - len(row.missing)
            mean = NO_AGGREGATE if row.aggregate is None else f"**{short(row.aggregate)}**"
            lines.append(f"{who}ean normalised rank over the {present} of {len(analysis.columns)} boards of the "
                         f"[cross-task table](../index.md#cross-task) it has a result on: {mean} (0 = best, "
                         f"1 = worst; comparable only with rows over the same boards). No result on {missing}.")
        lines.append("")
    entries = []
    for board in analysis.boards:
        stats = analysis.stats[board["comparability_key"]]
        ranked = sum(1 for r in board["rows"] if r["rank"] is not None)
        for board_row in board["rows"]:
            if board_row["backbone_name"] != name:
                continue
            rank = "control" if board_row["control"] else "under floor" if board_row.get("gated") else (
                MISSING if board_row["rank"] is None else f"{board_row['rank']} of {ranked}")
            entries.append([
                board_link(f"{stats.code} {stats.label}", board["task"], board["comparability_key"], "../"),
                cell(board_row["layer_set"]), cell(board["headline_metric"]),
                with_interval(board_row["headline_value"],
                              analysis.intervals.get((board_row["run_id"], board["headline_metric"]))),
                rank, short(board_row["normalised_rank"]), stats.groups.get(board_row["run_id"], MISSING),
                run_link({"run_id": board_row["run_id"], "task": board["task"]}, "../"),
            ])
    if not entries:
        return [*lines, "No successful runs, so no board places this backbone.", ""]
    header = ["Board", "Layers", "Headline", "Value [95% CI]", "Rank", "Normalised rank", "Tie group", "Run"]
    return [*lines, '<div class="vb-pinned" markdown>', "", *table(header, entries), "", "</div>", "",
            *_layer_profile(name, analysis)]


def _layer_profile(name: str, analysis: Analysis) -> list[str]:
    """Per board, the headline of each layer set the backbone was probed with: how the answer depends on
    the depth the features came from. Only for a backbone recorded with more than one layer set."""
    layer_sets = sorted({r["layer_set"] for b in analysis.boards for r in b["rows"] if r["backbone_name"] == name},
                        key=_layer_order)
    if len(layer_sets) < 2:
        return []
    rows = []
    for board in analysis.boards:
        mine = [r for r in board["rows"] if r["backbone_name"] == name]
        if not mine:
            continue
        stats = analysis.stats[board["comparability_key"]]
        best = {}  # a layer set's best-placed run, as in the cross-task table
        for row in mine:
            best.setdefault(row["layer_set"], row)  # board rows come best first
        cells = []
        for layer_set in layer_sets:
            row = best.get(layer_set)
            if row is None:
                cells.append(NO_AGGREGATE)
                continue
            text = number(row["headline_value"])
            if row["rank"] is not None:
                text += f" (rank {row['rank']})"
            cells.append(f"**{text}**" if row is mine[0] and len(best) > 1 else text)
        rows.append([board_link(f"{stats.code} {stats.label}", board["task"], board["comparability_key"], "../"),
                     cell(f"{board['headline_metric']} ({'higher' if board['higher_is_better'] else 'lower'} better)"),
                     *cells])
    return ["## Per-layer profile { #per-layer-profile }", "",
            "The headline on each board for every layer set this backbone was probed with (rank on the board in "
            f"brackets; the best of its layer sets in bold; {NO_AGGREGATE}: not run with that layer set). Each layer "
            "set is its own row on the boards, so the ranks compare it with every other row there.", "",
            '<div class="vb-pinned" markdown>', "",
            *table(["Board", "Headline", *(cell(s) for s in layer_sets)], rows), "", "</div>", ""]


def _layer_order(layer_set: str) -> tuple[int, list[int], str]:
    """"last layer" first (the default), then explicit sets by their layer numbers."""
    if layer_set == "last layer":
        return (0, [], layer_set)
    numbers = [int(n) for n in layer_set.removeprefix("layers ").split(",") if n.strip().lstrip("-").isdigit()]
    return (1, numbers, layer_set)


def _in_column_order(analysis: Analysis, keys: list[str]) -> list[str]:
    wanted = set(keys)
    return [b["comparability_key"] for b in analysis.columns if b["comparability_key"] in wanted]
