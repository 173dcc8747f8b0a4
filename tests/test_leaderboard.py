"""The leaderboard: DuckDB load, ranking, comparability, deterministic pages, stale-page removal, mkdocs."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import numpy as np
import pytest

from harness.leaderboard import (
    GENERATED_HEADER,
    ComparabilityError,
    backbone_summary,
    boards,
    check_comparable,
    comparability_key,
    connect_corpus,
    failed_runs,
    render_site,
    rendered_pages,
    task_summary,
)
from harness.leaderboard.markdown import FRONT_MATTER_HEADER
from harness.leaderboard.sections.curves import FEWSHOT_PROTOCOL
from harness.leaderboard.site.build import is_generated
from harness.leaderboard.sitemap import protocol_anchor
from harness.leaderboard.statistics.bootstrap import PairingError
from harness.runs.records import BackboneInfo, DatasetInfo, Environment, Failure, Record, read_records
from harness.runs.samples import SamplesError, write_samples

REPO = Path(__file__).resolve().parents[1]

ENVIRONMENT = Environment(
    harness_version="0.1.0", git_commit="3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39", git_dirty=False,
    python="3.11.9", torch="2.14.1", timm="1.0.20", open_clip="3.0.0", numpy="2.4.6", device="cuda:0 H200",
)
PREPROCESS = {"library": "pillow", "resize": 256, "crop": 224, "interpolation": "bicubic",
              "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
CIFAR10 = DatasetInfo(name="cifar10", identity="c1f4a10e5d0b7a21", split="test", size=10000)
NYU = DatasetInfo(
    name="nyuv2", identity="9d3e0b1c44f8a7e2", split="val", size=654, params={"max_depth": 10.0}
)


def backbone(name: str, identity: str, precision: str = "fp32") -> BackboneInfo:
    arch = name.removesuffix("@random")
    if name.endswith("@random"):
        weights = {"kind": "random", "seed": 0, "init": "timm 1.0.20 defaults", "state_sha256": "ab" * 32}
    else:
        weights = {"kind": "pretrained", "source": "hf-hub", "location": f"timm/{arch}.a1_in1k",
                   "revision": "491b427b45c94c7fb0e78b5474cc919aff584bbf", "filename": "model.safetensors",
                   "file_sha256": "80c49dee3da4822c009c5a7fe591e9223c5a2cfcf95a4067ca4dfb5a7b89c612"}
    return BackboneInfo(name=name, identity=identity, control=name.endswith("@random"), weights=weights,
                        architecture={"family": "timm", "model": arch}, preprocess=PREPROCESS)


def classification(name: str, identity: str, top1: float, top5: float, precision: str = "fp32",
                   suffix: str = "") -> Record:
    return Record(
        run_id=f"{name}-classification-cifar10{suffix}", backbone=backbone(name, identity, precision),
        backbone_name=name, task="classification", level="high", protocol="linear-probe-adamw/v1",
        protocol_params={"epochs": 30, "lr": 0.001, "batch_size": 256}, dataset=CIFAR10,
        pooling_requested="default", pooling_resolved="avg", feature_mode="pooled", layers=None,
        precision=precision, image_size=224, seed=0, metrics={"top1": top1, "top5": top5},
        headline_metric="top1", higher_is_better={"top1": True, "top5": True},
        tolerances={"top1": 0.002, "top5": 0.002}, status="ok", duration_s=412.5, environment=ENVIRONMENT,
    )


def depth(name: str, identity: str, rmse: float, delta1: float, layers: list[int] | None = None) -> Record:
    # layers None: the default layer set, as every grid records it; the same backbone with layers [3] is
    # another row of the board (tests/test_layer_rows.py)
    suffix = "" if layers is None else "-layers" + "-".join(str(layer) for layer in layers)
    return Record(
        run_id=f"{name}-depth-nyuv2{suffix}", backbone=backbone(name, identity), backbone_name=name, task="depth",
        level="mid", protocol="depth-probe3d/v1", protocol_params={"bins": 256, "epochs": 10},
        dataset=NYU, pooling_requested="default", pooling_resolved=None, feature_mode="dense",
        layers=layers, precision="fp32", image_size=224, seed=0, metrics={"rmse": rmse, "delta1": delta1},
        headline_metric="rmse", higher_is_better={"rmse": False, "delta1": True},
        tolerances={"rmse": 0.005, "delta1": 0.003}, status="ok", duration_s=1310.0, environment=ENVIRONMENT,
    )


LONG_MESSAGE = "CUDA out of memory | tried to allocate 2.00 GiB " + "x" * 300


@pytest.fixture
def corpus() -> list[Record]:
    failed = Record(
        run_id="dinov2_vitb14-depth-nyuv2", backbone=None, backbone_name="dinov2_vitb14", task="depth",
        level="mid", protocol="depth-probe3d/v1", protocol_params={"bins": 256, "epochs": 10}, dataset=NYU,
        pooling_requested="default", pooling_resolved=None, feature_mode="dense", layers=[-1],
        precision="fp32", image_size=224, seed=0, metrics={}, headline_metric="rmse",
        higher_is_better={"rmse": False}, tolerances={}, status="failed",
        failure=Failure(phase="load_backbone", error_type="WeightsUnavailableError", message=LONG_MESSAGE),
        duration_s=0.4, environment=ENVIRONMENT,
    )
    return [
        classification("resnet50", "5a0e", top1=0.9120, top5=0.9971),
        classification("dinov2_vits14", "d5a1", top1=0.9734, top5=0.9993),
        classification("resnet18", "1b8f", top1=0.9120, top5=0.9962),  # ties resnet50
        classification("resnet18@random", "0c7d", top1=0.9500, top5=0.9800),  # would place 2nd: never ranked
        classification("convnext_tiny", "77aa", top1=0.8890, top5=0.9950),
        classification("resnet18", "1b8e", top1=0.9100, top5=0.9960, precision="bf16", suffix="-bf16"),
        depth("dinov2_vits14", "d5a1", rmse=0.3561, delta1=0.8870),
        depth("resnet50", "5a0e", rmse=0.5012, delta1=0.7740),
        depth("resnet18@random", "0c7d", rmse=0.9870, delta1=0.3010),
        failed,
    ]


def bernoulli(p: float, seed: int, n: int = 400) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < p).astype(np.float64)


def with_samples(record: Record, root: Path, columns: dict[str, np.ndarray], ids: list[str] | None = None) -> Record:
    """The record with a per-sample file under `root` and its metrics set to the columns' means."""
    n = len(next(iter(columns.values())))
    ids = ids if ids is not None else [f"val/{i:04d}.png" for i in range(n)]
    relative = Path("results") / f"{record.run_id}.samples.csv"
    info = write_samples(root / relative, ids, columns, "image").model_copy(update={"path": str(relative)})
    metrics = {**record.metrics, **{name: float(np.mean(column)) for name, column in columns.items()}}
    return record.model_copy(update={"samples": info, "metrics": metrics})


