"""Backbone pages: identities, rank profile across boards (with the aggregate or why it is withheld), runs."""

from __future__ import annotations

from typing import Any

from harness.leaderboard.analysis import Analysis
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

WEIGHTS_FIELDS = ("kind", "source", "location", "revision", "file_sha256", "state_sha256", "seed")


def weights_items(weights: dict[str, Any]) -> list[tuple[str, Any]]:
    # The pin fields first, in the order one reads a pin; then whatever else the adapter recorded.
    items = [(k, weights[k]) for k in WEIGHTS_FIELDS if k in weights]
    return items + sorted((k, v) for k, v in weights.items() if k not in WEIGHTS_FIELDS)


def render_backbone_page(
    summary: dict[str, Any], identities: list[dict[str, Any]], runs: list[dict[str, Any]], analysis: Analysis
) -> str:
    control = summary["control"]
    lines = [
        f"# {cell(summary['backbone_name'])}",
        "",
        "Control: yes. Random-init weights, the architecture-only baseline: listed on boards but "
        "never ranked." if control else "Control: no (pretrained weights).",
        "",
    ]
    if not identities:
        lines += ["No identity recorded: every run of this backbone failed before it was built.", ""]
    for identity in identities:
        lines += [f"## Identity {code(identity['identity'])}", "", "### Weights", ""]
        lines += key_value_table(weights_items(identity["weights"]))
        lines += ["", "### Architecture", ""]
        lines += key_value_table(sorted(identity["architecture"].items()))
        lines += ["", "### Preprocessing", ""]
        lines += key_value_table(sorted(identity["preprocess"].items()))
        lines.append("")
    lines += _rank_profile(summary["backbone_name"], analysis)
    lines += ["## Runs", ""]
    lines += table(
        ["Task", "Dataset", "Split", "Training", "Precision", "Status", "Headline metric", "Value", "Run"],
        [[task_link(r["task"], "../"), cell(r["dataset_name"]), cell(r["split"]),
          "full split" if r["k_shot"] is None else f"k={r['k_shot']}, seed {r['seed']}", cell(r["precision"]),
          r["status"], cell(r["headline_metric"]), number(r["headline_value"]), run_link(r["run_id"], "../")]
         for r in runs],
    )
    return page(lines)


def _rank_profile(name: str, analysis: Analysis) -> list[str]:
    lines = ["## Rank profile", ""]
    row = next((r for r in analysis.heatmap if r.backbone_name == name), None)
    if row is not None and row.aggregate is not None:
        lines.append(f"Mean normalised rank over all {len(analysis.columns)} boards of the heatmap: "
                     f"**{short(row.aggregate)}** (0 = best, 1 = worst).")
    elif row is not None and row.control:
        lines.append(f"Mean normalised rank: {NO_AGGREGATE}. Controls are never ranked or aggregated; their "
                     "normalised rank is where they would fall among the pretrained backbones.")
    elif row is not None:
        missing = ", ".join(
            board_link(f"{analysis.stats[key].code} {analysis.stats[key].label}", analysis.board(key)["task"], key,
                       "../")
            for key in _in_column_order(analysis, row.missing)
        )
        lines.append(f"Mean normalised rank: {NO_AGGREGATE}. It is shown only for a backbone with a result on "
                     f"every board of the heatmap, and this one has none on {missing}.")
    lines.append("")
    entries = []
    for board in analysis.boards:
        stats = analysis.stats[board["comparability_key"]]
        ranked = sum(1 for r in board["rows"] if r["rank"] is not None)
        for board_row in board["rows"]:
            if board_row["backbone_name"] != name:
                continue
            rank = "control" if board_row["control"] else (
                MISSING if board_row["rank"] is None else f"{board_row['rank']} of {ranked}")
            entries.append([
                board_link(f"{stats.code} {stats.label}", board["task"], board["comparability_key"], "../"),
                cell(board["headline_metric"]),
                with_interval(board_row["headline_value"],
                              analysis.intervals.get((board_row["run_id"], board["headline_metric"]))),
                rank, short(board_row["normalised_rank"]), stats.groups.get(board_row["run_id"], MISSING),
                run_link(board_row["run_id"], "../"),
            ])
    if not entries:
        return [*lines, "No successful runs, so no board places this backbone.", ""]
    header = ["Board", "Headline", "Value [95% CI]", "Rank", "Normalised rank", "Tie group", "Run"]
    return [*lines, *table(header, entries), ""]


def _in_column_order(analysis: Analysis, keys: list[str]) -> list[str]:
    wanted = set(keys)
    return [b["comparability_key"] for b in analysis.columns if b["comparability_key"] in wanted]
