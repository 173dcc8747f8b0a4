"""A task page's reference section shows what the committed benchmark results file says, and nothing without one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.leaderboard.sources.references import RESULTS, hed_anchor, reference_lines

ROOT = Path(__file__).resolve().parents[1]


def _committed() -> list[Path]:
    return sorted((ROOT / RESULTS).glob("hed_bsds_anchor-*.json"))


def test_the_edge_bsds_reference_quotes_the_benchmark_file():
    files = _committed()
    if not files:
        pytest.skip("no committed hed_bsds_anchor results file")
    lines = reference_lines("edge_bsds", ROOT)
    text = "\n".join(lines)
    for path in files:
        data = json.loads(path.read_text())
        medians = {m["name"]: m["median"] for m in data["measurements"]}
        measured = " / ".join(f"{medians[n]:.3f}" for n in ("ODS F", "OIS F", "AP"))
        published = " / ".join(f"{medians['published ' + n]:.3f}" for n in ("ODS F", "OIS F", "AP"))
        assert f"**{measured}**, against **{published}** published" in text
        assert path.relative_to(ROOT).as_posix() in text
    # the committed edge_bsds page carries the same section (the site stage wrote it)
    assert text in (ROOT / "docs" / "tasks" / "edge_bsds.md").read_text()


def test_no_results_file_no_reference(tmp_path):
    assert hed_anchor(tmp_path) == [] and reference_lines("classification", ROOT) == []
    (tmp_path / RESULTS).mkdir(parents=True)
    (tmp_path / RESULTS / "hed_bsds_anchor-x.json").write_text("{not json")
    assert hed_anchor(tmp_path) == []  # an unreadable file is skipped, not quoted
    files = _committed()
    if files:
        shutil.copy(files[0], tmp_path / RESULTS / files[0].name)
        assert len([line for line in hed_anchor(tmp_path) if line.startswith("- HED's")]) == 1


def test_a_fixed_filter_baseline_stands_among_the_pretrained_rows_at_its_value_unranked():
    from harness.core import paths
    from harness.leaderboard.site.build import rendered_pages
    from harness.runs.records import read_records

    corpus = read_records(ROOT / paths.CORPUS)
    if not any(r.backbone_name == "sobel" for r in corpus):
        pytest.skip("the committed corpus has no fixed-filter run")
    page = rendered_pages(corpus, ROOT)["tasks/edge_bsds.md"]
    rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in page.splitlines()
            if line.startswith("| ") and "](../backbones/" in line and "| [record](" in line]
    starts = [i for i, r in enumerate(rows) if r[0] == "1"]  # each board's first row
    board = rows[starts[0]: starts[1] if len(starts) > 1 else len(rows)]
    (sobel,) = [r for r in board if r[1].startswith("[sobel]")]
    assert sobel[0] == "baseline" and sobel[3] == "n/a"  # never ranked, never in a tie group
    values = [float(r[2].split()[0]) for r in board if r[0] not in ("control",)]
    assert values == sorted(values, reverse=True)  # placed by its value among the ranked rows
    assert all(r[0] == "control" for r in board[board.index(sobel) + 1:] if "@random" in r[1])