@pytest.fixture
def sampled(corpus, tmp_path) -> tuple[list[Record], Path]:
    """The corpus with per-sample scores on the fp32 classification board (the others have none).

    resnet18 and resnet50 have identical per-sample scores (a statistical tie); dinov2_vits14 is far
    better and convnext_tiny far worse than both.
    """
    root = tmp_path / "project"
    same = bernoulli(0.80, seed=2)
    scores = {
        "dinov2_vits14": bernoulli(0.99, seed=1), "resnet50": same, "resnet18": same,
        "convnext_tiny": bernoulli(0.50, seed=3), "resnet18@random": bernoulli(0.30, seed=4),
    }
    out = []
    for record in corpus:
        if record.task == "classification" and record.precision == "fp32":
            top1 = scores[record.backbone_name]
            record = with_samples(record, root, {"top1": top1, "top5": np.maximum(top1, bernoulli(0.9, 5))})
        out.append(record)
    return out, root


def board_for(all_boards: list[dict[str, Any]], task: str, precision: str = "fp32") -> dict[str, Any]:
    (board,) = [b for b in all_boards if b["task"] == task and b["precision"] == precision]
    return board


def test_duckdb_load_row_counts(corpus):
    con = connect_corpus(corpus)
    assert con.execute("SELECT count(*) FROM records").fetchall() == [(10,)]
    assert con.execute("SELECT count(*) FROM metrics").fetchall() == [(18,)]
    assert con.execute("SELECT count(*) FROM records WHERE status = 'failed'").fetchall() == [(1,)]
    row = con.execute(
        "SELECT backbone_identity, control, layers, protocol_params, weights_kind, failure_phase "
        "FROM records WHERE run_id = 'dinov2_vitb14-depth-nyuv2'"
    ).fetchall()
    assert row == [(None, False, "[-1]", '{"bins":256,"epochs":10}', None, "load_backbone")]
    assert con.execute("SELECT layers FROM records WHERE run_id = 'resnet50-classification-cifar10'"
                       ).fetchall() == [("null",)]
    assert con.execute("SELECT count(DISTINCT comparability_key) FROM records").fetchall() == [(3,)]


def test_duplicate_run_id_is_refused(corpus):
    with pytest.raises(ValueError, match="resnet50-classification-cifar10"):
        connect_corpus([*corpus, corpus[0]])


def test_ranking_order_and_ties(corpus):
    all_boards = boards(connect_corpus(corpus))
    assert len(all_boards) == 3  # fp32 classification, bf16 classification, depth
    board = board_for(all_boards, "classification")
    ranked = [(r["backbone_name"], r["rank"]) for r in board["rows"]]
    assert ranked == [
        ("dinov2_vits14", 1),
        ("resnet18", 2),  # ties resnet50; RANK() then skips 3
        ("resnet50", 2),
        ("convnext_tiny", 4),
        ("resnet18@random", None),
    ]
    assert [m["metric"] for m in board["metrics"]] == ["top1", "top5"]

    # Lower rmse is better: the direction comes from higher_is_better, not a fixed DESC.
    depth_board = board_for(all_boards, "depth")
    assert [(r["backbone_name"], r["rank"]) for r in depth_board["rows"]] == [
        ("dinov2_vits14", 1), ("resnet50", 2), ("resnet18@random", None)
    ]
    assert [m["metric"] for m in depth_board["metrics"]] == ["rmse", "delta1"]  # headline first


def test_precision_change_gets_its_own_board(corpus):
    bf16 = board_for(boards(connect_corpus(corpus)), "classification", "bf16")
    assert [(r["backbone_name"], r["rank"]) for r in bf16["rows"]] == [("resnet18", 1)]


