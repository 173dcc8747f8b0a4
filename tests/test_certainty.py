"""Every verdict earns its certainty (issue 46): floors that gate ranks, the smallest difference a board resolves,
verdicts that respect the cross-CPU tolerance, boards that say what they mix or do not measure, and the home page's
overall standing with a bootstrap interval over boards and coverage kept apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.leaderboard import boards, connect_corpus, rendered_pages
from harness.leaderboard.statistics.analysis import (
    BETTER,
    SEED_MARGIN,
    TIED,
    TIED_SEED,
    TIED_TOLERANCE,
    CrossTaskRow,
    analyse,
    device_kind,
    resolvable_difference,
    standing,
    verdict,
)
from harness.leaderboard.statistics.bootstrap import PairedTest
from harness.leaderboard.statistics.floors import NORMALS_PRIOR, board_floor, clears
from harness.runs.records import BackboneInfo, DatasetInfo, Environment, Record
from harness.runs.samples import write_samples

XEON = "cpu:Intel(R) Xeon(R) Processor:avx2,avx512f:2threads"
EPYC = "cpu:AMD EPYC:avx2,avx512f:2threads"
DATASET = DatasetInfo(name="shapes", identity="5a5e0c1d2e3f4a5b", split="val", size=400)
PREPROCESS = {"library": "pillow", "resize": 224, "crop": 224, "interpolation": "bicubic",
              "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}


def environment(device: str = XEON) -> Environment:
    return Environment(harness_version="0.1.0", git_commit="3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39",
                       git_dirty=False, python="3.11.9", torch="2.14.1", timm="1.0.20", open_clip="3.0.0",
                       numpy="2.4.6", device=device)


def backbone(name: str) -> BackboneInfo:
    weights = {"kind": "pretrained", "source": "hf-hub", "location": f"timm/{name}", "revision": "0" * 40,
               "filename": "model.safetensors", "file_sha256": "ab" * 32}
    return BackboneInfo(name=name, identity=name[:4] + "0000", control=False, weights=weights,
                        architecture={"family": "timm", "model": name}, preprocess=PREPROCESS)


def classified(name: str, root: Path, correct: np.ndarray, *, tolerance: float = 0.0, device: str = XEON,
               params: dict | None = None, dataset: DatasetInfo = DATASET) -> Record:
    """A two-class classification run (ids name the class by folder, so the uniform guess is 0.5) scored by
    `correct` per image."""
    ids = [f"{'cat' if i % 2 else 'dog'}/{i:04d}.png" for i in range(len(correct))]
    run_id = f"{name}-classification-{dataset.name}"
    relative = Path("results") / f"{run_id}.samples.csv"
    info = write_samples(root / relative, ids, {"top1": correct}, "image").model_copy(update={"path": str(relative)})
    return Record(
        run_id=run_id, backbone=backbone(name), backbone_name=name, task="classification", level="high",
        protocol="linear-probe-adamw/v1", protocol_params={"epochs": 30, "lr": 0.001} if params is None else params,
        dataset=dataset, pooling_requested="default", pooling_resolved="avg", feature_mode="pooled", layers=None,
        precision="fp32", image_size=224, seed=0, metrics={"top1": float(np.mean(correct))}, headline_metric="top1",
        higher_is_better={"top1": True}, tolerances={"top1": tolerance}, status="ok", duration_s=1.0,
        environment=environment(device), samples=info,
    )


def scores(p: float, seed: int, n: int = 400) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < p).astype(np.float64)


def board_page(records: list[Record], root: Path) -> list[str]:
    return rendered_pages(records, root)["tasks/classification.md"].splitlines()


def row(lines: list[str], name: str) -> list[str]:
    (line,) = [line for line in lines if line.startswith("| ") and f"[{name}](" in line]
    return [part.strip() for part in line.strip("|").split(" | ")]


# -- floors ------------------------------------------------------------------------------------------


def test_a_row_under_chance_is_shown_but_not_ranked(tmp_path):
    records = [classified("good", tmp_path, scores(0.9, 1)), classified("fair", tmp_path, scores(0.7, 2)),
               classified("blind", tmp_path, scores(0.3, 3))]
    (board,) = boards(connect_corpus(records))
    assert {r["backbone_name"]: r["rank"] for r in board["rows"]} == {"good": 1, "fair": 2, "blind": 3}  # no floor yet
    con = connect_corpus(records)
    analysis = analyse(con, records, tmp_path)
    (board,) = analysis.boards
    assert {r["backbone_name"]: (r["rank"], r["gated"]) for r in board["rows"]} == {
        "good": (1, False), "fair": (2, False), "blind": (None, True)}
    stats = analysis.stats[board["comparability_key"]]
    assert stats.floor is not None and stats.floor.value == 0.5 and stats.gated == ["blind"]
    assert stats.tested == [r.run_id for r in records[:2]]  # a gated row is in no paired test
    # in the cross-task table it counts as last, never as missing (scoring at chance must not help a mean)
    cell = analysis.cells["blind", "null", board["comparability_key"]]
    assert cell["gated"] and cell["rank"] is None and cell["normalised_rank"] == 1.0
    lines = board_page(records, tmp_path)
    assert row(lines, "blind")[0] == "under floor" and row(lines, "blind")[3] == "n/a"
    assert any(line.startswith("**Floor:**") and "chance (uniform guess)" in line and "0.5000" in line
               and "*under floor*): blind." in line for line in lines)
    assert not any("No row clears" in line for line in lines)


def test_a_board_where_no_row_clears_its_floor_says_so_and_leaves_the_cross_task_table(tmp_path):
    records = [classified("weak", tmp_path, scores(0.45, 1)), classified("weaker", tmp_path, scores(0.35, 2))]
    pages = rendered_pages(records, tmp_path)
    lines = pages["tasks/classification.md"].splitlines()
    heading = next(i for i, line in enumerate(lines) if line.startswith("## "))
    # at its top: before the board's own description
    assert lines[heading + 2] == '!!! warning "No row clears this board\'s floor"'
    assert row(lines, "weak")[0] == row(lines, "weaker")[0] == "under floor"
    assert "No board ranks a pretrained backbone yet." in pages["index.md"]


def test_floor_reads_recorded_image_blind_baselines():
    def board(headline: str, protocol: str, rows: list[dict]) -> dict:
        return {"headline_metric": headline, "higher_is_better": True, "protocol": protocol, "protocol_params": "{}",
                "metrics": [{"metric": headline, "higher_is_better": True}], "rows": rows}

    segmentation = board("iou", "dense-binary-segmentation/v2", [
        {"run_id": "a", "metrics": {"iou": 0.6, "baseline_iou": 0.25}},
        {"run_id": "b", "metrics": {"iou": 0.2, "baseline_iou": 0.25}}])
    floor = board_floor(segmentation, None, {})
    assert floor is not None and floor.value == 0.25 and "all-background" in floor.source
    assert not clears(0.2, floor, True) and clears(0.6, floor, True) and not clears(0.25, floor, True)
    disagreeing = board("iou", "dense-binary-segmentation/v2", [
        {"run_id": "a", "metrics": {"iou": 0.6, "baseline_iou": 0.25}},
        {"run_id": "b", "metrics": {"iou": 0.2, "baseline_iou": 0.3}}])
    assert board_floor(disagreeing, None, {}) is None  # runs that disagree on a target-only value give no floor


def test_a_recorded_image_blind_floor_is_a_row_of_the_board(tmp_path):
    """A binary segmentation's runs record the all-background prediction's IoU per image (`baseline_iou`): the board
    shows it as its floor row and does not rank a row that does not beat it."""
    empty = (np.arange(400) % 4 == 0).astype(np.float64)  # a quarter of the images have an empty mask
    records = []
    for name, p, seed in (("good", 0.9, 1), ("blind", 0.1, 2)):
        record = classified(name, tmp_path, scores(p, seed))
        run_id = f"{name}-generic_segmentation-shapes"
        relative = Path("results") / f"{run_id}.samples.csv"
        iou = scores(p, seed)
        info = write_samples(tmp_path / relative, [f"img/{i:04d}.png" for i in range(400)],
                             {"iou": iou, "baseline_iou": empty}, "image").model_copy(update={"path": str(relative)})
        records.append(record.model_copy(update={
            "run_id": run_id, "task": "generic_segmentation", "level": "mid",
            "protocol": "dense-binary-segmentation/v2", "feature_mode": "dense", "headline_metric": "iou",
            "metrics": {"iou": float(iou.mean()), "baseline_iou": float(empty.mean())},
            "higher_is_better": {"iou": True, "baseline_iou": True}, "tolerances": {}, "samples": info}))
    lines = rendered_pages(records, tmp_path)["tasks/generic_segmentation.md"].splitlines()
    (floor,) = [line for line in lines if line.startswith("| floor |")]
    assert "the all-background prediction | 0.2500 |" in floor
    assert row(lines, "good")[0] == "1" and row(lines, "blind")[0] == "under floor"


def test_normals_floor_is_the_prior_its_near_chance_warning_names():
    from harness.probes.dense.normals import HEADLINE, _near_chance

    (warning,) = _near_chance({HEADLINE: 0.4}, {HEADLINE: 0.62}, uncertainty=True)
    match = NORMALS_PRIOR.match(warning)
    assert match is not None and match["metric"] == HEADLINE and float(match["value"]) == 0.62
    board = {"headline_metric": HEADLINE, "higher_is_better": True, "protocol": "probe3d-surface-normal/v3",
             "protocol_params": "{}", "metrics": [{"metric": HEADLINE, "higher_is_better": True}],
             "rows": [{"run_id": "near", "metrics": {HEADLINE: 0.4}}, {"run_id": "far", "metrics": {HEADLINE: 0.8}}]}
    floor = board_floor(board, None, {"near": [warning], "far": []})
    # the prior beats the uniform direction's chance row, so it is the floor
    assert floor is not None and floor.value == 0.62 and "image-blind prior" in floor.source


# -- resolution, tolerance, devices, seeds -----------------------------------------------------------


def test_resolvable_difference_is_the_median_half_width():
    tests = [PairedTest(0.1, 0.0, 0.2, 0.01, 10), PairedTest(0.0, -0.05, 0.05, 1.0, 10),
             PairedTest(0.3, 0.1, 0.7, 0.001, 10)]
    assert resolvable_difference(tests) == pytest.approx(0.1)
    assert resolvable_difference([]) is None


def test_verdict_needs_the_test_and_a_difference_beyond_the_tolerance():
    resolved = PairedTest(0.02, 0.01, 0.03, 0.001, 400)
    assert verdict(resolved, 0.001, tolerance=0.0) == BETTER
    assert verdict(resolved, 0.001, tolerance=0.02) == TIED_TOLERANCE  # |difference| must exceed it
    assert verdict(resolved, 0.2, tolerance=0.0) == TIED
    assert verdict(resolved, 0.001, tolerance=0.0, seed_margin=0.02) == TIED_SEED  # the heads' seeds could do it
    assert verdict(resolved, 0.001, tolerance=0.0, seed_margin=0.019) == BETTER


def test_a_resolved_difference_within_the_seed_margin_is_tied_on_the_board(tmp_path):
    """A sweep measured the board's seed spread: a pair the paired test resolves is tied when its difference is
    within SEED_MARGIN × that spread (1.96 × √2 standard deviations), and the board says how large the margin is.
    The replicates carry their own per-sample files, as a real sweep's do: off the board, checked against their own
    metrics, with intervals on their run pages."""
    good, fair = scores(0.9, 1), scores(0.7, 2)
    difference = float(np.mean(good) - np.mean(fair))
    rows = [classified("good", tmp_path, good), classified("fair", tmp_path, fair)]

    def sweep(flips: int) -> list[Record]:
        """fair's replicates at seeds 1 and 2, `flips` of its samples turned right and wrong: its top1 ± flips/n."""
        replicates = []
        for seed, (was, now) in ((1, (0.0, 1.0)), (2, (1.0, 0.0))):
            correct = fair.copy()
            correct[np.flatnonzero(correct == was)[:flips]] = now
            run = classified(f"fair-seed{seed}-{flips}", tmp_path, correct)
            replicates.append(run.model_copy(update={
                "run_id": f"{rows[1].run_id}-seed{seed}-{flips}", "backbone": rows[1].backbone,
                "backbone_name": "fair", "seed": seed, "protocol_params": {**rows[1].protocol_params, "seed": seed}}))
        return replicates

    wide_flips = round(difference * len(fair))  # a spread equal to the difference: the margin is 2.77 × it
    narrow = board_page([*rows, *sweep(wide_flips // 10)], tmp_path)
    assert (row(narrow, "good")[3], row(narrow, "fair")[3]) == ("A", "B")
    wide_records = [*rows, *sweep(wide_flips)]
    wide = board_page(wide_records, tmp_path)
    assert (row(wide, "good")[3], row(wide, "fair")[3]) == ("A", "A")
    assert any(line.startswith("| good | fair |") and line.endswith("| yes: within seed spread |") for line in wide)
    (line,) = [line for line in wide if "**Seed spread:** up to" in line]
    assert f"exceeds {SEED_MARGIN * wide_flips / len(fair):.4f}" in line
    analysis = analyse(connect_corpus(wide_records), wide_records, tmp_path)
    assert all((wide_records[i].run_id, "top1") in analysis.intervals for i in (2, 3))  # the replicates' own


def test_a_resolved_difference_within_tolerance_is_tied_on_the_board(tmp_path):
    good, fair = scores(0.9, 1), scores(0.7, 2)
    difference = float(np.mean(good) - np.mean(fair))
    strict = [classified("good", tmp_path, good), classified("fair", tmp_path, fair)]
    lines = board_page(strict, tmp_path)
    assert (row(lines, "good")[3], row(lines, "fair")[3]) == ("A", "B")
    loose = [classified("good", tmp_path, good, tolerance=difference + 0.01), classified("fair", tmp_path, fair)]
    lines = board_page(loose, tmp_path)
    assert (row(lines, "good")[3], row(lines, "fair")[3]) == ("A", "A")
    assert any(line.startswith("| good | fair |") and line.endswith("| yes: within tolerance |") for line in lines)
    assert any("**Cross-CPU tolerance:**" in line for line in lines)


def test_a_board_mixing_device_kinds_says_so_at_its_top(tmp_path):
    same = [classified("good", tmp_path, scores(0.9, 1)),
            classified("fair", tmp_path, scores(0.7, 2), device=XEON.replace("2threads", "8threads"))]
    assert not any("kinds of device" in line for line in board_page(same, tmp_path))  # threads change no kernel
    mixed = [classified("good", tmp_path, scores(0.9, 1)), classified("fair", tmp_path, scores(0.7, 2), device=EPYC)]
    lines = board_page(mixed, tmp_path)
    heading = next(i for i, line in enumerate(lines) if line.startswith("## "))
    assert lines[heading + 2] == '!!! note "Rows computed on 2 kinds of device"'
    assert device_kind(EPYC) in lines[heading + 4] and device_kind(XEON) in lines[heading + 4]


def test_boards_that_train_a_head_say_the_seed_spread_is_not_measured(tmp_path):
    trained = [classified("good", tmp_path, scores(0.9, 1)), classified("fair", tmp_path, scores(0.7, 2))]
    assert sum("**Seed spread not measured:**" in line for line in board_page(trained, tmp_path)) == 1
    fixed = [classified("good", tmp_path, scores(0.9, 1), params={"k": 5}),
             classified("fair", tmp_path, scores(0.7, 2), params={"k": 5})]
    assert not any("Seed spread" in line for line in board_page(fixed, tmp_path))
    # a seed sweep measured it: the board says how large it is instead
    sweep = trained[1].model_copy(update={"run_id": trained[1].run_id + "-seed1", "seed": 1, "samples": None,
                                          "protocol_params": {**trained[1].protocol_params, "seed": 1},
                                          "metrics": {"top1": trained[1].metrics["top1"] - 0.02}})
    lines = board_page([*trained, sweep], tmp_path)
    assert not any("Seed spread not measured" in line for line in lines)
    (line,) = [line for line in lines if "**Seed spread:** up to" in line]
    assert f"up to {np.std([trained[1].metrics['top1'], sweep.metrics['top1']], ddof=1):.4f} in top1" in line


# -- overall standing --------------------------------------------------------------------------------


def _rows_and_cells(ranks: dict[str, list[float | None]], keys: list[str]):
    rows, cells = [], {}
    for name, values in ranks.items():
        present = [v for v in values if v is not None]
        missing = [k for k, v in zip(keys, values, strict=True) if v is None]
        rows.append(CrossTaskRow(name, "null", name, False, sum(present) / len(present), missing))
        cells.update({(name, "null", k): {"normalised_rank": v} for k, v in zip(keys, values, strict=True)
                      if v is not None})
    return sorted(rows, key=lambda r: (len(r.missing), r.aggregate)), cells


def test_standing_interval_is_over_boards_and_deterministic():
    keys = [f"{i:012x}" for i in range(8)]
    ranks = {"steady": [0.0, 0.1, 0.0, 0.2, 0.1, 0.0, 0.1, 0.0], "mixed": [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.5, 0.5],
             "last": [1.0, 1.0, 0.9, 1.0, 0.8, 1.0, 1.0, 1.0], "two": [0.0, 0.0, None, None, None, None, None, None]}
    rows, cells = _rows_and_cells(ranks, keys)
    first = standing(rows, keys, cells, resamples=500)
    assert first == standing(rows, keys, cells, resamples=500)  # seeded from the board keys alone
    assert standing(rows, list(reversed(keys)), cells, resamples=500) == first
    by_name = {s.row.label: s for s in first}
    for s in first:
        assert s.interval is not None and s.interval.low <= s.row.aggregate <= s.interval.high
    # a row equal on every board has no spread over boards; a row that swings has a wide one
    assert by_name["mixed"].interval.high - by_name["mixed"].interval.low > 0.3
    assert by_name["steady"].first > 0.95 and by_name["last"].first == 0.0
    # the two-board row is compared only with rows covering the same boards: alone in its tier, first always
    assert by_name["two"].tier == tuple(keys[2:]) and by_name["two"].covered == 2 and by_name["two"].first == 1.0


def test_home_page_puts_partial_coverage_apart(tmp_path):
    records = [classified("good", tmp_path, scores(0.9, 1)), classified("fair", tmp_path, scores(0.7, 2))]
    # a second board only "fair" is on: good's mean (0, best possible) is over one board, fair's (1 and 0) over two
    other = DatasetInfo(name="shapes2", identity="6b6f0c1d2e3f4a5b", split="val", size=400)
    extra = classified("fair", tmp_path, scores(0.8, 4), dataset=other)
    index = rendered_pages([*records, extra], tmp_path)["index.md"]
    standing_part = index.split("## Overall standing", 1)[1].split("## All boards at a glance", 1)[0]
    full, partial = standing_part.split("### Partial coverage")
    assert "[fair](backbones/fair.md)" in full and "[good](backbones/good.md)" not in full
    assert "[good](backbones/good.md)" in partial
    assert ("Best over all 2 boards: **fair**, mean normalised rank 0.50 [0.00, 1.00], the only row on every board, "
            "so compared with none.") in full
    assert "| 1 of 2 | alone on its boards |" in partial and "| 2 of 2 | alone on its boards |" in full
