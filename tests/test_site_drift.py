"""The site is a pure function of the corpus (and the per-sample files its records point to):
regenerating it reproduces the committed docs/ exactly, pages and figures alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import paths
from harness.leaderboard import rendered_pages
from harness.leaderboard.render import GENERATED_DIRS, GENERATED_FILES, is_generated
from harness.records import read_records

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus():
    return read_records(ROOT / paths.CORPUS)


def committed_generated_pages() -> dict[str, str]:
    docs = ROOT / paths.DOCS
    pages = {}
    for path in sorted(docs.rglob("*")):
        if path.is_file() and is_generated(path):
            pages[str(path.relative_to(docs))] = path.read_text(encoding="utf-8")
    return pages


def test_corpus_is_not_empty_and_sorted(corpus):
    assert corpus, "the committed corpus is empty"
    run_ids = [r.run_id for r in corpus]
    assert run_ids == sorted(run_ids)
    assert len(set(run_ids)) == len(run_ids)


def test_regenerated_site_matches_committed_docs(corpus):
    expected = rendered_pages(corpus, ROOT)
    committed = committed_generated_pages()
    assert sorted(committed) == sorted(expected), "generated pages added or missing: run `visbench-harness site`"
    for name, text in expected.items():
        assert committed[name] == text, f"docs/{name} differs from the corpus: run `visbench-harness site`"


def test_editing_one_number_in_the_corpus_is_detected(corpus):
    record = next(r for r in corpus if r.status == "ok")
    metric = record.headline_metric
    # Without its per-sample file: a metric that no longer averages its samples is refused outright
    # (tests/test_leaderboard.py), and this test is about the page noticing the number.
    edited = record.model_copy(
        update={"metrics": {**record.metrics, metric: record.metrics[metric] + 0.01}, "samples": None}
    )
    pages = rendered_pages([edited if r is record else r for r in corpus], ROOT)
    committed = committed_generated_pages()
    assert any(committed.get(name) != text for name, text in pages.items())


def test_generated_pages_live_where_the_site_stage_writes_them():
    for name in committed_generated_pages():
        assert name in GENERATED_FILES or name.split("/")[0] in GENERATED_DIRS
