"""The site's data files: downloads (byte-identical regeneration, SHA-256s, readable back), frozen releases
and their changelog (on a temporary docs folder), and the plot data and definitions for `dvc plots`."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest
from test_layer_rows import classification, depth  # the synthetic records those tests use

from harness.leaderboard import render_site, rendered_pages
from harness.leaderboard.figures.data import TEMPLATES, dvc_plots
from harness.leaderboard.queries.downloads import parse_sums
from harness.leaderboard.queries.releases import ReleaseError, cut_release, releases
from harness.runs.records import parse_record
from harness.runs.samples import write_samples

REPO = Path(__file__).resolve().parents[1]


def sampled_corpus(root: Path) -> list:
    """Depth runs with per-sample scores (two layer sets of one backbone among them), classification without."""
    rng = np.random.default_rng(3)
    records = []
    for record, p in ((depth("efficientnet_lite0", 0), 0.7), (depth("efficientnet_lite0", 0, layers=[3]), 0.8),
                      (depth("resnet18", 0), 0.5), (depth("resnet18@random", 0), 0.3)):
        scores = (rng.random(120) < p).astype(float)
        relative = Path("results") / f"{record.run_id}.samples.csv"
        ids = [f"val/{i:03d}" for i in range(len(scores))]
        info = write_samples(root / relative, ids, {"delta1": scores}, "image").model_copy(
            update={"path": str(relative)})
        records.append(record.model_copy(update={"samples": info, "metrics": {"delta1": float(scores.mean())}}))
    return [*records, classification("efficientnet_lite0", 0.8), classification("resnet18", 0.7)]


@pytest.fixture
def project(tmp_path) -> tuple[list, Path]:
    root = tmp_path / "project"
    return sampled_corpus(root), root


def test_downloads_are_byte_identical_and_match_their_sums(project):
    corpus, root = project
    first = rendered_pages(corpus, root)
    shuffled = list(corpus)
    random.Random(5).shuffle(shuffled)
    second = rendered_pages(shuffled, root)
    downloads = {name: data for name, data in first.items() if name.startswith("downloads/")}
    assert downloads and all(second[name] == data for name, data in downloads.items())
    assert {type(data) for data in downloads.values()} == {bytes}
    sums = parse_sums(downloads["downloads/SHA256SUMS"].decode())
    assert sorted(sums) == sorted(name.removeprefix("downloads/") for name in downloads if not name.endswith("SUMS"))
    for name, digest in sums.items():
        assert hashlib.sha256(downloads[f"downloads/{name}"]).hexdigest() == digest
    # The downloads page shows the same SHA-256s, and each board links to it.
    page = first["downloads.md"]
    assert all(f"`{digest}`" in page for digest in sums.values())
    assert "[downloads](../downloads.md)" in first["tasks/depth.md"]


def test_downloads_read_back_to_the_corpus(project, tmp_path):
    corpus, root = project
    files = {name.removeprefix("downloads/"): data for name, data in rendered_pages(corpus, root).items()
             if name.startswith("downloads/")}
    records = [parse_record(line) for line in files["corpus.jsonl"].decode().splitlines()]
    assert records == sorted(corpus, key=lambda r: r.run_id)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    con = duckdb.connect()
    parquet = con.execute(f"SELECT run_id, headline_value FROM '{tmp_path}/corpus.parquet' ORDER BY run_id").fetchall()
    rows = list(csv.DictReader(io.StringIO(files["corpus.csv"].decode())))
    assert [(r["run_id"], float(r["headline_value"])) for r in rows] == parquet
    assert [(r["run_id"], r["headline_value"]) for r in json.loads(files["corpus.json"])] == parquet
    # Per-sample scores: the same rows in all three formats, every score of every run.
    (count,) = con.execute(f"SELECT count(*) FROM '{tmp_path}/samples.parquet'").fetchone()
    assert count == sum(r.samples.count for r in corpus if r.samples is not None)
    assert len(json.loads(gzip.decompress(files["samples.json.gz"]))) == count
    assert len(gzip.decompress(files["samples.csv.gz"]).decode().splitlines()) == count + 1
    assert gzip.decompress(files["samples.csv.gz"])[:40].startswith(b"run_id,row_index,sample_id,metric,value")


def test_owned_folders_lose_stale_files(project, tmp_path):
    corpus, root = project
    docs = tmp_path / "docs"
    render_site(corpus, docs, root)
    stale = docs / "downloads" / "old.csv"
    stale.write_text("a,b\n")
    stale_plot = docs / "plots" / "data" / "boards" / "B-0000.csv"
    stale_plot.write_text("series,quantile,score\n")
    render_site(corpus, docs, root)
    assert not stale.exists() and not stale_plot.exists()  # the site stage owns these folders whole


def test_release_is_cut_once_and_the_changelog_says_what_moved(project, tmp_path):
    corpus, root = project
    docs = tmp_path / "docs"
    render_site(corpus, docs, root)
    assert "No release has been cut yet." in (docs / "changelog.md").read_text()
    v1 = cut_release("v1", docs)
    assert sorted(p.name for p in v1.iterdir()) == sorted(p.name for p in (docs / "downloads").iterdir())
    with pytest.raises(ReleaseError, match="never overwritten"):
        cut_release("v1", docs)
    with pytest.raises(ReleaseError, match="v1, v2"):
        cut_release("latest", docs)

    # Move one number, drop one run, add one: the unreleased section names each.
    moved, dropped = corpus[4], corpus[5]
    moved = moved.model_copy(update={"metrics": {"top1": 0.8125}})
    added = classification("efficientnet_lite1", 0.75, crop=240)
    changed = [moved if r.run_id == corpus[4].run_id else r for r in corpus if r is not dropped] + [added]
    render_site(changed, docs, root)
    assert (v1 / "corpus.jsonl").read_bytes() != (docs / "downloads" / "corpus.jsonl").read_bytes()
    changelog = (docs / "changelog.md").read_text()
    unreleased = changelog.split("## Unreleased")[1].split("## v1")[0]
    assert "Against v1: 6 runs; 1 moved, 1 added, 1 removed." in unreleased
    assert f"| {moved.run_id} | moved | top1 | 0.8000 | 0.8125 | +0.0125 |" in unreleased
    assert f"| {added.run_id} | added | top1 | n/a | 0.7500 | n/a |" in unreleased
    assert f"| {dropped.run_id} | removed | top1 | 0.7000 | n/a | n/a |" in unreleased
    assert "The first release: 6 runs." in changelog.split("## v1")[1]

    cut_release("v2", docs)
    render_site(changed, docs, root)
    changelog = (docs / "changelog.md").read_text()
    assert "Against v2: 6 runs; 0 moved, 0 added, 0 removed." in changelog
    assert "Against v1: 6 runs; 1 moved, 1 added, 1 removed." in changelog.split("## v2")[1]
    page = (docs / "downloads.md").read_text()
    assert "[corpus.parquet](releases/v2/corpus.parquet)" in page and "version      = {v2}," in page
    assert [r.name for r in releases(docs)] == ["v1", "v2"]

    # A release that changed after it was cut is refused, by name.
    (v1 / "corpus.csv").write_text("edited\n")
    with pytest.raises(ReleaseError, match=r"corpus\.csv: SHA-256 differs"):
        releases(docs)


def test_plot_data_files_and_their_dvc_definitions(project):
    corpus, root = project
    pages = rendered_pages(corpus, root)
    (board,) = [name for name in pages if name.startswith("plots/data/boards/")]  # depth: the only sampled board
    rows = list(csv.DictReader(io.StringIO(pages[board])))
    assert list(rows[0]) == ["series", "quantile", "score"]
    series = list(dict.fromkeys(r["series"] for r in rows))
    assert series == ["efficientnet_lite0 · layers 3", "efficientnet_lite0 · last layer", "resnet18",
                      "resnet18@random (control)"]  # board order, controls marked
    for name in series:
        quantiles = [(float(r["quantile"]), float(r["score"])) for r in rows if r["series"] == name]
        assert [q for q, _ in quantiles] == [i / 20 for i in range(21)]
        assert [s for _, s in quantiles] == sorted(s for _, s in quantiles)  # a quantile function rises
    assert f"[this board's score distributions](../{board})" in pages["tasks/depth.md"]
    entries = dvc_plots()
    assert [next(iter(e)) for e in entries] == ["docs/plots/data/curves", "docs/plots/data/boards"]
    for entry in entries:
        (spec,) = entry.values()
        template = json.loads((REPO / spec["template"]).read_text())
        assert spec["template"].startswith(TEMPLATES) and template["encoding"]["color"]["field"] == "series"


@pytest.mark.dvc
def test_dvc_draws_the_plots(project, tmp_path):
    """`dvc plots show` finds both folders and renders every file with the shipped templates."""
    corpus, root = project
    docs = root / "docs"
    render_site([*corpus, *(depth("resnet18", 0.1 * k, k_shot=k, seed=s) for k in (1, 2) for s in (0, 1))],
                docs, root)
    shutil.copytree(REPO / TEMPLATES, root / TEMPLATES)
    import yaml

    (root / "dvc.yaml").write_text(yaml.safe_dump({"plots": dvc_plots()}, sort_keys=False))
    dvc = [sys.executable, "-m", "dvc"]
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    for command in (["git", "init", "-q"], [*dvc, "init", "-q"]):
        subprocess.run(command, cwd=root, check=True, env=env, capture_output=True, timeout=120)
    shown = subprocess.run([*dvc, "plots", "show", "--json"], cwd=root, env=env, capture_output=True, text=True,
                           timeout=300)
    assert shown.returncode == 0, shown.stderr
    plots = json.loads(shown.stdout)["data"]
    assert any(name.startswith("docs/plots/data/curves/") for name in plots)
    assert any(name.startswith("docs/plots/data/boards/") for name in plots)
    assert all(entry[0]["type"] == "vega" for entry in plots.values())


def test_release_stage_regenerates_cuts_and_refuses_twice(project, monkeypatch, capsys):
    """`python -m harness.stages.release v1`, what `visbench-harness release v1` runs, on a project folder."""
    from harness.runs.records import write_records
    from harness.stages import release

    corpus, root = project
    monkeypatch.chdir(root)
    write_records(Path("leaderboard/corpus.jsonl"), sorted(corpus, key=lambda r: r.run_id))
    assert release.main(["v1"]) == 0
    v1 = Path("docs/releases/v1")
    assert (v1 / "SHA256SUMS").read_bytes() == Path("docs/downloads/SHA256SUMS").read_bytes()
    assert "| v1 |" in Path("docs/downloads.md").read_text()  # the site was regenerated after the cut
    before = {p.name: p.read_bytes() for p in v1.iterdir()}
    # run again, v1 is published as a version of the site: here it cannot be (no git), and says why
    assert release.main(["v1"]) == 2 and "cut but not published" in capsys.readouterr().err
    assert release.main(["one"]) == 2
    capsys.readouterr()
    assert release.main(["v3"]) == 2 and "the next is v2" in capsys.readouterr().err  # numbered in cut order
    assert not Path("docs/releases/v3").exists()
    assert {p.name: p.read_bytes() for p in v1.iterdir()} == before
    # in a git repository, once the cut is committed, the same command publishes it (harness.leaderboard
    # .versioned_site, tested on its own in tests/test_versioned_site.py); a published release never changes
    from harness.leaderboard.site.versions import published_versions

    Path("mkdocs.yml").write_text("site_name: t\ntheme:\n  name: material\n  font: false\n")
    Path(".gitignore").write_text("/site/\n")
    for name in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(name, "t")
    for name in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(name, "t@example.org")
    for command in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "release v1"]):
        subprocess.run(command, check=True, capture_output=True, timeout=120)
    assert release.main(["v1"]) == 0
    assert published_versions(Path(".")) == {"v1": ["latest"]}
    assert release.main(["v1"]) == 2 and "published and never changes" in capsys.readouterr().err
    assert release.main(["v2"]) == 0 and Path("docs/releases/v2").is_dir()  # the next one is cut as before
