"""The downloads page (every file with its size and SHA-256, the tables' columns, the releases, a citation)
and the changelog (what moved between releases, and since the last one)."""

from __future__ import annotations

from typing import Any

import duckdb

from harness.leaderboard.markdown import MISSING, cell, code, count, number, page, table
from harness.leaderboard.queries.downloads import DOWNLOADS_DIR, FORMATS, RECORDS_FILE, SUMS, TABLES, sha256
from harness.leaderboard.queries.releases import RELEASES_DIR, Release, changes

CITATION_KEY = "visbench_harness_leaderboard"


def citation(version: str, corpus_sha256: str, runs: int) -> list[str]:
    """A BibTeX entry naming the data exactly: the release (or "unreleased") and the records' SHA-256."""
    return [
        "```bibtex",
        f"@misc{{{CITATION_KEY}_{version},",
        "  title        = {visbench-harness leaderboard: probes of frozen vision backbones},",
        "  author       = {{visbench-harness contributors}},",
        f"  version      = {{{version}}},",
        f"  howpublished = {{Data: {runs} run records, corpus.jsonl SHA-256 {corpus_sha256}}},",
        "  note         = {Every number is reproducible from its record; see the Reproduce page}",
        "}",
        "```",
    ]


def render_downloads_page(files: dict[str, bytes], facts: dict[str, dict[str, Any]], releases: list[Release],
                          runs: int) -> str:
    corpus_sha = sha256(files[RECORDS_FILE])
    lines = [
        "# Downloads",
        "",
        "Everything the leaderboard is computed from, as it stands in this build of the site. The tables are "
        "the ones the site queries (DuckDB), each in three formats holding the same rows in the same order; "
        f"`{RECORDS_FILE}` is the validated records themselves, one JSON object per line. Files are regenerated "
        "with the site and are byte-identical for the same corpus. Check them with `sha256sum -c SHA256SUMS`.",
        "",
        "## Files { #files }",
        "",
    ]
    # What each table holds is said once, under Columns; here, what a reader checks: size and digest.
    rows = [[f"[{RECORDS_FILE}]({DOWNLOADS_DIR}/{RECORDS_FILE})", "JSON lines", str(runs),
             f"{len(files[RECORDS_FILE]):,}", code(corpus_sha)]]
    for name in TABLES:
        for fmt, suffix, _ in FORMATS[name]:
            file = f"{name}{suffix}"
            rows.append([f"[{file}]({DOWNLOADS_DIR}/{file})", fmt, str(facts[name]["rows"]), f"{len(files[file]):,}",
                         code(sha256(files[file]))])
    rows.append([f"[{SUMS}]({DOWNLOADS_DIR}/{SUMS})", "text", MISSING, f"{len(files[SUMS]):,}",
                 code(sha256(files[SUMS]))])
    lines += ['<div class="vb-pinned vb-downloads" markdown>', "",
              *table(["File", "Format", "Rows", "Bytes", "SHA-256"], rows), "", "</div>", ""]
    lines += ["Read them with anything that reads CSV, Parquet or JSON; for example:", "", "```python",
              "import duckdb", "", 'duckdb.sql("SELECT task, backbone_name, headline_metric, headline_value "',
              '           "FROM \'corpus.parquet\' WHERE status = \'ok\' ORDER BY task")', "```", ""]
    lines += ["## Columns { #columns }", ""]
    for name, (what, _) in TABLES.items():
        columns = ", ".join(f"{code(column)} ({kind.lower()})" for column, kind in facts[name]["columns"])
        lines += [f"**{name}**, one row per {what}: {columns}.", ""]
    lines += ["Nested values (protocol parameters, dataset parameters, layers) are canonical JSON text, so "
              "equal values compare equal. The comparability key is the board a run is ranked on; the "
              "per-sample `row_index` is the sample's row in its run's file, the order the bootstrap resamples.", ""]
    lines += ["## Releases { #releases }", ""]
    if releases:
        lines += ["A release is a frozen copy of these files, never changed after it is cut; the "
                  "[changelog](changelog.md) lists which numbers moved between releases.", ""]
        lines += table(["Release", "Files", f"{SUMS} SHA-256"],
                       [[r.name, ", ".join(f"[{f}]({RELEASES_DIR}/{r.name}/{f})" for f in [*sorted(r.sums), SUMS]),
                         code(r.sums_sha256)] for r in reversed(releases)])
    else:
        lines += ["No release has been cut yet: the files above are the current, unreleased data. The "
                  "[changelog](changelog.md) will list what moves once there is one."]
    lines += ["", "## How to cite { #cite }", "",
              "Cite the release you used; its SHA-256 pins the exact records. For the current, unreleased data:", ""]
    lines += citation("unreleased", corpus_sha, runs)
    if releases:
        latest = releases[-1]
        lines += ["", f"The latest release, {latest.name}:", ""]
        lines += citation(latest.name, latest.sums[RECORDS_FILE], _release_runs(latest))
    return page(lines)


def _release_runs(release: Release) -> int:
    # A release's corpus.jsonl has a line per record; count them rather than trust anything else.
    return sum(1 for line in (release.path / RECORDS_FILE).read_text(encoding="utf-8").splitlines() if line.strip())


def render_changelog(con: duckdb.DuckDBPyConnection, releases: list[Release]) -> str:
    lines = [
        "# Changelog",
        "",
        "Which numbers moved between [releases](downloads.md#releases), compared by run id: a run is added, "
        "removed, or moved when its headline value, headline metric or status changed. Newest first.",
        "",
    ]
    if not releases:
        return page([*lines, "No release has been cut yet."])
    steps: list[tuple[str, Release | None, Release | None]] = [("Unreleased", releases[-1], None)]
    steps += [(r.name, releases[i - 1] if i else None, r) for i, r in reversed(list(enumerate(releases)))]
    for title, old, new in steps:
        found = changes(con, old, new)
        lines += [f"## {title} {{ #{title.lower()} }}", ""]
        if old is None:
            lines += [f"The first release: {count(found['runs'], 'run')}.", ""]
            continue
        kinds = {kind: [r for r in found["rows"] if r["change"] == kind] for kind in ("moved", "added", "removed")}
        lines += [f"Against {old.name}: {count(found['runs'], 'run')}; {len(kinds['moved'])} moved, "
                  f"{len(kinds['added'])} added, {len(kinds['removed'])} removed.", ""]
        if found["rows"]:
            lines += table(["Run", "Change", "Headline", "Before", "After", "Δ"], [
                [cell(r["run_id"]), r["change"], cell(r["metric"]), _value(r["old_value"], r["old_status"]),
                 _value(r["new_value"], r["new_status"]),
                 MISSING if r["delta"] is None or r["old_metric"] != r["metric"] else f"{r['delta']:+.4f}"]
                for r in found["rows"]])
            lines.append("")
    return page(lines)


def _value(value: float | None, status: str | None) -> str:
    if status is None:
        return MISSING
    return number(value) if status == "ok" else status
