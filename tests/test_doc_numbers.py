"""Numbers in hand-written docs come from the corpus or a benchmark's results file (`doc_numbers` markers), so a
page cannot contradict what was run; numbers outside a marker are definitions, parameters or published values,
each listed here with what it is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.leaderboard.site import doc_numbers

ROOT = Path(__file__).resolve().parents[1]
# A decimal with two or more digits after the point: what a measurement looks like.
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d{2,}(?![\w.])")
# Outside markers, only these: what each one is.
NOT_MEASURED = {
    "README.md": {"3.11": "the Python version"},
    "docs/protocols.md": {
        "104.00699": "HED's mean pixel (BGR), a constant of its preprocessing",
        "116.66877": "HED's mean pixel",
        "122.67892": "HED's mean pixel",
        "1.25": "depth's δ threshold, a definition",
        "11.25": "normals' angular threshold, a definition",
        "0.0075": "edge_bsds' default max_dist, a parameter",
        "0.01": "BSDS thresholds' step / RetinaNet's prior probability, definitions",
        "0.99": "the last BSDS threshold at K = 99, a definition",
        "0.25": "a focal-loss α / a 2AFC difficulty ratio, parameters",
        "0.12": "a 2AFC difficulty ratio, a parameter",
        "0.15": "structure-2afc's colour_shift, a parameter",
        "0.75": "COCO's IoU threshold, a definition",
        "0.80": "BSDS500's published human agreement (Arbelaez et al. 2011)",
        "0.60": "Canny's published ODS (Arbelaez et al. 2011)",
        "0.001": "a threshold step, a definition",
        "1.01": "SE's NMS suppression factor, a constant of edgesNmsMex",
        "2.0.11": "pycocotools' version",
    },
}


@pytest.fixture(scope="module")
def corpus():
    return doc_numbers.load_corpus(ROOT)


@pytest.mark.parametrize("page", doc_numbers.PAGES)
def test_every_marked_number_is_its_sources(corpus, page):
    text = (ROOT / page).read_text(encoding="utf-8")
    assert doc_numbers.fill(text, corpus, ROOT) == text, (
        f"{page} quotes numbers its sources no longer give: run python -m harness.leaderboard.site.doc_numbers")


@pytest.mark.parametrize("page", sorted(NOT_MEASURED))
def test_numbers_outside_markers_are_definitions(page):
    text = doc_numbers.MARKER.sub("", (ROOT / page).read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans: parameter values and names, as typed in params.yaml
    found = sorted(set(DECIMAL.findall(text)) - NOT_MEASURED[page].keys())
    assert not found, f"{page}: numbers typed by hand (quote them through a doc_numbers marker): {found}"


def test_a_stale_number_is_rewritten_and_a_missing_source_is_an_error(corpus, tmp_path):
    run_id, record = next(iter(corpus.items()))
    metric = record.headline_metric
    stale = f"top <!--vb run;{run_id};{metric};.4f-->9.9999<!--/vb--> of {record.backbone_name}"
    assert doc_numbers.fill(stale, corpus, ROOT) == (
        f"top <!--vb run;{run_id};{metric};.4f-->{record.metrics[metric]:.4f}<!--/vb--> of {record.backbone_name}")
    with pytest.raises(doc_numbers.SourceError, match="no committed record"):
        doc_numbers.fill("<!--vb run;nope-task@x;top1-->1<!--/vb-->", corpus, ROOT)
    with pytest.raises(doc_numbers.SourceError, match="no results file"):
        doc_numbers.fill("<!--vb bench;no_such_bench;x-->1<!--/vb-->", corpus, tmp_path)


def test_readme_grid_table_is_params_yaml(corpus, tmp_path):
    """The README's grid table is generated from params.yaml between `<!--vb grids-->` markers: one row per grid,
    each naming every backbone and task it declares, and a grid added to params.yaml appears on the next rewrite."""
    import yaml

    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (table,) = [m["value"] for m in doc_numbers.MARKER.finditer(readme) if m["source"] == "grids"]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split(" | ")[0].strip("|` ") for row in rows] == list(params["grids"])
    for row, grid in zip(rows, params["grids"].values(), strict=True):
        assert all(task in row for task in grid["tasks"])
        assert all(backbone.replace(".random", "@random") in row for backbone in grid["backbones"])
    extra = {"backbones": ["sobel"], "tasks": {"edge": "scenes"}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**params, "grids": {**params["grids"], "extra": extra}},
                                                         sort_keys=False))
    grown = doc_numbers.fill("<!--vb grids--><!--/vb-->", corpus, tmp_path)
    assert grown.splitlines()[-2] == "| `extra` | sobel | edge (scenes) | — | scenes: bundled or generated |"
    assert doc_numbers.fill(grown, corpus, tmp_path) == grown  # a fresh generation rewrites nothing
