"""The package layering of `harness/`, enforced on the static import graph (every import statement, at module
level, inside a function or under `if TYPE_CHECKING:`, read by `harness.pipeline.codedeps`, which
tests/test_code_closure.py checks against what stages really load). A type-only import never runs, but it is
still one module knowing another: a lower layer that names a type of a higher one is as tangled as one that calls
it, so the layering and the no-cycle rule hold for those imports too.

A package may import only packages below it; packages on one layer import nothing of each other. No module
imports one that imports it back, directly or through others.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from harness.pipeline.codedeps import direct_imports

ROOT = Path(__file__).resolve().parents[1]
# top to bottom; a tuple is one layer of independent packages
LAYERS: list[tuple[str, ...]] = [
    ("cli",), ("user",), ("executors",), ("api",), ("stages",), ("pipeline",), ("leaderboard",), ("runs",),
    ("heads",), ("probes",), ("datasets", "backbones"), ("core",),
]
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}


def _package(path: str) -> str | None:
    parts = Path(path).parts
    if len(parts) == 2:  # harness/api.py, harness/__init__.py
        return None if parts[1] == "__init__.py" else Path(parts[1]).stem
    return parts[1]


def _edges() -> list[tuple[str, str]]:
    files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "harness").rglob("*.py"))
    return [(f, g) for f in files for g in direct_imports(f, ROOT, type_checking=True)
            if g != f and not g.endswith("/__init__.py")]


def test_every_package_has_a_layer():
    packages = {_package(p.relative_to(ROOT).as_posix()) for p in (ROOT / "harness").rglob("*.py")} - {None}
    assert packages == set(RANK), f"packages without a layer: {sorted(packages - set(RANK))}"


def test_packages_import_only_the_layers_below_them():
    wrong = []
    for source, target in _edges():
        a, b = _package(source), _package(target)
        if a is None or b is None or a == b:
            continue
        if RANK[b] <= RANK[a]:
            wrong.append(f"{source} -> {target} ({a} may not import {b})")
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_itself_back():
    graph = nx.DiGraph(_edges())
    cycles = sorted(nx.simple_cycles(graph), key=len)
    assert not cycles, f"{len(cycles)} import cycles, e.g. {' -> '.join(cycles[0] + cycles[0][:1])}"


# harness/leaderboard by what things are, top to bottom: the site as a whole (which pages exist, the mkdocs hook,
# README numbers, published versions); one module per kind of page; sections more than one page shows; figures in
# one chart style; files the site quotes besides the corpus; Markdown formatting; statistics; DuckDB queries; and
# the site map that owns every path and anchor.
LEADERBOARD_LAYERS = ["site", "pages", "sections", "figures", "sources", "markdown", "statistics", "queries", "sitemap"]


def _leaderboard_part(path: str) -> str | None:
    parts = Path(path).parts
    if parts[:2] != ("harness", "leaderboard") or (parts[-1] == "__init__.py" and len(parts) == 3):
        return None
    return Path(parts[2]).stem if len(parts) == 3 else parts[2]


def test_leaderboard_parts_import_only_parts_below_and_no_page_imports_another():
    files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "harness" / "leaderboard").rglob("*.py"))
    assert {_leaderboard_part(f) for f in files} - {None} == set(LEADERBOARD_LAYERS)
    rank = {part: index for index, part in enumerate(LEADERBOARD_LAYERS)}
    upward, page_to_page = [], []
    for f in files:
        part = _leaderboard_part(f)
        for g in direct_imports(f, ROOT, type_checking=True):
            target = _leaderboard_part(g)
            if part is None or target is None or g.endswith("/__init__.py"):
                continue
            if target != part and rank[target] < rank[part]:
                upward.append(f"{f} -> {g}")
            if part == target == "pages" and g != f:
                page_to_page.append(f"{f} -> {g}")
    assert not upward, f"leaderboard parts importing a part above them: {upward}"
    assert not page_to_page, f"a page module importing another (move what they share to sections/): {page_to_page}"