def test_controls_never_take_a_pretrained_rank(corpus):
    for board in boards(connect_corpus(corpus)):
        flags = [r["control"] for r in board["rows"]]
        assert flags == sorted(flags)  # controls come after every pretrained row
        assert all(r["rank"] is None for r in board["rows"] if r["control"])
        assert next(r["rank"] for r in board["rows"] if not r["control"]) == 1
    page = rendered_pages(corpus)["tasks/classification.md"]
    assert "| control | [resnet18@random](../backbones/resnet18-at-random.md) | 0.9500 | n/a | 0.9800 |" in page


def test_failed_runs_and_summaries(corpus):
    con = connect_corpus(corpus)
    (failure,) = failed_runs(con)
    assert (failure["backbone_name"], failure["failure_type"]) == ("dinov2_vitb14", "WeightsUnavailableError")
    assert [
        (t["level"], t["task"], t["boards"], t["ok_runs"], t["failed_runs"]) for t in task_summary(con)
    ] == [("high", "classification", 2, 6, 0), ("mid", "depth", 1, 3, 1)]
    summary = {b["backbone_name"]: b for b in backbone_summary(con)}
    assert summary["resnet18"]["identities"] == ["1b8e", "1b8f"]  # one per precision
    assert summary["resnet18@random"]["control"] is True
    assert summary["dinov2_vitb14"]["identities"] == []


def test_failed_runs_table_truncates_and_escapes(corpus):
    page = rendered_pages(corpus)["tasks/depth.md"]
    (line,) = [line for line in page.splitlines() if "WeightsUnavailableError" in line]
    assert "CUDA out of memory \\| tried" in line
    message, retry = line.split(" | ")[-2:]
    assert message.endswith("...") and len(message.replace("\\|", "|")) == 200
    assert retry == "`visbench-harness task=depth backbone=dinov2_vitb14` |"


def test_check_comparable_names_differing_fields(corpus):
    fp32, bf16 = corpus[2], corpus[5]
    with pytest.raises(ComparabilityError) as error:
        check_comparable([fp32, bf16])
    assert str(error.value) == "cannot rank together: precision differs (fp32 vs bf16)"
    with pytest.raises(ComparabilityError) as error:
        check_comparable([fp32, corpus[6]])
    message = str(error.value)
    for part in (
        "task differs (classification vs depth)",
        "dataset.identity differs (c1f4a10e5d0b7a21 vs 9d3e0b1c44f8a7e2)",
        "feature_mode differs (pooled vs dense)",
    ):
        assert part in message
    # A row is a backbone with its layers, and the input size is the backbone's own: neither splits a board.
    assert "precision" not in message and "image_size" not in message and "layers" not in message
    check_comparable(corpus[:5])  # one board: no error
    assert comparability_key(corpus[0]) == comparability_key(corpus[3]) != comparability_key(corpus[5])


def test_k_shot_enters_the_key_only_when_set(corpus):
    """A full-split run keeps the key it had before few-shot runs existed (its anchor and derived seeds too);
    the same run at some k gets another key, and check_comparable names k_shot."""
    from harness.core.hashing import hash_json
    from harness.leaderboard.queries.comparability import COMPARABILITY_FIELDS, comparability_fields

    record = corpus[0]
    before = comparability_fields(record)
    assert "k_shot" not in before and set(before) == set(COMPARABILITY_FIELDS) - {"k_shot"}
    assert comparability_key(record) == hash_json(before, length=12)
    few = record.model_copy(update={"k_shot": 4, "run_id": record.run_id + ".k4.s0"})
    assert comparability_key(few) != comparability_key(record)
    with pytest.raises(ComparabilityError, match=r"k_shot differs \(null vs 4\)"):
        check_comparable([record, few])
    assert [row["run_id"] for board in boards(connect_corpus([*corpus, few])) for row in board["rows"]
            if row["run_id"] == few.run_id] == []  # on no board


def test_rendering_is_deterministic(corpus):
    pages = rendered_pages(corpus)
    assert pages == rendered_pages(corpus)
    shuffled = list(corpus)
    random.Random(7).shuffle(shuffled)
    assert rendered_pages(shuffled) == pages
    downloads = [f"downloads/{name}" for name in (
        "SHA256SUMS", "corpus.csv", "corpus.json", "corpus.jsonl", "corpus.parquet", "metrics.csv", "metrics.json",
        "metrics.parquet", "samples.csv.gz", "samples.json.gz", "samples.parquet")]
    assert list(pages) == sorted([
        "agreement.md", "changelog.md", "compare.md", "downloads.md", *downloads,
        "backbones/convnext_tiny.md", "backbones/dinov2_vitb14.md", "backbones/dinov2_vits14.md",
        "backbones/resnet18-at-random.md", "backbones/resnet18.md", "backbones/resnet50.md",
        "index.md", "levels/high.md", "levels/mid.md", "plots/data/proxy_validity.csv", "proxy.md",
        # each level's score-against-cost chart (the committed benchmarks/results/backbone_costs-*.json)
        "plots/costs/high.svg", "plots/costs/mid.svg",
        "runs/classification/convnext_tiny-classification-cifar10.md",
        "runs/classification/dinov2_vits14-classification-cifar10.md",
        "runs/depth/dinov2_vits14-depth-nyuv2.md", "runs/depth/dinov2_vitb14-depth-nyuv2.md",
        "runs/classification/resnet18-classification-cifar10-bf16.md",
        "runs/classification/resnet18-classification-cifar10.md",
        "runs/classification/resnet18-at-random-classification-cifar10.md",
        "runs/depth/resnet18-at-random-depth-nyuv2.md",
        "runs/classification/resnet50-classification-cifar10.md", "runs/depth/resnet50-depth-nyuv2.md",
        "tasks/classification.md", "tasks/depth.md",
        # one interval chart per board: fp32 and bf16 classification, depth
        *(f"plots/boards/{key}.svg" for key in {comparability_key(r) for r in corpus if r.k_shot is None}),
    ])
    # Pages carry the header on their first line, or inside their front matter; data files have no room for it.
    texts = {name: text for name, text in pages.items() if not name.startswith(("downloads/", "plots/data/"))}
    assert all(text.startswith((GENERATED_HEADER + "\n", f"---\n{FRONT_MATTER_HEADER}\n")) for text in texts.values())


