"""The leaderboard site: every generated page, figure and data file, as a pure function of the corpus, the
per-sample score files its records point to, and the frozen releases.

No timestamps, no randomness beyond seeded bootstraps: every order comes from an ORDER BY in `db`,
every number has fixed decimals, every seed is derived from names, so rendering the same corpus twice
(in any record order) gives the same bytes and a moved score shows in the diff. The pages themselves are
in `pages` (one module per kind), the parts several pages share in `sections`, the figures and their data files
in `figures`, the downloads in `queries.downloads`; every path is `sitemap`'s.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from harness.core import paths
from harness.core.atomic import write_bytes_atomic
from harness.leaderboard.figures import data as figure_data
from harness.leaderboard.figures.agreement import agreement_svg
from harness.leaderboard.figures.boards import board_interval_svg
from harness.leaderboard.figures.curves import curve_svg
from harness.leaderboard.figures.pr import pr_svg
from harness.leaderboard.markdown import FRONT_MATTER_HEADER, GENERATED_HEADER
from harness.leaderboard.pages.backbones import render_backbone_page
from harness.leaderboard.pages.boards import render_level_page, render_task_page
from harness.leaderboard.pages.compare import render_compare
from harness.leaderboard.pages.downloads import render_changelog, render_downloads_page
from harness.leaderboard.pages.overview import render_agreement, render_index
from harness.leaderboard.pages.proxy import proxy_figures, render_proxy_page
from harness.leaderboard.pages.runs import render_run_page, run_fields
from harness.leaderboard.queries import compare, db, downloads, fewshot, releases, summaries
from harness.leaderboard.queries.throughput import measured_rates
from harness.leaderboard.sections.costs import level_cost_figures
from harness.leaderboard.sections.curves import curve_labels
from harness.leaderboard.sitemap import (
    DATA_DIR,
    PROXY_DATA,
    board_figure_path,
    curve_plot_path,
    page_stem,
    pr_figure_path,
    run_path,
)
from harness.leaderboard.sources.costs import backbone_costs, with_record_rates
from harness.leaderboard.sources.references import reference_lines
from harness.leaderboard.statistics.analysis import analyse
from harness.leaderboard.statistics.proxy_validity import CSV_COLUMNS, csv_rows, proxy_fits
from harness.runs.records import Record

__all__ = ["GENERATED_DIRS", "GENERATED_FILES", "GENERATED_HEADER", "OWNED_DIRS", "SITE_OUTPUTS",
           "HandWrittenPageError", "is_generated", "render_site", "rendered_pages"]

# Where stale generated files are removed (recursively): a file there is generated if it carries the header.
GENERATED_DIRS = ("tasks", "levels", "backbones", "runs", "plots")
# Folders the site stage owns whole: every file in them is generated (data files have no room for a header),
# so a stale one is removed and none is ever hand-written.
OWNED_DIRS = (downloads.DOWNLOADS_DIR, DATA_DIR)
GENERATED_FILES = ("index.md", "agreement.md", "proxy.md", "compare.md", "downloads.md", "changelog.md")  # top of docs/
# What the site stage writes, relative to docs/: its outputs in dvc.yaml (an owned folder inside a generated one is
# part of it)
SITE_OUTPUTS = (*GENERATED_FILES, *GENERATED_DIRS,
                *(d for d in OWNED_DIRS if not any(Path(d).is_relative_to(g) for g in GENERATED_DIRS)))

Content = str | bytes  # pages and figures are text; Parquet and gzip files are bytes


class HandWrittenPageError(RuntimeError):
    """A generated page would overwrite a file that lacks the generated header."""


# -- the site ----------------------------------------------------------------------------------------


def rendered_pages(records: list[Record], root: Path = Path("."), failures: list[Record] = (),
                   docs_dir: Path | None = None) -> dict[str, Content]:
    """Every generated file, as {path relative to docs/: content}, sorted by path.

    `root` is where the records' per-sample paths are relative to (the project root); `failures` are the
    failed attempts kept apart from the corpus, listed on their task pages; `docs_dir` (default
    `root`/docs) is where the frozen releases are read from, for the downloads page and the changelog.
    """
    con = db.connect_corpus(records, failures)
    try:
        return _pages(con, records, Path(root), Path(root) / paths.DOCS if docs_dir is None else Path(docs_dir))
    finally:
        con.close()


def _add(pages: dict[str, Content], path: str, content: Content, what: str) -> None:
    if path in pages:  # "a@b" and "a-at-b" would share a file
        raise ValueError(f"{what} would overwrite another generated page {path}")
    pages[path] = content


def _pages(con: duckdb.DuckDBPyConnection, records: list[Record], root: Path, docs_dir: Path) -> dict[str, Content]:
    analysis = analyse(con, records, root)
    levels = summaries.level_summary(con)
    tasks = summaries.task_summary(con)
    backbones = summaries.backbone_summary(con)
    all_failed = summaries.failed_runs(con)
    curves = fewshot.curves(con)
    labels = curve_labels(curves)
    frozen = releases.releases(docs_dir)
    files = downloads.download_files(con, records)
    fits = proxy_fits(analysis.columns, analysis.cells)
    # counted in benchmarks/backbone_costs.py's results files (the site stage's dep), img/s as the records timed it
    costs = with_record_rates(backbone_costs(root), measured_rates(con))
    pages: dict[str, Content] = {
        "index.md": render_index(levels, tasks, backbones, analysis),
        "agreement.md": render_agreement(analysis),
        "proxy.md": render_proxy_page(analysis, fits),
        PROXY_DATA: figure_data.csv_text(list(CSV_COLUMNS), csv_rows(fits, analysis.stats)),
        "compare.md": render_compare(analysis, compare.board_pairs(con)),
        "downloads.md": render_downloads_page(files, downloads.table_facts(con), frozen, len(records)),
        "changelog.md": render_changelog(con, frozen),
    }
    pages.update({f"{downloads.DOWNLOADS_DIR}/{name}": data for name, data in files.items()})
    if analysis.agreement_columns:
        pages["plots/agreement.svg"] = agreement_svg(analysis)
    pages.update(proxy_figures(analysis, fits))
    for board in analysis.boards:
        chart = board_interval_svg(board, analysis)
        if chart is not None:
            pages[board_figure_path(board["comparability_key"])] = chart
        pr_figure = pr_svg(board, analysis)
        if pr_figure is not None:
            pages[pr_figure_path(board["comparability_key"])] = pr_figure
    codes = {key: stats.code for key, stats in analysis.stats.items()}
    pages.update(figure_data.board_distributions(con, codes))
    pages.update(figure_data.curve_data(curves))
    for level in levels:
        level_tasks = [t for t in tasks if t["level"] == level["level"]]
        pages[f"levels/{level['level']}.md"] = render_level_page(level, level_tasks, analysis, costs)
    pages.update(level_cost_figures([level["level"] for level in levels], analysis, costs))
    for task in tasks:
        boards = [b for b in analysis.boards if b["task"] == task["task"] and b["level"] == task["level"]]
        failed = [f for f in all_failed if f["task"] == task["task"] and f["level"] == task["level"]]
        task_curves = [c for c in curves if c["task"] == task["task"] and c["level"] == task["level"]]
        path = f"tasks/{page_stem(task['task'])}.md"
        if path in pages:
            raise ValueError(f"task {task['task']!r} is recorded at more than one level")
        pages[path] = render_task_page(task, boards, failed, analysis, task_curves, labels,
                                       reference_lines(task["task"], root), costs)
        for curve in task_curves:
            pages[curve_plot_path(curve)] = curve_svg(curve, labels[curve["curve_key"]])
    for backbone in backbones:
        name = backbone["backbone_name"]
        page = render_backbone_page(backbone, summaries.backbone_identities(con, name),
                                    summaries.backbone_runs(con, name), summaries.backbone_curves(con, name),
                                    analysis, costs)
        _add(pages, f"backbones/{page_stem(name)}.md", page, f"backbone {name!r}")
    for record in sorted(records, key=lambda r: r.run_id):
        _add(pages, run_path(run_fields(record)), render_run_page(record, analysis), f"run {record.run_id!r}")
    return dict(sorted(pages.items()))


def is_generated(path: Path) -> bool:
    """Whether a file carries GENERATED_HEADER: on its first line, right after an XML declaration, or as a
    YAML comment opening a page's front matter."""
    try:
        with path.open(encoding="utf-8") as handle:
            first = handle.readline().rstrip("\n")
            if first.startswith("<?xml"):
                first = handle.readline().rstrip("\n")
            elif first == "---":
                return handle.readline().rstrip("\n") == FRONT_MATTER_HEADER
            return first == GENERATED_HEADER
    except (OSError, UnicodeDecodeError):
        return False


