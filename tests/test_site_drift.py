"""The site is a pure function of the corpus (and the per-sample files its records point to, and the frozen
releases): regenerating it reproduces the committed docs/ exactly, pages, figures and data files alike, and
every committed release still matches the SHA-256s it was cut with."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core import paths
from harness.leaderboard import rendered_pages
from harness.leaderboard.queries.releases import RELEASES_DIR, check_files, releases
from harness.leaderboard.site.build import GENERATED_DIRS, GENERATED_FILES, OWNED_DIRS, is_generated
from harness.runs.records import read_records

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus():
    return read_records(ROOT / paths.CORPUS)


def _owned(relative: Path) -> bool:
    return any(relative.is_relative_to(owned) for owned in OWNED_DIRS)


def committed_generated_pages() -> dict[str, bytes]:
    docs = ROOT / paths.DOCS
    pages = {}
    for path in sorted(docs.rglob("*")):
        relative = path.relative_to(docs)
        if path.is_file() and (_owned(relative) or is_generated(path)):
            pages[relative.as_posix()] = path.read_bytes()
    return pages


def _bytes(content: str | bytes) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else content


@pytest.fixture(scope="module")
def expected(corpus):
    return {name: _bytes(content) for name, content in rendered_pages(corpus, ROOT).items()}


def test_corpus_is_not_empty_and_sorted(corpus):
    assert corpus, "the committed corpus is empty"
    run_ids = [r.run_id for r in corpus]
    assert run_ids == sorted(run_ids)
    assert len(set(run_ids)) == len(run_ids)


def test_regenerated_site_matches_committed_docs(expected):
    committed = committed_generated_pages()
    assert sorted(committed) == sorted(expected), "generated pages added or missing: run `visbench-harness site`"
    for name, content in expected.items():
        assert committed[name] == content, f"docs/{name} differs from the corpus: run `visbench-harness site`"


def test_every_board_whose_protocol_trains_a_head_shows_its_measured_seed_spread(expected):
    """Issue 46: a verdict is *better* only beyond the seed spread, so every trained protocol's board has one (the
    seed grids sweep each), and the boards say so."""
    boards = {name: page.decode() for name, page in expected.items() if name.startswith("tasks/")}
    assert any("**Seed spread:** up to" in page for page in boards.values())
    unswept = sorted(name for name, page in boards.items() if "Seed spread not measured" in page)
    assert not unswept, f"boards without a seed sweep: {unswept}; add their protocol to a seed grid in params.yaml"


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
    assert any(committed.get(name) != _bytes(content) for name, content in pages.items())
    # The downloads carry the number too, and their SHA-256s with it.
    assert committed["downloads/SHA256SUMS"] != pages["downloads/SHA256SUMS"]


def test_generated_pages_live_where_the_site_stage_writes_them():
    for name in committed_generated_pages():
        assert name in GENERATED_FILES or name.split("/")[0] in GENERATED_DIRS or _owned(Path(name))


def test_committed_releases_never_change():
    """A release is cut once (harness.leaderboard.queries.releases.cut_release) and never rewritten: every file in it
    still has the SHA-256 its SHA256SUMS lists, and nothing was added or removed."""
    folder = ROOT / paths.DOCS / RELEASES_DIR
    for release in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        assert check_files(release) == [], f"{release} changed after it was cut"
    releases(ROOT / paths.DOCS)  # names and sums, as the site stage reads them