def test_written_bytes_are_identical(corpus, tmp_path):
    first = {p: p.read_bytes() for p in render_site(corpus, tmp_path / "a")}
    second = {p: p.read_bytes() for p in render_site(list(reversed(corpus)), tmp_path / "b")}
    assert [p.relative_to(tmp_path / "a") for p in first] == [p.relative_to(tmp_path / "b") for p in second]
    assert list(first.values()) == list(second.values())


def test_changed_metric_changes_the_page(corpus):
    before = rendered_pages(corpus)
    moved = list(corpus)
    moved[0] = moved[0].model_copy(update={"metrics": {"top1": 0.9121, "top5": 0.9971}})
    after = rendered_pages(moved)
    assert before["tasks/classification.md"] != after["tasks/classification.md"]
    assert "0.9121" in after["tasks/classification.md"]
    assert before["tasks/depth.md"] == after["tasks/depth.md"]


def test_stale_generated_pages_go_hand_written_stay(corpus, tmp_path):
    docs = tmp_path / "docs"
    render_site(corpus, docs)
    hand_written = docs / "tasks" / "notes.md"
    hand_written.write_text("# Notes on tasks\n")
    assert (docs / "tasks" / "depth.md").exists()

    written = render_site([r for r in corpus if r.task != "depth"], docs)
    assert not (docs / "tasks" / "depth.md").exists()
    assert not (docs / "backbones" / "dinov2_vitb14.md").exists()  # its only run was a depth run
    assert not (docs / "runs" / "depth").exists()  # a folder of run pages goes with its last page
    assert hand_written.read_text() == "# Notes on tasks\n"
    assert docs / "tasks" / "classification.md" in written


def test_mkdocs_builds_strict(sampled, tmp_path):
    corpus, root = sampled
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    hook = Path("harness/leaderboard/site/mkdocs_hooks.py")  # mkdocs.yml names it relative to itself
    (tmp_path / hook).parent.mkdir(parents=True)
    shutil.copy(REPO / hook, tmp_path / hook)
    docs = tmp_path / "docs"
    render_site(corpus, docs, root)
    for hand_written in ("javascripts", "stylesheets"):  # mkdocs.yml names the site's scripts and styles
        shutil.copytree(REPO / "docs" / hand_written, docs / hand_written)
    (docs / "protocols.md").write_text("# Protocols\n\nPlaceholder.\n")
    (docs / "reproduce.md").write_text("# Reproduce\n\nPlaceholder.\n")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "tasks" / "classification" / "index.html").exists()
    page = (tmp_path / "site" / "backbones" / "resnet18-at-random" / "index.html").read_text()
    # The hook lets mkdocs title the page by its H1, not by the mangled file name.
    assert "<title>resnet18@random - visbench-harness leaderboard</title>" in page
    site = tmp_path / "site"
    for built in ("levels/high/index.html", "agreement/index.html", "compare/index.html", "downloads/SHA256SUMS",
                  "downloads/samples.parquet", "plots/data/boards", "changelog/index.html",
                  "runs/classification/resnet18-at-random-classification-cifar10/index.html"):
        assert (site / built).exists(), built
    assert 'id="board-' in (site / "tasks" / "classification" / "index.html").read_text()


# -- statistics on the site --------------------------------------------------------------------------


HEADING = "## classification on cifar10 (test), linear-probe-adamw/v1"  # + precision: a classification board


def board_lines(page: str, heading_start: str) -> list[str]:
    """The lines of one board section (from its heading to the next)."""
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading_start))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def table_row(lines: list[str], backbone: str) -> list[str]:
    (line,) = [line for line in lines if line.startswith("| ") and f"[{backbone}](" in line]
    return [part.strip() for part in line.strip("|").split(" | ")]


