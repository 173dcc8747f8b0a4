"""Cost beside score, as the records measured it (issue 49, item 6): the extract stage times a fixed batch of its
forward pass beside the features folder, every probe record that reads those features carries it, a re-run fills
a missing timing in and keeps one it has, a timing of another extraction is never read, and the boards' img/s is
the median over the extractions the records timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.core import paths
from harness.core.config import load_params
from harness.leaderboard import connect_corpus
from harness.leaderboard.queries.throughput import measured_rates
from harness.leaderboard.sections.costs import backbone_cost_line
from harness.leaderboard.sources.costs import BackboneCost, with_record_rates
from harness.runs import throughput
from harness.runs.feature_cache import read_extraction
from harness.runs.records import Throughput, read_records
from harness.stages import calls as stages

BACKBONE = "cifar_resnet20.random"


@pytest.fixture
def extracted(image_project):
    """The tiny project with its dataset prepared and its features extracted; returns (params, features folder)."""
    params = load_params()
    stages.prepare("tiny", params)
    stages.extract("g", BACKBONE, "tiny", params)
    return params, paths.features_dir("g", BACKBONE, "tiny")


def _timing(folder):
    return json.loads(throughput.path_of(folder).read_text())


def test_the_extract_stage_times_a_batch_beside_its_features_and_each_record_carries_it(extracted):
    params, folder = extracted
    measured = _timing(folder)
    assert measured["device"].startswith("cpu:") and measured["device"].endswith("threads")
    assert measured["batch"] == 4  # the tiny project's batch size: the extraction's own, under the CPU's cap of 8
    assert measured["images_per_s"] > 0
    assert measured["extraction"] == throughput.hash_json(read_extraction(folder))
    assert not any(p.name.endswith(throughput.SUFFIX) for p in folder.rglob("*"))  # outside the DVC out
    records = [stages.probe("g", task, BACKBONE, params)[0] for task in ("classification", "retrieval")]
    expected = Throughput(images_per_s=measured["images_per_s"], batch=4, device=measured["device"])
    assert [r.throughput for r in records] == [expected, expected]
    assert read_records(paths.record_path("g", "retrieval", BACKBONE))[0].throughput == expected


@pytest.mark.parametrize("spoil", ["another extraction", "garbage", "deleted"])
def test_a_timing_that_is_not_of_these_features_is_never_read_and_never_fails_a_run(extracted, spoil):
    params, folder = extracted
    timing = throughput.path_of(folder)
    if spoil == "another extraction":
        timing.write_text(json.dumps({**_timing(folder), "extraction": "0" * 16}))
    elif spoil == "garbage":
        timing.write_text("{not json")
    else:
        timing.unlink()
    [record] = stages.probe("g", "classification", BACKBONE, params)
    assert record.status == "ok" and record.throughput is None


def test_a_rerun_fills_a_missing_timing_in_and_keeps_the_timing_a_record_has(extracted, caplog):
    params, folder = extracted
    record_file = paths.record_path("g", "classification", BACKBONE)
    timing = throughput.path_of(folder)
    kept = timing.read_bytes()
    timing.unlink()
    [untimed] = stages.probe("g", "classification", BACKBONE, params)
    assert untimed.throughput is None
    timing.write_bytes(kept)
    [timed] = stages.probe("g", "classification", BACKBONE, params)  # reproduces every number, and timed it
    assert timed.throughput is not None and timed.metrics == untimed.metrics
    assert read_records(record_file) == [timed]
    written = record_file.read_bytes()
    timing.unlink()  # a run that timed nothing (features from elsewhere) keeps the record's timing
    with caplog.at_level("INFO", logger="visbench"):
        [again] = stages.probe("g", "classification", BACKBONE, params)
    assert "reproduced: kept the committed record" in caplog.text
    assert record_file.read_bytes() == written and again.throughput == timed.throughput


def test_an_extract_rerun_on_cached_features_times_the_batch_again(extracted, monkeypatch):
    params, folder = extracted
    throughput.path_of(folder).unlink()
    forwards = []

    def timed(forward, repeats=throughput.REPEATS):  # every feature is cached: only the timed batch runs forward
        forwards.append(forward())
        return 0.5

    monkeypatch.setattr(throughput, "time_forward", timed)
    stages.extract("g", BACKBONE, "tiny", params)
    assert len(forwards) == 1 and _timing(folder)["images_per_s"] == 4 / 0.5
    [[features]] = [list(out.values()) for out in forwards]
    assert features["pooled"].shape[0] == 4


def test_time_forward_is_the_median_of_the_repeats_after_one_warm_up(monkeypatch):
    clock = iter([0.0, 3.0, 10.0, 11.0, 20.0, 22.0])  # repeats of 3 s, 1 s and 2 s
    monkeypatch.setattr(throughput.time, "perf_counter", lambda: next(clock))
    calls = []
    assert throughput.time_forward(lambda: calls.append(1)) == 2.0
    assert len(calls) == 4


# -- what boards show ---------------------------------------------------------------------------------------------

XEON = "cpu:Intel(R) Xeon(R) Processor:avx512f:2threads"
ZEN = "cpu:AMD EPYC 7B12:avx2:2threads"


def _cost(arch: str) -> BackboneCost:
    return BackboneCost(arch=arch, parameters=11_689_512, flops=3_628_146_688, input=224, images_per_s=40.0,
                        device=ZEN, path="benchmarks/results/backbone_costs-zen2.json")


def test_a_board_shows_the_median_of_the_records_timings_on_the_device_most_of_them_name():
    rates = [{"backbone_name": "resnet18", "device": XEON, "images_per_s": 30.0},
             {"backbone_name": "resnet18@random", "device": XEON, "images_per_s": 34.0},
             {"backbone_name": "resnet18", "device": XEON, "images_per_s": 31.0},
             {"backbone_name": "resnet18", "device": ZEN, "images_per_s": 90.0},
             {"backbone_name": "hed", "device": XEON, "images_per_s": 5.0}]  # costed by no results file: left out
    costs = with_record_rates({"resnet18": _cost("resnet18"), "resnet50": _cost("resnet50")}, rates)
    assert set(costs) == {"resnet18", "resnet50"}
    resnet18 = costs["resnet18"]
    assert (resnet18.images_per_s, resnet18.device, resnet18.rate_extractions) == (31.0, XEON, 3)
    assert costs["resnet50"] == _cost("resnet50")  # no record timed it: the benchmark's rate stands
    assert costs["resnet18"].parameters == _cost("resnet18").parameters  # counts are the benchmark's
    line = backbone_cost_line("resnet18", costs)[0]
    assert "31 img/s through its extraction forward on Intel(R) Xeon(R) Processor, 2 threads" in line
    assert "the median over 3 extractions its records timed" in line
    assert "40 img/s" in backbone_cost_line("resnet50", costs)[0]
    assert "backbone_costs-zen2.json" in backbone_cost_line("resnet50", costs)[0]
    assert "records" not in backbone_cost_line("resnet50", costs)[0]
    assert with_record_rates({"resnet18": _cost("resnet18")}, []) == {"resnet18": _cost("resnet18")}


def test_the_corpus_query_reads_each_timed_extraction_once(extracted):
    params, folder = extracted
    records = [stages.probe("g", task, BACKBONE, params)[0] for task in ("classification", "retrieval")]
    untimed = records[1].model_copy(update={"run_id": "g-retrieval@other", "backbone_name": "other",
                                            "throughput": None})
    con = connect_corpus([*records, untimed])
    rows = measured_rates(con)
    measured = _timing(folder)
    assert rows == [{"backbone_name": records[0].backbone_name, "device": measured["device"],
                     "images_per_s": measured["images_per_s"]}]  # two records, one extraction


def test_the_run_page_says_how_fast_its_extraction_ran(extracted):
    params, _ = extracted
    [record] = stages.probe("g", "classification", BACKBONE, params)
    stages.collect(params)
    stages.site()
    [page] = [p for p in Path("docs/runs").rglob("*.md") if record.run_id in p.read_text()]
    timed = record.throughput
    assert (f"Extraction forward: {timed.images_per_s:.1f} img/s over a timed batch of 4 images on "
            f"`{timed.device}`") in page.read_text()
