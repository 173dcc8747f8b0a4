"""Board rows are (backbone, layer set); boards are keyed without layers or input size; board codes come from
the key; the cross-task table and the compare page. Synthetic records only: the committed corpus changes."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from harness.leaderboard import boards, comparability_key, connect_corpus, rendered_pages
from harness.leaderboard.queries.fewshot import curves
from harness.leaderboard.statistics.analysis import board_codes
from harness.runs.records import BackboneInfo, DatasetInfo, Environment, Record
from harness.runs.samples import write_samples

ENVIRONMENT = Environment(
    harness_version="0.1.0", git_commit="0" * 40, git_dirty=False, python="3.11.9", torch="2.14.1",
    timm="1.0.20", open_clip="3.0.0", numpy="2.4.6", device="cpu",
)
SCENES = DatasetInfo(name="scenes", identity="5ce9e5ce9e5ce9e5", split="val", size=40)
CIFAR = DatasetInfo(name="cifar10", identity="c1f4a10e5d0b7a21", split="val", size=400)


def backbone(name: str, crop: int = 224) -> BackboneInfo:
    return BackboneInfo(
        name=name, identity=f"{name}-{crop}", control=name.endswith("@random"),
        weights={"kind": "random" if name.endswith("@random") else "pretrained"},
        architecture={"model": name.removesuffix("@random")},
        preprocess={"crop": crop, "resize": crop, "mean": [0.5] * 3, "std": [0.5] * 3},
    )


def depth(name: str, delta1: float, layers: list[int] | None = None, crop: int = 224, k_shot: int | None = None,
          seed: int = 0) -> Record:
    suffix = "" if layers is None else ".L" + "-".join(str(layer) for layer in layers)
    shot = "" if k_shot is None else f".k{k_shot}.s{seed}"
    return Record(
        run_id=f"g-depth@{name.replace('@', '.')}{suffix}{shot}", backbone=backbone(name, crop), backbone_name=name,
        task="depth", level="mid", protocol="probe3d-depth/v2",
        protocol_params={"epochs": 30, **({"k_shot_unit": "images"} if k_shot else {})},
        dataset=SCENES, pooling_requested="default", pooling_resolved=None, feature_mode="dense", layers=layers,
        precision="fp32", image_size=crop, seed=seed, metrics={"delta1": delta1}, headline_metric="delta1",
        higher_is_better={"delta1": True}, tolerances={"delta1": 0.0}, status="ok", duration_s=1.0,
        environment=ENVIRONMENT, k_shot=k_shot,
    )


def classification(name: str, top1: float, crop: int = 224) -> Record:
    return Record(
        run_id=f"g-classification@{name.replace('@', '.')}", backbone=backbone(name, crop), backbone_name=name,
        task="classification", level="high", protocol="linear-probe-adamw/v2", protocol_params={"epochs": 100},
        dataset=CIFAR, pooling_requested="default", pooling_resolved="avg", feature_mode="pooled", layers=None,
        precision="fp32", image_size=crop, seed=0, metrics={"top1": top1}, headline_metric="top1",
        higher_is_better={"top1": True}, tolerances={"top1": 0.0}, status="ok", duration_s=1.0,
        environment=ENVIRONMENT,
    )


@pytest.fixture
def layered() -> list[Record]:
    """efficientnet_lite0 probed for depth at three layer sets, beside two other backbones and a control;
    efficientnet_lite1 at its own 240 px input; classification (pooled, no layers) for three of them."""
    return [
        depth("efficientnet_lite0", 0.55),
        depth("efficientnet_lite0", 0.61, layers=[3]),
        depth("efficientnet_lite0", 0.58, layers=[1, 2, 3]),
        depth("efficientnet_lite1", 0.57, crop=240),
        depth("resnet18", 0.50),
        depth("resnet18@random", 0.40),
        classification("efficientnet_lite0", 0.80),
        classification("efficientnet_lite1", 0.82, crop=240),
        classification("resnet18", 0.70),
    ]


def rows_of(page: str, start: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in page.splitlines()
            if line.startswith(start)]


def test_layer_sets_and_input_sizes_share_one_board(layered):
    depth_boards = [b for b in boards(connect_corpus(layered)) if b["task"] == "depth"]
    (board,) = depth_boards  # neither layers nor image size splits it
    assert len({comparability_key(r) for r in layered if r.task == "depth"}) == 1
    assert board["image_sizes"] == [224, 240] and board["layer_sets"] == ["last layer", "layers 1,2,3", "layers 3"]
    ranked = [(r["row_label"], r["rank"]) for r in board["rows"]]
    # A backbone with several layer sets on the board is labelled by them; one with a single set by its name.
    assert ranked == [
        ("efficientnet_lite0 · layers 3", 1), ("efficientnet_lite0 · layers 1,2,3", 2), ("efficientnet_lite1", 3),
        ("efficientnet_lite0 · last layer", 4), ("resnet18", 5), ("resnet18@random", None),
    ]
    assert board["rows"][3]["normalised_rank"] == pytest.approx(3 / 4)  # every row counts in the scale


def test_task_page_labels_rows_and_folds_the_hashes_away(layered):
    page = rendered_pages(layered)["tasks/depth.md"]
    key = comparability_key(layered[0])
    assert f"## depth on scenes (val), probe3d-depth/v2 {{ #board-{key} }}" in page
    assert f"Board **B-{key[:4]}**. Ranked by **delta1** (higher is better)" in page
    rows = rows_of(page, "| 1 |")
    assert rows[0][:2] == ["1", "[efficientnet_lite0 · layers 3](../backbones/efficientnet_lite0.md)"]
    assert rows[0][3] == "n/a"  # the tie group, after the headline
    # The hashes and raw parameters sit in a collapsed block, not in the heading or the prose above the table.
    heading = next(line for line in page.splitlines() if line.startswith("## depth on"))
    assert key not in heading.split("{")[0] and SCENES.identity not in page.split("??? info")[0]
    assert f'??? info "What defines board B-{key[:4]}' in page
    assert f"    | comparability key | `{key}` |" in page and f"    | dataset identity | `{SCENES.identity}` |" in page
    assert "    | input sizes | 224 px, 240 px (each backbone's own, not part of the key) |" in page


def test_cross_task_rows_and_means(layered):
    index = rendered_pages(layered)["index.md"]

    def row(label: str) -> list[str]:
        (line,) = [line for line in index.splitlines()
                   if line.startswith(f"| [{label}](backbones/") and "{ data-control=" in line]
        return [c.strip() for c in line.strip().strip("|").split(" | ")]

    # The default layer set spans pooled and dense boards: a complete row with a mean.
    default = row("efficientnet_lite0 · last layer")
    assert default[2] == "2 of 2" and re.fullmatch(r"\d\.\d\d", default[1])
    assert default[1] == f"{(0.5 + 0.75) / 2:.2f}"  # classification: 2nd of 3; depth: 4th of 5
    # A layer set probed on dense boards only: its mean over the one board it has, saying so, and what it lacks.
    layers3 = row("efficientnet_lite0 · layers 3")
    depth_code = f"B-{comparability_key(layered[0])[:4]}"
    assert layers3[1:3] == ["0.00", "1 of 2"] and layers3[-1] == "no result on classification (cifar10)"
    assert row("efficientnet_lite1")[1:3] == ["0.25", "2 of 2"]  # (0 + 0.5) / 2
    # Column heads carry level and dataset for the page's filter.
    head = f'data-level="mid" data-dataset="scenes" data-code="{depth_code}" data-label="depth (scenes)" }}'
    assert "{ .vb-board " + head in index


def test_backbone_page_has_a_per_layer_profile(layered):
    pages = rendered_pages(layered)
    page = pages["backbones/efficientnet_lite0.md"]
    assert "## Per-layer profile { #per-layer-profile }" in page
    profile = page.split("## Per-layer profile")[1]
    (header,) = [line for line in profile.splitlines() if line.startswith("| Board |")]
    assert header == "| Board | Headline | last layer | layers 1,2,3 | layers 3 |"  # default first, then by layer
    classification_row, depth_row = rows_of(profile, "| [B-")  # boards in level order: high, then mid
    assert depth_row[2:] == ["0.5500 (rank 4)", "0.5800 (rank 2)", "**0.6100 (rank 1)**"]
    assert classification_row[2:] == ["0.8000 (rank 2)", "—", "—"]  # pooled: the default layer set only
    assert "Per-layer profile" not in pages["backbones/resnet18.md"]  # one layer set: nothing to profile


def test_learning_curves_draw_a_line_per_layer_set():
    records = [depth("efficientnet_lite0", 0.3 + 0.01 * seed + 0.05 * k, layers=layers, k_shot=k, seed=seed)
               for layers in (None, [3]) for k in (1, 2) for seed in (0, 1)]
    (curve,) = curves(connect_corpus(records))
    assert [line["row_label"] for line in curve["lines"]] == [
        "efficientnet_lite0 · last layer", "efficientnet_lite0 · layers 3"]  # the default first, then by layer
    assert all(len(line["points"]) == 2 for line in curve["lines"])
    # The backbone page lists them per curve and layer set, not per (k, seed) run.
    page = rendered_pages(records)["backbones/efficientnet_lite0.md"]
    few = page.split("## Few-shot runs")[1]
    assert [r[3:8] for r in rows_of(few, "| [depth]")] == [["last layer", "1, 2", "0, 1", "4", "0"],
                                                          ["layers 3", "1, 2", "0, 1", "4", "0"]]
    assert "No full-split runs." in page and "k=1, seed" not in page


def test_board_codes_come_from_the_key_and_never_renumber(layered):
    before = board_codes(sorted({comparability_key(r) for r in layered}))
    assert all(code == f"B-{key[:4]}" for key, code in before.items())
    extra = classification("resnet18", 0.7).model_copy(update={"run_id": "h-classification@resnet18",
                                                              "dataset": CIFAR.model_copy(update={"split": "test"})})
    after = board_codes(sorted({comparability_key(r) for r in [*layered, extra]}))
    assert {key: after[key] for key in before} == before  # a new board leaves every other code alone
    # Only clashing prefixes grow, until they differ.
    assert board_codes(["abcd1f", "abcd2f", "ffff00"]) == {"abcd1f": "B-abcd1", "abcd2f": "B-abcd2", "ffff00": "B-ffff"}


# -- the compare page ----------------------------------------------------------------------------------


def with_samples(record: Record, root: Path, scores: np.ndarray) -> Record:
    relative = Path("results") / f"{record.run_id}.samples.csv"
    ids = [f"val/{i:03d}" for i in range(len(scores))]
    info = write_samples(root / relative, ids, {"delta1": scores}, "image").model_copy(update={"path": str(relative)})
    return record.model_copy(update={"samples": info, "metrics": {"delta1": float(np.mean(scores))}})


def test_compare_page_gives_the_boards_verdicts(tmp_path):
    rng = np.random.default_rng(0)
    same = (rng.random(300) < 0.6).astype(float)
    records = [
        with_samples(depth("alpha", 0.0), tmp_path, (rng.random(300) < 0.95).astype(float)),
        with_samples(depth("beta", 0.0), tmp_path, same),
        with_samples(depth("gamma", 0.0), tmp_path, same.copy()),  # identical scores: tied with beta
        with_samples(depth("beta@random", 0.0), tmp_path, (rng.random(300) < 0.2).astype(float)),
    ]
    pages = rendered_pages(records, tmp_path)
    page = pages["compare.md"]
    rows = {(r[2], r[3]): r for r in rows_of(page, "| [B-")}
    names = {(a.split("]")[0][1:], b.split("]")[0][1:]): row for (a, b), row in rows.items()}
    assert sorted(names) == [("alpha", "beta"), ("alpha", "beta@random"), ("alpha", "gamma"), ("beta", "beta@random"),
                             ("beta", "gamma"), ("beta@random", "gamma")]  # one orientation: A's label first
    assert names["alpha", "beta"][-1] == "alpha better" and float(names["alpha", "beta"][-2]) < 0.05
    assert names["beta", "gamma"][-1] == "tied"
    assert names["beta", "gamma"][6] == "+0.0000 [+0.0000, +0.0000]"
    assert names["beta", "beta@random"][-1] == "not tested: a control is never ranked (interval only)"
    assert re.fullmatch(r"\+0\.\d{4} \[\+0\.\d{4}, \+0\.\d{4}\]", names["beta", "beta@random"][6])
    assert names["beta", "beta@random"][7] == "n/a"
    # The verdicts agree with the board's tie groups: beta and gamma share one, alpha has its own.
    board = rendered_pages(records, tmp_path)["tasks/depth.md"]
    groups = {r[1].split("]")[0][1:]: r[3] for r in rows_of(board, "| 1 |") + rows_of(board, "| 2 |")}
    assert groups["alpha"] == "A" and groups["beta"] == groups["gamma"] == "B"
    # What compare.js reads: the pair and its winner on the row's first link.
    assert '{ .vb-pair data-a="alpha" data-b="beta" data-winner="a" }' in page
    assert '{ .vb-pair data-a="beta" data-b="gamma" data-winner="tie" }' in page


def test_compare_without_samples_shows_values_only(layered):
    page = rendered_pages(layered)["compare.md"]
    (row,) = [r for r in rows_of(page, "| [B-") if "[resnet18](" in r[2] and "[resnet18@random](" in r[3]]
    assert row[4:] == ["0.5000", "0.4000", "+0.1000", "n/a", "no per-sample scores: no interval, no test"]