def test_board_shows_intervals_and_tie_groups(sampled):
    corpus, root = sampled
    page = rendered_pages(corpus, root)["tasks/classification.md"]
    lines = board_lines(page, f"{HEADING}, fp32")
    # The headline and the tie group beside the name, where a wide board's pinned name column keeps them in view.
    assert "| Rank | Backbone | **top1** [95% CI] | Tie group | top5 | Cost | Run |" in lines
    best = table_row(lines, "dinov2_vits14")
    assert re.fullmatch(r"0\.\d{4} \[0\.\d{4}, [01]\.\d{4}\]", best[2])
    low, high = (float(x) for x in best[2].split(" [")[1].rstrip("]").split(", "))
    assert low <= float(best[2].split()[0]) <= high
    groups = {name: table_row(lines, name)[3] for name in ("dinov2_vits14", "resnet18", "resnet50", "convnext_tiny")}
    # Identical per-sample scores are tied; very different runs are not.
    assert groups == {"dinov2_vits14": "A", "resnet18": "B", "resnet50": "B", "convnext_tiny": "C"}
    assert table_row(lines, "resnet18@random")[3] == "n/a"  # controls take no part in tie tests
    assert best[-1] == "[record](../runs/classification/dinov2_vits14-classification-cifar10.md)"
    adjacent = [line for line in lines if line.startswith("| resnet18 | resnet50 |")]
    # "tied" says under what: the board's smallest resolvable difference, stated above its table
    (resolvable,) = re.findall(r"\*\*Smallest resolvable difference:\*\* about (\d\.\d{4}) in top1", "\n".join(lines))
    assert adjacent == [f"| resnet18 | resnet50 | +0.0000 [+0.0000, +0.0000] | 1.0000 | 1.0000 | "
                        f"yes: under {resolvable} |"]
    protocol = "under [linear-probe-adamw/v1](../protocols.md#linear-probe-adamw-v1)"
    assert any(line.startswith("Board **B-") and protocol in line for line in lines)


def test_boards_without_samples_say_so(sampled):
    corpus, root = sampled
    pages = rendered_pages(corpus, root)
    depth = pages["tasks/depth.md"]
    assert "no per-sample scores, so no confidence intervals or tie groups on this board" in depth
    assert "[95% CI]" not in depth
    bf16 = board_lines(pages["tasks/classification.md"], f"{HEADING}, bf16")
    assert any("no per-sample scores" in line for line in bf16)
    assert "No per-sample scores" in pages["runs/depth/resnet50-depth-nyuv2.md"]


def test_metric_disagreement_note(corpus):
    pages = rendered_pages(corpus)
    # top1 ties resnet18 and resnet50, top5 orders them: the metrics do not give the same order.
    fp32 = board_lines(pages["tasks/classification.md"], f"{HEADING}, fp32")
    (note,) = [line for line in fp32 if line.startswith("Metric disagreement")]
    assert "top1 and top5 (Kendall τ-b 0.91 over 4 rows)" in note
    # Lower rmse and higher delta1 put the depth backbones in the same order: no note.
    assert "Metric disagreement" not in pages["tasks/depth.md"]


def crosstask_row(index: str, name: str) -> list[str]:
    """The cells of one row of the home page's cross-task table, the row named `name`."""
    (line,) = [line for line in index.splitlines()
               if line.startswith(f"| [{name}](backbones/") and "{ data-control=" in line]
    return [part.strip() for part in line.strip().strip("|").split(" | ")]


def code_of(record: Record) -> str:
    return f"B-{comparability_key(record)[:4]}"


def test_a_mean_covers_the_boards_a_row_has_and_says_how_many(corpus):
    pages = rendered_pages([r for r in corpus if r.precision != "bf16"])
    index = pages["index.md"]
    # Columns: fp32 classification, then depth, named by task and dataset.
    best = crosstask_row(index, "dinov2_vits14")
    assert best[1:3] == ["0.00", "2 of 2"] and best[-1] == ""
    assert crosstask_row(index, "resnet50")[1:3] == ["0.67", "2 of 2"]  # (1/3 + 1) / 2
    resnet18 = crosstask_row(index, "resnet18")
    # a mean over the one board it has, saying so, and which it lacks; the missing cell is never filled in
    assert resnet18[1:3] == ["0.33", "1 of 2"] and resnet18[-1] == "no result on depth (nyuv2)"
    assert resnet18[4] == "—"
    assert crosstask_row(index, "dinov2_vitb14")[-1] == "no result on classification (cifar10), depth (nyuv2)"
    control = crosstask_row(index, "resnet18@random")
    assert control[1:3] == ["—", "2 of 2"] and control[-1] == "control: never aggregated"
    # Rows over both boards come before rows over one: a mean compares rows over the same boards only.
    order = [line.split("](backbones/")[0].lstrip("| [") for line in index.splitlines()
             if "](backbones/" in line and "{ data-control=" in line]
    assert order.index("resnet50") < order.index("resnet18")
    # Each cell shows the headline value, carries its exact normalised rank for the page's filter, and links
    # to its board.
    assert 'data-nr="0.3333333333333333"' in crosstask_row(index, "resnet50")[3]
    assert crosstask_row(index, "resnet50")[3].startswith(f"[{corpus_value(corpus, 'resnet50', 0):.3f}](")
    assert f"(tasks/classification.md#board-{comparability_key(corpus[0])} " in resnet18[3]
    profile = pages["backbones/resnet18.md"]
    assert "Mean normalised rank over the 1 of 2 boards of the" in profile and "**0.33**" in profile
    assert "[depth (nyuv2)](../tasks/depth.md#board-" in profile
    assert "Mean normalised rank over all 2 boards of the" in pages["backbones/resnet50.md"]
    assert "**0.67**" in pages["backbones/resnet50.md"]