def _owned(relative: Path) -> bool:
    return any(relative.is_relative_to(owned) for owned in OWNED_DIRS)


def render_site(records: list[Record], docs_dir: Path, root: Path = Path("."), failures: list[Record] = ()
                ) -> list[Path]:
    """Write the generated files under `docs_dir`, remove stale generated ones; return written paths.

    Hand-written files (those without GENERATED_HEADER, outside OWNED_DIRS) are never deleted or
    overwritten. `root` is where the records' per-sample score files are found (their paths are relative
    to it); releases are read from `docs_dir`.
    """
    docs_dir = Path(docs_dir)
    pages = rendered_pages(records, root, failures, docs_dir)
    targets = {docs_dir / relative: content for relative, content in pages.items()}
    clashes = sorted(str(p) for p in targets
                     if p.exists() and not _owned(p.relative_to(docs_dir)) and not is_generated(p))
    if clashes:
        raise HandWrittenPageError(
            f"refusing to overwrite hand-written files: {', '.join(clashes)}; move them or add the header"
        )
    for subdir in (*GENERATED_DIRS, *OWNED_DIRS):
        for stale in sorted((docs_dir / subdir).rglob("*")):
            owned = _owned(stale.relative_to(docs_dir))
            if stale.is_file() and stale not in targets and (owned or is_generated(stale)):
                stale.unlink()
        # folders emptied above (a task or curve with no runs left), deepest first
        for folder in sorted((p for p in (docs_dir / subdir).rglob("*") if p.is_dir()), reverse=True):
            if not any(folder.iterdir()):
                folder.rmdir()
    for path, content in targets.items():
        data = content.encode("utf-8") if isinstance(content, str) else content
        # Unchanged files are left alone so their mtimes (and mkdocs' rebuilds) stay quiet.
        if not path.exists() or path.read_bytes() != data:
            write_bytes_atomic(path, data)
    return sorted(targets)
