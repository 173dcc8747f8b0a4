"""Each board's interval chart draws exactly the board's rows, values and intervals, and its page shows it."""

from __future__ import annotations

import csv
import re
from pathlib import Path, PurePosixPath

import numpy as np
import pytest

from harness.core import paths
from harness.leaderboard.site.build import rendered_pages
from harness.leaderboard.sitemap import board_figure_path as figure_path
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
    section = section.split('<div class="vb-pinned vb-ranking" markdown>', 1)[1].split("</div>", 1)[0]
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
            expected = {"control": "control", "baseline": "baseline", "under floor": "under floor"}.get(
                row[0], f"rank {row[0]}")
            assert dot["kind"].startswith(expected)


def test_a_chance_row_is_drawn_where_the_board_has_one(pages):
    page = pages["tasks/classification.md"]
    keys = re.findall(r"\{ #board-([0-9a-f]+) \}", page)
    assert keys
    for key in keys:
        svg = pages[f"plots/boards/{key}.svg"]
        assert "stroke-dasharray" in svg and "chance" in svg  # uniform guess at 1/C


def test_boundary_boards_draw_each_rows_precision_recall_curve_at_its_ods(pages):
    """Every edge_bsds board: a P/R figure on its page whose legend gives each row's ODS as its record has it,
    and the board's headline with intervals (recomputed from the images' counts) instead of "no per-sample"."""
    from harness.leaderboard.sitemap import pr_figure_path as pr_path

    corpus = {r.run_id: r for r in read_records(ROOT / paths.CORPUS)}
    page = pages["tasks/edge_bsds.md"]
    keys = re.findall(r"\{ #board-([0-9a-f]+) \}", page)
    assert keys
    for key in keys:
        svg = pages[pr_path(key)]
        assert f"(../{pr_path(key)}){{ .vb-figure }}" in page
        legend = dict(re.findall(r">([^<>]+?)  ODS F ([0-9.]+)</text>", svg))
        rows = _board_rows(page, key)
        assert rows and len(legend) == len(rows)
        for row in rows:
            label = re.sub(r"^\[(.*?)\]\(.*$", r"\1", row[1])
            run_id = re.search(r"\(\.\./runs/[^)]*?/([^/)]+)\.md\)", row[-1])
            value = row[2].split(" [")[0]
            assert f"{float(legend[label]):.3f}" == f"{float(value):.3f}", (label, run_id)
            assert " [" in row[2]  # ODS has an interval now
    assert "no per-sample scores, so no confidence intervals" not in page
    assert any(r.task == "edge_bsds" and r.samples.statistics.get("ods_f") == "bsds_ods_f" for r in corpus.values())


def test_macro_f1_has_an_interval_on_classification_run_pages(pages):
    run_pages = [text for name, text in pages.items() if name.startswith("runs/classification/")]
    assert run_pages
    for text in run_pages:
        line = next(line for line in text.splitlines() if line.startswith("| `macro_f1`") or
                    line.startswith("| macro_f1"))
        assert re.search(r"[0-9.]+ \[[0-9.]+, [0-9.]+\]", line), line


def test_macro_f1_has_an_interval_on_classification_boards(pages):
    page = pages["tasks/classification.md"]
    header = next(line for line in page.splitlines() if line.startswith("| Rank |"))
    columns = [c.strip() for c in header.strip("|").split(" | ")]
    assert "macro_f1 [95% CI]" in columns
    at = columns.index("macro_f1 [95% CI]")
    key = re.findall(r"\{ #board-([0-9a-f]+) \}", page)[0]
    rows = _board_rows(page, key)
    assert rows and all(re.fullmatch(r"[0-9.]+ \[[0-9.]+, [0-9.]+\]", row[at]) for row in rows)


def test_overlap_boards_set_overlap_beside_the_linear_probe_on_the_same_features(pages):
    """Each class-overlap board's comparison table: every row's overlap and linear top-1 are its two records'
    values, its ranks order them (least overlap, best top-1 first), and the reading follows the rank gap."""
    from harness.leaderboard.sections.overlap import RANK_GAP

    corpus = [r for r in read_records(ROOT / paths.CORPUS) if r.status == "ok" and r.k_shot is None]
    page = pages["tasks/class_overlap.md"]
    sections = page.split("Overlap against the linear probe on the same features")[1:]
    assert sections
    for section in sections:
        rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in section.split("\n\n", 2)[1].splitlines()
                if line.startswith("| [")]
        assert len(rows) >= 3
        for row in rows:
            name = re.sub(r"^\[(.*?)\]\(.*$", r"\1", row[0])
            assert any(r.task == "class_overlap" and r.backbone_name == name
                       and f"{r.metrics['overlap']:.4f}" == row[1] for r in corpus)
            assert any(r.task == "classification" and r.backbone_name == name
                       and f"{r.metrics['top1']:.4f}" == row[3] for r in corpus)
            gap = float(row[4]) - float(row[2])
            assert row[5] == ("agree" if abs(gap) < RANK_GAP else
                              "neighbourhoods separate its classes better than a hyperplane does" if gap > 0 else
                              "a hyperplane finds what its neighbourhoods mix")
        overlaps = [float(r[1]) for r in rows]
        ranks = [float(r[2]) for r in rows]
        assert all((a < b) == (ra < rb) for a, ra in zip(overlaps, ranks, strict=True)
                   for b, rb in zip(overlaps, ranks, strict=True) if a != b)