def corpus_value(corpus: list[Record], backbone: str, index: int) -> float:
    """The headline value of `backbone`'s run on the board of corpus[index]."""
    key = comparability_key(corpus[index])
    (record,) = [r for r in corpus if r.backbone_name == backbone and comparability_key(r) == key
                 and r.precision != "bf16"]
    return record.headline


def test_rank_profile_on_backbone_page(sampled):
    corpus, root = sampled
    page = rendered_pages(corpus, root)["backbones/resnet50.md"]
    lines = [line for line in page.splitlines() if line.startswith("| [B")]
    assert len(lines) == 2  # fp32 classification and depth; not the bf16 board it has no run on
    classification = [part.strip() for part in lines[0].strip("|").split(" | ")]
    assert classification[1:3] == ["last layer", "top1"] and classification[4:7] == ["2 of 4", "0.33", "B"]
    assert classification[7] == "[record](../runs/classification/resnet50-classification-cifar10.md)"
    depth = [part.strip() for part in lines[1].strip("|").split(" | ")]
    assert depth[1:7] == ["last layer", "rmse", "0.5012", "2 of 2", "1.00", "n/a"]
    assert "Per-layer profile" not in page  # one layer set: nothing to profile


def test_provenance_page(sampled):
    corpus, root = sampled
    pages = rendered_pages(corpus, root)
    page = pages["runs/classification/resnet50-classification-cifar10.md"]
    record = next(r for r in corpus if r.run_id == "resnet50-classification-cifar10")
    for expected in (
        "# resnet50-classification-cifar10",
        "DVC stage `resnet50-classification-cifar10`.",
        "dvc repro pipelines/resnet50/resnet50/dvc.yaml:resnet50-classification-cifar10",
        "visbench-harness verify grid=resnet50 task=classification backbone=resnet50",
        "| identity | 5a0e |",
        "| file_sha256 | 80c49dee3da4822c009c5a7fe591e9223c5a2cfcf95a4067ca4dfb5a7b89c612 |",
        "| revision | 491b427b45c94c7fb0e78b5474cc919aff584bbf |",
        "| identity | c1f4a10e5d0b7a21 |",
        f"| sha256 | {record.samples.sha256} |",
        "| git_commit | 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39 |",
        "| device | cuda:0 H200 |",
        "| torch | 2.14.1 |",
        f"| comparability_key | {comparability_key(record)} |",
        "rank 2 of 4, tie group B.",
    ):
        assert expected in page, expected
    assert re.search(r"\| top1 \| 0\.\d{4} \[0\.\d{4}, 0\.\d{4}\] \| yes \| 0\.0020 \|", page)
    assert "| macro_f1 |" not in page  # no such metric here; and top5 has an interval too
    failed = pages["runs/depth/dinov2_vitb14-depth-nyuv2.md"]
    assert "Failed in phase `load_backbone` with `WeightsUnavailableError`:" in failed
    assert LONG_MESSAGE in failed  # the full message, not the table's truncation
    assert "visbench-harness verify grid=dinov2_vitb14 task=depth backbone=dinov2_vitb14" in failed
    control = pages["runs/classification/resnet18-at-random-classification-cifar10.md"]
    assert "backbone=resnet18@random" in control and "a control, listed but not ranked" in control
    # Every board row links to its provenance page.
    depth = pages["tasks/depth.md"]
    assert "[record](../runs/depth/dinov2_vitb14-depth-nyuv2.md)" in depth  # the failed-runs table too
    # A short title for the navigation (the backbone and its grid); the heading stays the run id.
    assert page.startswith(f'---\n{FRONT_MATTER_HEADER}\ntitle: "resnet50 (resnet50)"\n---\n')
    # A run page sits two folders down, and links back up accordingly.
    assert "backbone [resnet50](../../backbones/resnet50.md)." in page


@pytest.fixture
def agreeing(sampled) -> tuple[list[Record], Path]:
    """`sampled` plus depth runs of resnet18 and convnext_tiny: fp32 classification and depth then share four
    pretrained rows, enough for an agreement interval."""
    corpus, root = sampled
    return [*corpus, depth("resnet18", "1b8f", rmse=0.4500, delta1=0.8000),
            depth("convnext_tiny", "77aa", rmse=0.6000, delta1=0.7000)], root


