"""What a task's boards are measured against outside the corpus, read from the benchmarks' results files
(benchmarks/results/<bench>-<machine>.json, written by benchmarks/runner.py): every number shown comes from
such a file, never from the page's code.

edge_bsds: HED, the network trained for the task, scored by this harness's BSDS scorer on its own fused edge map
(`benchmarks/hed_bsds_anchor.py`), beside HED's published numbers the benchmark records with their source. The
board's `hed_vgg16` row is not that map: it is a linear head on HED's frozen features, as every row is.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.leaderboard.markdown import cell

RESULTS = Path("benchmarks") / "results"


def results_files(root: Path, bench: str) -> list[dict[str, Any]]:
    """Every machine's results file of `bench`, in name order; a file that is not a results file is skipped
    (benchmarks/performance_page.py refuses it with its name)."""
    found = []
    for path in sorted((root / RESULTS).glob(f"{bench}-*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("bench") == bench and isinstance(data.get("measurements"), list):
            found.append({**data, "path": path.relative_to(root).as_posix()})
    return found


def medians(results: dict[str, Any]) -> dict[str, tuple[float, dict[str, Any]]]:
    return {m["name"]: (m["median"], m.get("details") or {}) for m in results["measurements"]
            if isinstance(m, dict) and "name" in m and "median" in m}


def hed_anchor(root: Path) -> list[str]:
    lines = []
    for results in results_files(root, "hed_bsds_anchor"):
        values = medians(results)
        names = ("ODS F", "OIS F", "AP")
        if not all(name in values and f"published {name}" in values for name in names):
            continue
        images = values["ODS F"][1].get("images")
        source = values[f"published {names[0]}"][1].get("source", "the benchmark's source")
        measured = " / ".join(f"{values[n][0]:.3f}" for n in names)
        published = " / ".join(f"{values['published ' + n][0]:.3f}" for n in names)
        lines.append(
            f"- HED's own fused edge map, scored by this harness's scorer ({cell(str(images))} test images, "
            f"`{cell(' '.join(results.get('command', [])))}` on {cell(results.get('machine', '?'))}): "
            f"ODS / OIS / AP **{measured}**, against **{published}** published ({cell(str(source))}, all 200 "
            f"test images) — `{results['path']}`.")
    if not lines:
        return []
    return ["## Reference: the network trained for the task { #reference }", "",
            "The `hed_vgg16` row on the boards above is a linear head on HED's frozen features, probed like every "
            "row; it is not HED's edge map. What HED's own map scores with the same scorer, and what its authors "
            "published:", "", *lines, "",
            "A gap between the two is the port's or the sample's (fewer test images); one between HED's map and "
            "the row above is the protocol's: a linear head on one layer of features, not the network's trained "
            "fusion of five ([protocols](../protocols.md)).", ""]


REFERENCES: dict[str, Callable[[Path], list[str]]] = {"edge_bsds": hed_anchor}


def reference_lines(task: str, root: Path) -> list[str]:
    """The reference section of `task`'s page, or nothing."""
    render = REFERENCES.get(task)
    return render(root) if render else []
