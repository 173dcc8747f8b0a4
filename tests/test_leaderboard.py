"""The leaderboard: DuckDB load, ranking, comparability, deterministic pages, stale-page removal, mkdocs."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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
from harness.records import BackboneInfo, DatasetInfo, Environment, Failure, Record

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


def depth(name: str, identity: str, rmse: float, delta1: float) -> Record:
    return Record(
        run_id=f"{name}-depth-nyuv2", backbone=backbone(name, identity), backbone_name=name, task="depth",
        level="mid", protocol="depth-probe3d/v1", protocol_params={"bins": 256, "epochs": 10},
        dataset=NYU, pooling_requested="default", pooling_resolved=None, feature_mode="dense",
        layers=[-1], precision="fp32", image_size=224, seed=0, metrics={"rmse": rmse, "delta1": delta1},
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
    assert "| control | [resnet18@random](../backbones/resnet18-at-random.md) | 0.9500 | 0.9800 |" in page


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
    message = line.split(" | ")[-1].removesuffix(" |")
    assert message.endswith("...") and len(message.replace("\\|", "|")) == 200


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
        "layers differs (null vs [-1])",
    ):
        assert part in message
    assert "precision" not in message and "image_size" not in message
    check_comparable(corpus[:5])  # one board: no error
    assert comparability_key(corpus[0]) == comparability_key(corpus[3]) != comparability_key(corpus[5])


def test_rendering_is_deterministic(corpus):
    pages = rendered_pages(corpus)
    assert pages == rendered_pages(corpus)
    shuffled = list(corpus)
    random.Random(7).shuffle(shuffled)
    assert rendered_pages(shuffled) == pages
    assert sorted(pages) == [
        "backbones/convnext_tiny.md", "backbones/dinov2_vitb14.md", "backbones/dinov2_vits14.md",
        "backbones/resnet18-at-random.md", "backbones/resnet18.md", "backbones/resnet50.md",
        "index.md", "tasks/classification.md", "tasks/depth.md",
    ]
    assert all(text.startswith(GENERATED_HEADER + "\n") for text in pages.values())


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
    assert hand_written.read_text() == "# Notes on tasks\n"
    assert docs / "tasks" / "classification.md" in written


def test_mkdocs_builds_strict(corpus, tmp_path):
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    hook = Path("harness/leaderboard/mkdocs_hooks.py")  # mkdocs.yml names it relative to itself
    (tmp_path / hook).parent.mkdir(parents=True)
    shutil.copy(REPO / hook, tmp_path / hook)
    docs = tmp_path / "docs"
    render_site(corpus, docs)
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