def test_level_and_agreement_pages(sampled, agreeing):
    corpus, root = sampled
    pages = rendered_pages(corpus, root)
    high = pages["levels/high.md"]
    assert "| [classification](../tasks/classification.md) | 2 | 6 | 0 |" in high
    assert "[dinov2_vits14](../backbones/dinov2_vits14.md) | [dinov2_vits14](../backbones/dinov2_vits14.md) |" in high
    assert "[depth](../tasks/depth.md)" in pages["levels/mid.md"]
    # No pair of boards shares four pretrained rows: the page says so instead of a matrix of "n too small".
    agreement = pages["agreement.md"]
    assert "No two boards share 4 pretrained rows yet: of 3 pairs of boards, the most any pair shares is 2." \
        in agreement
    assert "plots/agreement.svg" not in agreement and "plots/agreement.svg" not in pages
    index = pages["index.md"]
    assert "## All boards at a glance { #cross-task }" in index
    assert "### Reading guide { #reading-guide }" in index

    corpus, root = agreeing
    agreement = rendered_pages(corpus, root)["agreement.md"]
    assert "![Rank agreement between boards](plots/agreement.svg){ .vb-figure }" in agreement
    # The boards are listed by label, numbered as the matrix, with the code last; the pairs name them by label.
    numbered = [[part.strip() for part in line.strip("|").split(" | ")] for line in agreement.splitlines()
                if re.match(r"\| \d+ \| \[", line)]
    labels = {row[5]: re.sub(r"^\[(.*?)\]\(.*$", r"\1", row[1]) for row in numbered}
    assert [row[0] for row in numbered] == ["1", "2"]
    assert labels == {code_of(corpus[1]): "classification (cifar10, fp32)", code_of(corpus[6]): "depth (nyuv2)"}
    (pair,) = [line for line in agreement.splitlines() if line.startswith("| ") and " | 4 | " in line]
    cells = [part.strip() for part in pair.strip("|").split(" | ")]
    assert sorted(cells[:2]) == sorted(labels.values()) and cells[2] == "4"
    assert not [line for line in agreement.splitlines() if line.startswith("| B-")]  # a code is never a row's name
    assert re.fullmatch(r"\[-?\d\.\d{2}, -?\d\.\d{2}\]", cells[4])  # an interval, not "n too small"
    assert "1 of 3 pairs of boards share at least 4 pretrained rows." in agreement


def test_svg_is_deterministic_and_well_formed(agreeing):
    corpus, root = agreeing
    first = rendered_pages(corpus, root)
    second = rendered_pages(list(reversed(corpus)), root)
    name = "plots/agreement.svg"
    assert first[name].encode() == second[name].encode()
    svg = ElementTree.fromstring(first[name])  # parses as XML; the header is a leading comment
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert " id=" not in first[name]
    assert first[name].splitlines()[0] == GENERATED_HEADER
    # Only the two boards that share enough rows, each named by its label above its row, its code in the label's
    # tooltip, and numbered across the top and bottom; a code never stands as an axis label.
    for record, label in ((corpus[1], "classification (cifar10, fp32)"), (corpus[6], "depth (nyuv2)")):
        code = code_of(record)
        assert re.search(rf"<g><title>{code}: [^<]+</title>\n<text [^>]+>\d+  {re.escape(label)}</text>\n</g>",
                         first[name]), label
        assert len(re.findall(rf"<title>\d: {re.escape(label)} \({code}\)</title>\n<text [^>]+>\d</text>",
                              first[name])) == 2
        assert f">{code}</text>" not in first[name]
    assert code_of(corpus[5]) not in first[name]  # bf16: one row, nothing to agree with
    # Labels, numbers, title and key at 12 px, the cells' values and n at 11.5 (plots.CELL_FONT): legible at the
    # natural size the page shows it at, and at least the 11 px the browser test holds every figure to.
    assert set(re.findall(r'font-size="([\d.]+)"', first[name])) == {"12", "11.5"}
    assert float(svg.get("width")) <= 390  # whole on a phone, at that natural size


def test_pages_identical_when_records_shuffled(sampled):
    corpus, root = sampled
    pages = rendered_pages(corpus, root)
    for seed in (1, 2, 3):
        shuffled = list(corpus)
        random.Random(seed).shuffle(shuffled)
        assert rendered_pages(shuffled, root) == pages


def test_per_sample_files_are_checked(sampled):
    corpus, root = sampled
    record = next(r for r in corpus if r.samples is not None)
    (root / record.samples.path).write_text("sample_id,top1,top5\nx,1.0,1.0\n")
    with pytest.raises(SamplesError, match="SHA-256"):
        rendered_pages(corpus, root)


def test_missing_per_sample_file_is_an_error(sampled):
    corpus, root = sampled
    record = next(r for r in corpus if r.samples is not None)
    (root / record.samples.path).unlink()
    with pytest.raises(SamplesError, match=f"per-sample scores of {record.run_id} are missing"):
        rendered_pages(corpus, root)


def test_samples_must_average_to_the_metric(sampled):
    corpus, root = sampled
    edited = [r.model_copy(update={"metrics": {**r.metrics, "top1": r.metrics["top1"] + 0.01}})
              if r.run_id == "resnet50-classification-cifar10" else r for r in corpus]
    with pytest.raises(SamplesError, match="does not average to the metric"):
        rendered_pages(edited, root)


def test_runs_on_different_samples_are_refused(sampled):
    corpus, root = sampled
    index = next(i for i, r in enumerate(corpus) if r.run_id == "resnet50-classification-cifar10")
    moved = list(corpus)
    top1 = bernoulli(0.8, seed=2)
    moved[index] = with_samples(corpus[index], root, {"top1": top1, "top5": top1},
                                ids=[f"other/{i}" for i in range(400)])
    with pytest.raises(PairingError, match="different samples"):
        rendered_pages(moved, root)


