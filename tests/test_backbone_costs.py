"""Cost beside score (issue 49): counting is deterministic and the committed results file holds the count, the
loader reads the newest file per architecture, the Pareto front, and a level's cost section and chart and a board
row's cost cell built from a small synthetic corpus."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.leaderboard import connect_corpus
from harness.leaderboard.figures.costs import log_ticks
from harness.leaderboard.sections.costs import (
    backbone_cost_line,
    board_cost_cell,
    device_text,
    level_cost_figures,
    level_costs,
    render_level_costs,
)
from harness.leaderboard.sitemap import level_cost_figure_path as figure_path
from harness.leaderboard.sources.costs import BackboneCost, architecture, backbone_costs, cost_cell, pareto_front
from harness.leaderboard.statistics.analysis import analyse
from harness.runs.records import BackboneInfo, DatasetInfo, Environment, Record
from harness.runs.samples import write_samples

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
DEVICE = "cpu:Intel(R) Xeon(R) Processor:avx2,avx512f:2threads"


def _benchmark():
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))  # the script imports its runner as the scripts do, `from runner import`
    spec = importlib.util.spec_from_file_location("backbone_costs", BENCHMARKS / "backbone_costs.py")
    module = sys.modules.setdefault("backbone_costs", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


# -- counting ----------------------------------------------------------------------------------------------------


def test_a_fresh_count_equals_the_committed_results_file():
    from harness.backbones import create_backbone

    costs = backbone_costs(ROOT)
    if "cifar_resnet20" not in costs:
        pytest.fail("no committed benchmarks/results/backbone_costs-*.json costs cifar_resnet20: run "
                    "benchmarks/backbone_costs.py")
    bench = _benchmark()
    assert bench.architectures()["cifar_resnet20"] == "cifar_resnet20@random"
    backbone = create_backbone("cifar_resnet20@random")
    committed = costs["cifar_resnet20"]
    assert bench.parameter_count(backbone) == committed.parameters == 269_722  # He et al.'s 0.27M
    assert bench.flop_count(backbone) == bench.flop_count(backbone) == committed.flops
    assert committed.input == backbone.preprocess.crop == 32
    assert committed.images_per_s and committed.images_per_s > 0 and committed.device.startswith("cpu:")


def test_every_registry_architecture_is_costed_or_its_skip_noted():
    bench = _benchmark()
    costs = backbone_costs(ROOT)
    if not costs:
        pytest.fail("no committed backbone_costs results file")
    (path,) = {c.path for c in costs.values()}
    notes = " ".join(json.loads((ROOT / path).read_text())["notes"])
    for arch, name in bench.architectures().items():
        assert arch in costs or f"{name}: skipped" in notes, arch


# -- the loader and the front -------------------------------------------------------------------------------------


def _results(when: str, archs: dict[str, tuple[int, int, float]]) -> dict:
    measurements = []
    for arch, (parameters, flops, rate) in archs.items():
        details = {"backbone": f"{arch}@random", "input": 224}
        measurements += [
            {"name": f"{arch} parameters", "unit": "parameters", "samples": [parameters], "median": parameters,
             "min": parameters, "max": parameters, "details": details},
            {"name": f"{arch} GFLOP per image", "unit": "GFLOP", "samples": [flops / 1e9], "median": flops / 1e9,
             "min": flops / 1e9, "max": flops / 1e9, "details": {**details, "flops": flops}},
            {"name": f"{arch} extraction", "unit": "img/s", "samples": [rate], "median": rate, "min": rate,
             "max": rate, "details": {**details, "batch": 8, "device": DEVICE}}]
    return {"bench": "backbone_costs", "when": when, "measurements": measurements}


def write_costs(root: Path, files: dict[str, dict]) -> None:
    folder = root / "benchmarks" / "results"
    folder.mkdir(parents=True, exist_ok=True)
    for machine, data in files.items():
        (folder / f"backbone_costs-{machine}.json").write_text(json.dumps({**data, "machine": machine}))


def test_the_loader_takes_each_architecture_from_the_newest_file(tmp_path):
    write_costs(tmp_path, {
        "a-old": _results("2026-01-01T00:00:00Z", {"resnet18": (11_689_512, 3_627_000_000, 10.0),
                                                   "sobel": (0, 14_450_688, 250.0)}),
        "b-new": _results("2026-02-01T00:00:00Z", {"resnet18": (11_689_512, 3_627_000_000, 60.0)}),
    })
    costs = backbone_costs(tmp_path)
    assert sorted(costs) == ["resnet18", "sobel"]
    assert costs["resnet18"].images_per_s == 60.0 and costs["resnet18"].path.endswith("b-new.json")
    assert costs["sobel"].images_per_s == 250.0
    assert architecture("resnet18@random") == architecture("resnet18.random") == "resnet18"
    assert cost_cell(costs["resnet18"]) == "11.7M · 3.6 GF · 60 img/s"
    assert cost_cell(costs["sobel"]) == "0 · 0.014 GF · 250 img/s"
    assert cost_cell(None) == "n/a" and backbone_costs(tmp_path / "nowhere") == {}
    assert device_text(DEVICE) == "Intel(R) Xeon(R) Processor, 2 threads"


def test_pareto_front_on_a_hand_made_example():
    #          cost, score
    points = [(1.0, 0.50),   # 0: cheapest: on the front
              (2.0, 0.70),   # 1: better for more: on the front
              (2.0, 0.60),   # 2: as costly as 1 and worse: beaten by 1
              (3.0, 0.70),   # 3: no better than 1 and costlier: beaten
              (5.0, 0.90),   # 4: best: on the front
              (5.0, 0.90),   # 5: equal to 4: both on it
              (0.5, 0.10)]   # 6: cheapest of all: on the front
    assert pareto_front(points, higher_is_better=True) == [6, 0, 1, 4, 5]
    # lower-is-better scores (normalised ranks): flipping every score flips which points beat which
    flipped = [(cost, -score) for cost, score in points]
    assert pareto_front(flipped, higher_is_better=False) == [6, 0, 1, 4, 5]
    assert pareto_front([(1.0, 0.2), (2.0, 0.1)], higher_is_better=False) == [0, 1]
    assert pareto_front([(1.0, 0.2), (2.0, 0.3)], higher_is_better=False) == [0]
    assert pareto_front([], higher_is_better=True) == []


def test_log_ticks_cover_the_values():
    assert log_ticks(0.08, 60.0) == [0.01, 0.1, 1.0, 10.0, 100.0]
    assert log_ticks(0.77, 1.7) == [0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0]


# -- a synthetic corpus's pages ----------------------------------------------------------------------------------

PREPROCESS = {"library": "pillow", "resize": 224, "crop": 224, "interpolation": "bicubic",
              "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}


def classified(name: str, root: Path, correct: np.ndarray, dataset: str) -> Record:
    ids = [f"{'cat' if i % 2 else 'dog'}/{i:04d}.png" for i in range(len(correct))]
    run_id = f"{name}-classification-{dataset}"
    relative = Path("results") / f"{run_id}.samples.csv"
    info = write_samples(root / relative, ids, {"top1": correct}, "image").model_copy(update={"path": str(relative)})
    control = name.endswith("@random")
    weights = ({"kind": "random", "seed": 0} if control else
               {"kind": "pretrained", "source": "hf-hub", "location": f"timm/{name}", "revision": "0" * 40,
                "filename": "model.safetensors", "file_sha256": "ab" * 32})
    return Record(
        run_id=run_id, backbone=BackboneInfo(name=name, identity=name[:4] + "0000", control=control, weights=weights,
                                             architecture={"family": "timm", "model": name}, preprocess=PREPROCESS),
        backbone_name=name, task="classification", level="high", protocol="linear-probe-adamw/v1",
        protocol_params={"epochs": 30, "lr": 0.001},
        dataset=DatasetInfo(name=dataset, identity=(dataset * 16)[:16], split="val", size=len(correct)),
        pooling_requested="default", pooling_resolved="avg", feature_mode="pooled", layers=None, precision="fp32",
        image_size=224, seed=0, metrics={"top1": float(np.mean(correct))}, headline_metric="top1",
        higher_is_better={"top1": True}, tolerances={"top1": 0.0}, status="ok", duration_s=1.0,
        environment=Environment(harness_version="0.1.0", git_commit="3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39",
                                git_dirty=False, python="3.11.9", torch="2.14.1", timm="1.0.20",
                                open_clip="3.0.0", numpy="2.4.6", device=DEVICE),
        samples=info)


def scores(p: float, seed: int, n: int = 200) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < p).astype(np.float64)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """Two high-level boards: a cheap weak row, a costly strong one, a costly weak one (off the front), a row on
    one board only, and a control; costs for all but `uncosted`."""
    root = tmp_path_factory.mktemp("costs")
    quality = {"cheap": 0.75, "strong": 0.95, "heavy": 0.7, "resnet18@random": 0.6, "uncosted": 0.8}
    records = [classified(name, root, scores(p, seed + 10 * d), dataset)
               for d, dataset in enumerate(("shapes", "textures"))
               for seed, (name, p) in enumerate(quality.items())]
    records.append(classified("partial", root, scores(0.9, 99), "shapes"))
    write_costs(root, {"m": _results("2026-02-01T00:00:00Z", {
        "cheap": (4_650_000, 770_000_000, 64.0), "strong": (25_560_000, 8_170_000_000, 24.0),
        "heavy": (85_700_000, 43_900_000_000, 5.5), "resnet18": (11_690_000, 3_630_000_000, 61.0),
        "partial": (1_000_000, 100_000_000, 500.0)})})
    analysis = analyse(connect_corpus(records), records, root)
    return analysis, backbone_costs(root)


def test_a_level_plots_the_rows_on_every_board_with_the_front(synthetic):
    analysis, costs = synthetic
    found = level_costs("high", analysis, costs)
    assert found.boards == 2
    assert [(p.label, p.front) for p in found.points] == [("cheap", True), ("strong", True), ("heavy", False)]
    assert sorted(found.left_out) == ["partial (1 of 2 boards)", "uncosted (no cost measured)"]
    strong = next(p for p in found.points if p.label == "strong")
    assert strong.score == 0.0  # first on both boards


def test_the_level_section_shows_cost_and_the_chart(synthetic):
    analysis, costs = synthetic
    text = "\n".join(render_level_costs("high", analysis, costs))
    assert "## Score against cost { #cost }" in text
    assert f"(../{figure_path('high')}){{ .vb-figure }}" in text
    for point, cells in (("cheap", "4.7M | 0.77 @ 224² | 64 | yes"), ("heavy", "85.7M | 44 @ 224² | 5.5 | ")):
        ranks = [c["normalised_rank"] for (name, _, _), c in analysis.cells.items() if name == point]
        assert f"| [{point}](../backbones/{point}.md) | {sum(ranks) / 2:.2f} | {cells} |" in text
    assert "Intel(R) Xeon(R) Processor, 2 threads" in text and "backbone_costs-m.json" in text
    assert "partial (1 of 2 boards)" in text and "uncosted (no cost measured)" in text
    (svg,) = level_cost_figures(["high", "low"], analysis, costs).values()
    tips = re.findall(r"<circle [^>]*><title>([^<]+)</title></circle>", svg)
    assert [t.split(":")[0] for t in tips] == ["cheap", "strong", "heavy"]
    assert sum("on the Pareto front" in t for t in tips) == 2
    assert svg.count("<polyline") == 1 and "stroke-dasharray" in svg  # the front's staircase
    assert svg == level_cost_figures(["high"], analysis, costs)[figure_path("high")]  # same bytes twice
    assert render_level_costs("high", analysis, {})[2].startswith("No cost measured yet")


def test_board_rows_and_backbone_pages_show_the_cost(synthetic):
    _, costs = synthetic
    assert board_cost_cell("resnet18@random", costs) == "11.7M · 3.6 GF · 61 img/s"
    assert board_cost_cell("uncosted", costs) == "n/a"
    (line, _) = backbone_cost_line("cheap", costs)
    assert "4.7M parameters, 0.77 GFLOPs per 224² image, 64 img/s" in line
    assert backbone_cost_line("uncosted", costs) == []


def test_a_cost_reads_the_same_from_its_dataclass():
    cost = BackboneCost("x", 269_722, 81_100_800, 32, 1115.4, DEVICE, "p.json")
    assert cost_cell(cost) == "0.27M · 0.081 GF · 1115 img/s"


def test_the_rendered_site_shows_cost_on_boards_level_pages_and_backbone_pages(tmp_path):
    from harness.leaderboard import rendered_pages

    records = [classified(name, tmp_path, scores(p, seed), "shapes")
               for seed, (name, p) in enumerate({"cheap": 0.75, "strong": 0.95, "resnet18@random": 0.6}.items())]
    write_costs(tmp_path, {"m": _results("2026-02-01T00:00:00Z", {
        "cheap": (4_650_000, 770_000_000, 64.0), "strong": (25_560_000, 8_170_000_000, 24.0),
        "resnet18": (11_690_000, 3_630_000_000, 61.0)})})
    pages = rendered_pages(records, tmp_path)
    board = pages["tasks/classification.md"]
    header = next(line for line in board.splitlines() if line.startswith("| Rank |"))
    assert header.split(" | ")[-2:] == ["Cost", "Run |"]
    assert "| 4.7M · 0.77 GF · 64 img/s | [" in board and "| 11.7M · 3.6 GF · 61 img/s | [" in board
    level = pages["levels/high.md"]
    assert "## Score against cost { #cost }" in level and f"(../{figure_path('high')}){{ .vb-figure }}" in level
    assert "on the Pareto front" in pages[figure_path("high")]
    assert "4.7M parameters, 0.77 GFLOPs per 224² image" in pages["backbones/cheap.md"]
    # without a results file every cost shows as missing and no chart is drawn
    (tmp_path / "benchmarks" / "results" / "backbone_costs-m.json").unlink()
    pages = rendered_pages(records, tmp_path)
    assert figure_path("high") not in pages and "No cost measured yet" in pages["levels/high.md"]
