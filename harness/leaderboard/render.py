"""The leaderboard site: every generated page and figure, as a pure function of the corpus and the
per-sample score files its records point to.

No timestamps, no randomness beyond seeded bootstraps: every order comes from an ORDER BY in `db`,
every number has fixed decimals, every seed is derived from names, so rendering the same corpus twice
(in any record order) gives the same bytes and a moved score shows in the diff. The pages themselves
live in `render_overview` (home, agreement), `render_boards` (tasks, levels), `render_backbones` and
`render_provenance` (one page per run); the figures in `plots`.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from harness.atomic import write_text_atomic
from harness.leaderboard import db, db_fewshot
from harness.leaderboard.analysis import analyse
from harness.leaderboard.markdown import GENERATED_HEADER, page_stem
from harness.leaderboard.plots import agreement_svg, heatmap_svg
from harness.leaderboard.plots_fewshot import curve_svg
from harness.leaderboard.render_backbones import render_backbone_page
from harness.leaderboard.render_boards import render_level_page, render_task_page
from harness.leaderboard.render_fewshot import curve_labels, curve_plot_path
from harness.leaderboard.render_overview import render_agreement, render_index
from harness.leaderboard.render_provenance import render_run_page
from harness.records import Record

__all__ = ["GENERATED_DIRS", "GENERATED_FILES", "GENERATED_HEADER", "HandWrittenPageError", "is_generated",
           "render_site", "rendered_pages"]

GENERATED_DIRS = ("tasks", "backbones", "levels", "runs", "plots")  # where stale generated files are removed
GENERATED_FILES = ("index.md", "agreement.md")  # generated pages at the top of docs/


class HandWrittenPageError(RuntimeError):
    """A generated page would overwrite a file that lacks the generated header."""


# -- the site ----------------------------------------------------------------------------------------


def rendered_pages(records: list[Record], root: Path = Path("."), failures: list[Record] = ()) -> dict[str, str]:
    """Every generated file, as {path relative to docs/: content}, sorted by path.

    `root` is where the records' per-sample paths are relative to (the project root); `failures` are the
    failed attempts kept apart from the corpus, listed on their task pages.
    """
    con = db.connect_corpus(records, failures)
    try:
        return _pages(con, records, Path(root))
    finally:
        con.close()


def _add(pages: dict[str, str], path: str, text: str, what: str) -> None:
    if path in pages:  # "a@b" and "a-at-b" would share a file
        raise ValueError(f"{what} would overwrite another generated page {path}")
    pages[path] = text


def _pages(con: duckdb.DuckDBPyConnection, records: list[Record], root: Path) -> dict[str, str]:
    analysis = analyse(con, records, root)
    levels = db.level_summary(con)
    tasks = db.task_summary(con)
    backbones = db.backbone_summary(con)
    all_failed = db.failed_runs(con)
    curves = db_fewshot.curves(con)
    labels = curve_labels(curves)
    pages = {"index.md": render_index(levels, tasks, backbones, analysis), "agreement.md": render_agreement(analysis)}
    if analysis.columns:
        pages["plots/heatmap.svg"] = heatmap_svg(analysis)
        pages["plots/agreement.svg"] = agreement_svg(analysis)
    for level in levels:
        level_tasks = [t for t in tasks if t["level"] == level["level"]]
        pages[f"levels/{level['level']}.md"] = render_level_page(level, level_tasks, analysis)
    for task in tasks:
        boards = [b for b in analysis.boards if b["task"] == task["task"] and b["level"] == task["level"]]
        failed = [f for f in all_failed if f["task"] == task["task"] and f["level"] == task["level"]]
        task_curves = [c for c in curves if c["task"] == task["task"] and c["level"] == task["level"]]
        path = f"tasks/{page_stem(task['task'])}.md"
        if path in pages:
            raise ValueError(f"task {task['task']!r} is recorded at more than one level")
        pages[path] = render_task_page(task, boards, failed, analysis, task_curves, labels)
        for curve in task_curves:
            pages[curve_plot_path(curve)] = curve_svg(curve, labels[curve["curve_key"]])
    for backbone in backbones:
        name = backbone["backbone_name"]
        page = render_backbone_page(backbone, db.backbone_identities(con, name), db.backbone_runs(con, name), analysis)
        _add(pages, f"backbones/{page_stem(name)}.md", page, f"backbone {name!r}")
    for record in sorted(records, key=lambda r: r.run_id):
        _add(pages, f"runs/{page_stem(record.run_id)}.md", render_run_page(record, analysis), f"run {record.run_id!r}")
    return dict(sorted(pages.items()))


def is_generated(path: Path) -> bool:
    """Whether a file carries GENERATED_HEADER: on its first line, or right after an XML declaration."""
    try:
        with path.open(encoding="utf-8") as handle:
            first = handle.readline().rstrip("\n")
            if first.startswith("<?xml"):
                first = handle.readline().rstrip("\n")
            return first == GENERATED_HEADER
    except (OSError, UnicodeDecodeError):
        return False


def render_site(records: list[Record], docs_dir: Path, root: Path = Path("."), failures: list[Record] = ()
                ) -> list[Path]:
    """Write the generated files under `docs_dir`, remove stale generated ones; return written paths.

    Hand-written files (those without GENERATED_HEADER) are never deleted or overwritten. `root` is
    where the records' per-sample score files are found (their paths are relative to it).
    """
    docs_dir = Path(docs_dir)
    pages = rendered_pages(records, root, failures)
    targets = {docs_dir / relative: text for relative, text in pages.items()}
    clashes = sorted(str(p) for p in targets if p.exists() and not is_generated(p))
    if clashes:
        raise HandWrittenPageError(
            f"refusing to overwrite hand-written files: {', '.join(clashes)}; move them or add the header"
        )
    for subdir in GENERATED_DIRS:
        for stale in sorted((docs_dir / subdir).glob("*")):
            if stale.is_file() and stale not in targets and is_generated(stale):
                stale.unlink()
    for path, text in targets.items():
        # Unchanged pages are left alone so their mtimes (and mkdocs' rebuilds) stay quiet.
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            write_text_atomic(path, text)
    return sorted(targets)