def test_stale_generated_files_go_in_every_generated_dir(sampled, tmp_path):
    corpus, root = sampled
    docs = tmp_path / "docs"
    render_site(corpus, docs, root)
    hand_svg = docs / "plots" / "logo.svg"
    hand_svg.write_text('<svg xmlns="http://www.w3.org/2000/svg"/>\n')
    stale_svg = docs / "plots" / "old.svg"
    stale_svg.write_text('<?xml version="1.0"?>\n' + GENERATED_HEADER + "\n<svg/>\n")
    assert is_generated(stale_svg) and not is_generated(hand_svg)
    render_site([r for r in corpus if r.task != "depth"], docs, root)
    assert not stale_svg.exists() and hand_svg.exists()
    assert not (docs / "levels" / "mid.md").exists()
    assert not (docs / "runs" / "depth").exists()
    assert (docs / "runs" / "classification" / "resnet50-classification-cifar10.md").exists()


def test_committed_protocols_have_the_anchors_boards_link_to():
    text = (REPO / "docs" / "protocols.md").read_text()
    corpus = read_records(REPO / "leaderboard" / "corpus.jsonl")
    # learning curves link the few-shot protocol's section beside the probe's own
    fewshot = {FEWSHOT_PROTOCOL} if any(r.k_shot is not None for r in corpus) else set()
    for protocol in sorted({r.protocol for r in corpus} | fewshot):
        anchor = protocol_anchor(protocol)
        assert f"{{ #{anchor} }}" in text, f"docs/protocols.md has no heading with id {anchor} for {protocol}"


def test_a_checkpoint_that_is_not_the_published_pin_says_so_on_every_row(corpus):
    """`checkpoint=PATH` of another file than the pin is `kind: checkpoint`: ranked as what it is, and its row
    label says it is not the published weights wherever the row shows (boards, cross-task, compare)."""
    from harness.leaderboard.queries.db import CHECKPOINT_LABEL

    mine = classification("dinov2_vits14", "e6b2", top1=0.9650, top5=0.9990, suffix="-mine")
    mine = mine.model_copy(update={"backbone": mine.backbone.model_copy(update={"weights": {
        "kind": "checkpoint", "file_sha256": "cd" * 32, "filename": "my_dinov2.safetensors"}})})
    board = board_for(boards(connect_corpus([*corpus, mine])), "classification")
    labels = {r["run_id"]: r["row_label"] for r in board["rows"]}
    assert labels["dinov2_vits14-classification-cifar10-mine"] == f"dinov2_vits14 · {CHECKPOINT_LABEL}"
    assert labels["dinov2_vits14-classification-cifar10"] == "dinov2_vits14"  # the published pin's row
    page = rendered_pages([*corpus, mine])["tasks/classification.md"]
    assert f"dinov2_vits14 · {CHECKPOINT_LABEL}" in page


def test_a_replicate_on_seed_zeros_evaluation_draw_shares_its_board_and_one_on_another_does_not(corpus):
    """relative_depth's seed draws its pairs too: a sweep pins them to seed 0's (`pairs_seed: 0`), which keeps the
    replicate on the seed-0 row's board; a replicate scored on other pairs is another evaluation."""
    from harness.leaderboard.queries.comparability import comparability_key, is_seed_replicate

    base = classification("resnet50", "5a0e", top1=0.9120, top5=0.9971)

    def replicate(**params):
        return base.model_copy(update={"seed": 1, "protocol_params": {**base.protocol_params, "seed": 1, **params}})

    assert is_seed_replicate(replicate(pairs_seed=0))
    assert comparability_key(replicate(pairs_seed=0)) == comparability_key(base)
    assert comparability_key(replicate(pairs_seed=1)) != comparability_key(base)
    # a seed-0 run that names its draw is not a replicate and keeps the parameter in its key
    named = base.model_copy(update={"protocol_params": {**base.protocol_params, "pairs_seed": 0}})
    assert comparability_key(named) != comparability_key(base)


def test_seed_replicates_stay_off_the_board_and_give_its_seed_spread(corpus):
    """A seed sweep's runs (protocol_params.seed set) share their seed-0 row's comparability key, are on no board
    (the board keeps its rows and ranks), and the board's seed spread is the largest standard deviation over a
    swept row's seeds."""
    from harness.leaderboard.queries.comparability import comparability_key, is_seed_replicate
    from harness.leaderboard.queries.replicates import seed_spreads

    base = classification("resnet50", "5a0e", top1=0.9120, top5=0.9971)
    replicates = [
        base.model_copy(update={"run_id": f"resnet50-classification-cifar10-seed{seed}", "seed": seed,
                                "protocol_params": {**base.protocol_params, "seed": seed},
                                "metrics": {"top1": top1, "top5": 0.99}})
        for seed, top1 in ((1, 0.9080), (2, 0.9150))]
    assert all(is_seed_replicate(r) and comparability_key(r) == comparability_key(base) for r in replicates)
    before = boards(connect_corpus(corpus))
    con = connect_corpus([*corpus, *replicates])
    after = boards(con)
    assert [[row["run_id"] for row in b["rows"]] for b in after] == [[row["run_id"] for row in b["rows"]]
                                                                     for b in before]
    spreads = seed_spreads(con)
    assert list(spreads) == [comparability_key(base)]
    [row] = spreads[comparability_key(base)].rows
    assert row.backbone_name == "resnet50" and row.seeds == [0, 1, 2]
    assert row.sd == pytest.approx(float(np.std([0.9120, 0.9080, 0.9150], ddof=1)))