def test_overlap_run_pages_show_per_class_overlap_from_the_samples(pages):
    from harness.probes.class_overlap import per_class

    runs = [r for r in read_records(ROOT / paths.CORPUS) if r.task == "class_overlap" and r.status == "ok"]
    assert runs
    for record in runs:
        (text,) = [t for name, t in pages.items() if name.startswith("runs/class_overlap/")
                   and f"# {record.run_id}\n" in t]
        with open(ROOT / record.samples.path, newline="") as handle:
            rows = list(csv.DictReader(handle))
        columns = {name: np.array([float(row[name]) for row in rows]) for name in rows[0] if name != "sample_id"}
        section = text.split("## Class overlap", 1)[1]
        shown = dict(re.findall(r"^\| ([^|]+?) \| \d+ \| ([0-9.]+) \|$", section, flags=re.M))
        names = {int(float(row["label"])): PurePosixPath(row["sample_id"]).parent.name for row in rows}
        for label, value in per_class(columns).items():
            assert shown[names[label]] == f"{value:.4f}"


def test_diagnostic_boards_stay_out_of_the_cross_task_table(pages):
    """Class overlap and the head-family sweep re-read classification datasets: on their task pages, in no
    column of the cross-task table (so in no row's mean)."""
    overview = pages["index.md"].split("{ #cross-task }", 1)[1].split("\n## Levels", 1)[0]
    for task in ("class_overlap", "head_family"):
        assert "{ #board-" in pages[f"tasks/{task}.md"]
        assert f"tasks/{task}.md#board-" not in overview
    assert "tasks/classification.md#board-" in overview


def test_the_agreement_matrix_names_every_board_and_fits_a_phone(pages):
    """Over all the corpus's boards (28 when written), the matrix is whole on a 390-px phone at its natural size: each
    row is its board's label from the agreement page (its code in the label's tooltip), the columns its numbers, and
    every cell's tooltip names the pair the page's table lists, by label."""
    svg = pages.get("plots/agreement.svg")
    if svg is None:
        pytest.skip("no two boards of the committed corpus share enough rows")
    page = pages["agreement.md"]
    boards = [[c.strip() for c in line.strip("|").split(" | ")] for line in page.splitlines()
              if re.match(r"\| \d+ \| \[", line)]
    assert boards
    width = float(re.search(r'<svg [^>]*width="([\d.]+)"', svg).group(1))
    assert width <= 390, f"the matrix is {width} px wide"
    assert min(float(size) for size in re.findall(r'font-size="([\d.]+)"', svg)) >= 11
    groups = re.findall(r"<g><title>(B-[0-9a-f]+): [^<]+</title>\n((?:<text [^>]+>[^<]+</text>\n)+)</g>", svg)
    rows = [(code, *" ".join(re.findall(r">([^<]+)</text>", lines)).split("  ", 1)) for code, lines in groups]
    listed = [(row[5], row[0], re.sub(r"^\[(.*?)\]\(.*$", r"\1", row[1]).replace("\\_", "_")) for row in boards]
    assert rows == listed  # a label too long for the width wraps onto a second line of its group
    for code, number, label in listed:
        heads = re.findall(rf"<title>{number}: {re.escape(label)} \({code}\)</title>\n<text [^>]+>{number}</text>", svg)
        assert len(heads) == 2, f"column {number} is not numbered above and below the matrix"
        assert f">{code}</text>" not in svg
    pairs = {tuple(sorted(c.strip() for c in line.strip("|").split(" | ")[:2])) for line in
             page.split("## Pairs", 1)[1].splitlines() if line.startswith("| ") and not line.startswith("| Board")
             and not line.startswith("| ---")}
    drawn = {tuple(sorted(m)) for m in re.findall(r"<title>Spearman ρ, (.+?) \(B-[0-9a-f]+\) vs (.+?) \(B-[0-9a-f]+\):",
                                                   svg)}
    assert {tuple(sorted(p.replace("\\_", "_") for p in pair)) for pair in pairs} == drawn
