"""The learning-curve section of a task page: per curve, what it holds fixed, its figure and its table."""

from __future__ import annotations

from typing import Any

from harness.leaderboard.figures.curves import UNIT_TEXT
from harness.leaderboard.markdown import MISSING, backbone_link, cell, code, protocol_link, table
from harness.leaderboard.sitemap import curve_anchor, curve_data_path, curve_plot_path

# The few-shot protocol's section in docs/protocols.md.
FEWSHOT_PROTOCOL = "few-shot/v1"


def curve_labels(curves: list[dict[str, Any]]) -> dict[str, str]:
    """"dataset (split), protocol, unit" per curve key; with the key appended where two would read alike."""
    texts = {c["curve_key"]: f"{c['dataset_name']} ({c['split']}), {c['protocol']}, k "
             f"{UNIT_TEXT.get(c['unit'], c['unit'])}" for c in curves}
    tasks = {c["curve_key"]: c["task"] for c in curves}
    seen: dict[tuple[str, str], int] = {}
    for key, text in texts.items():
        seen[tasks[key], text] = seen.get((tasks[key], text), 0) + 1
    return {key: f"{text}, {key}" if seen[tasks[key], text] > 1 else text for key, text in texts.items()}


def _cell(point: dict[str, Any] | None) -> str:
    if point is None:
        return MISSING
    spread = "" if point["sd"] is None else f" ± {point['sd']:.4f}"
    return f"{point['mean']:.4f}{spread} (n={point['n']})"


def render_curve(curve: dict[str, Any], label: str) -> list[str]:
    key, ks = curve["curve_key"], curve["k_shots"]
    headline = curve["headline_metric"]
    lines = [
        f"### {cell(label)} {{ #{curve_anchor(key)} }}",
        "",
        f"Curve key {code(key)}. Protocol {protocol_link(curve['protocol'], '../')} on a few-shot subset of the "
        f"training split ({protocol_link(FEWSHOT_PROTOCOL, '../')}); dataset identity "
        f"{code(curve['dataset_identity'])}; features {cell(curve['feature_mode'])}, pooling "
        f"{cell(curve['pooling_requested'])}, {cell(curve['precision'])}; each backbone at its own input size. "
        f"Subset seeds {', '.join(str(s) for s in curve['seeds'])}; every backbone trained on the same items "
        f"for a given k and seed. The numbers drawn: [CSV](../{curve_data_path(curve)}).",
        "",
        f"![Learning curve: {cell(label)}](../{curve_plot_path(curve)}){{ .vb-figure }}",
        "",
    ]
    rows = []
    for line in curve["lines"]:
        by_k = {p["k_shot"]: p for p in line["points"]}
        name = backbone_link(line["backbone_name"], "../", line["row_label"])
        name += " (control)" if line["control"] else ""
        rows.append([name, *(_cell(by_k.get(k)) for k in ks)])
    lines += ['<div class="vb-pinned" markdown>', "", *table(["Backbone", *(f"k={k}" for k in ks)], rows), "", "</div>"]
    lines += ["", f"Each cell: {cell(headline)} ({'higher' if curve['higher_is_better'] else 'lower'} is better), "
              "mean ± sample standard deviation over the subset seeds that succeeded (n); a failed seed is listed "
              "under Failed runs, never filled in.", ""]
    return lines


def render_curves(curves: list[dict[str, Any]], labels: dict[str, str]) -> list[str]:
    """The task page's "Learning curves" section; nothing when the task has no few-shot runs."""
    if not curves:
        return []
    lines = [
        "## Learning curves (few-shot) { #learning-curves }",
        "",
        "Each probe trained on k items of its training split, chosen by a seeded hash of their content, for "
        "several k and subset seeds, and evaluated on the full evaluation split. These runs are on no board "
        "above and take no rank: every backbone has one run per seed, and what they show is how the "
        "score grows with k, not an order. Points on different curves are not comparable.",
        "",
    ]
    for curve in curves:
        lines += render_curve(curve, labels[curve["curve_key"]])
    return lines
