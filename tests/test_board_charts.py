"""Each board's interval chart draws exactly the board's rows, values and intervals, and its page shows it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.core import paths
from harness.leaderboard.plots_boards import figure_path
from harness.leaderboard.render import rendered_pages
from harness.runs.records import read_records

ROOT = Path(__file__).resolve().parents[1]
TIP = re.compile(r"<circle [^>]*><title>(?P<label>[^<:]+): (?P<metric>\S+) (?P<value>-?[0-9.]+)"
                 r"(?: \[(?P<low>-?[0-9.]+), (?P<high>-?[0-9.]+)\])?; (?P<kind>[^<]+)</title></circle>")


@pytest.fixture(scope="module")
def pages() -> dict:
    corpus = read_records(ROOT / paths.CORPUS)
    if not corpus:
        pytest.skip("the committed corpus is empty")
    return rendered_pages(corpus, ROOT)


def _board_rows(page: str, key: str) -> list[list[str]]:
    """The board's table rows (rank, backbone, headline [CI], …), without chance rows."""
    section = page.split(f"{{ #board-{key} }}", 1)[1].split("\n## ", 1)[0]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in section.splitlines()
            if line.startswith("| ") and "](../backbones/" in line]


def test_every_board_chart_matches_its_table(pages):
    charts = {path: text for path, text in pages.items() if path.startswith("plots/boards/")}
    assert charts
    for path, svg in charts.items():
        key = Path(path).stem
        (task_page,) = [p for name, p in pages.items() if name.startswith("tasks/") and f"#board-{key} }}" in p]
        assert f"(../{figure_path(key)}){{ .vb-figure }}" in task_page
        table = _board_rows(task_page, key)
        drawn = [m.groupdict() for m in TIP.finditer(svg)]
        assert [d["label"] for d in drawn] == [re.sub(r"^\[(.*?)\]\(.*$", r"\1", r[1]) for r in table]
        for dot, row in zip(drawn, table, strict=True):
            value = row[2].split(" [")[0]
            assert f"{float(dot['value']):.4f}" == value
            if dot["low"] is not None:  # the whisker is the table's interval
                assert row[2] == f"{value} [{float(dot['low']):.4f}, {float(dot['high']):.4f}]"
            else:
                assert "[" not in row[2]
            expected = {"control": "control", "baseline": "baseline"}.get(row[0], f"rank {row[0]}")
            assert dot["kind"].startswith(expected)


def test_a_chance_row_is_drawn_where_the_board_has_one(pages):
    page = pages["tasks/classification.md"]
    keys = re.findall(r"\{ #board-([0-9a-f]+) \}", page)
    assert keys
    for key in keys:
        svg = pages[f"plots/boards/{key}.svg"]
        assert "stroke-dasharray" in svg and "chance" in svg  # uniform guess at 1/C
