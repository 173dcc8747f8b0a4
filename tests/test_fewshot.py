"""The few-shot protocol: the seeded training subset, the grid spec, the stage that runs every k × seed, and
the learning curves on the site (never on a board)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from xml.etree import ElementTree

import numpy as np
import pytest
import yaml
from conftest import image_project_params, write_image_folder

from harness.core import paths
from harness.core.config import ConfigError, load_params
from harness.core.run_key import BackboneRef, RunKey
from harness.datasets.manifest import Item, Manifest
from harness.leaderboard import boards, comparability_key, connect_corpus, rendered_pages
from harness.leaderboard.figures.style import nice_ticks
from harness.leaderboard.markdown import FRONT_MATTER_HEADER
from harness.leaderboard.queries.comparability import curve_key
from harness.leaderboard.queries.fewshot import curves
from harness.leaderboard.sitemap import curve_plot_path
from harness.leaderboard.statistics.analysis import analyse
from harness.runs.failed_records import failed_records
from harness.runs.fewshot import FewShotError, Shot, choose_subset, fewshot_manifest, subset_sha256
from harness.runs.records import SCHEMA_VERSION, read_records
from harness.stages import calls as stages
from harness.stages.common import StageFailed

CLASSES = ["cat", "dog", "fox"]


def _manifest(per_class: dict[str, int], val: int = 3, seed: int = 0) -> Manifest:
    """Items with random content hashes: `per_class[name]` train items of each class, `val` of each in val."""
    rng = np.random.default_rng(seed)
    items = []
    for split, counts in (("train", per_class), ("val", dict.fromkeys(CLASSES, val))):
        for label, name in enumerate(CLASSES):
            for index in range(counts.get(name, 0)):
                digest = hashlib.sha256(rng.bytes(16)).hexdigest()
                items.append(Item(f"{split}/{name}/{index}.png", digest, split, label))
    return Manifest("animals", "/nowhere", items, classes=CLASSES, params={"made": "here"})


def _shas(items: list[Item]) -> list[str]:
    return sorted(item.sha256 for item in items)


# -- the subset -----------------------------------------------------------------------------------------

def test_subset_has_k_per_class_and_ignores_order_and_file_names():
    manifest = _manifest({"cat": 6, "dog": 9, "fox": 7})
    chosen = choose_subset(manifest, "train", "images_per_class", Shot(4, seed=0))
    assert [sum(i.label == label for i in chosen) for label in range(3)] == [4, 4, 4]
    assert all(i.split == "train" for i in chosen)
    train = manifest.split("train")
    assert chosen == [i for i in train if i in chosen]  # kept in manifest order

    shuffled = list(manifest.items)
    random.Random(3).shuffle(shuffled)
    renamed = [dataclasses.replace(i, path=f"elsewhere/{n}.jpg") for n, i in enumerate(shuffled)]
    for other in (shuffled, renamed):
        again = choose_subset(dataclasses.replace(manifest, items=other), "train", "images_per_class", Shot(4, 0))
        assert _shas(again) == _shas(chosen) and subset_sha256(again) == subset_sha256(chosen)

    other_seeds = {subset_sha256(choose_subset(manifest, "train", "images_per_class", Shot(4, s))) for s in range(5)}
    assert len(other_seeds) == 5  # each seed its own subset
    every = choose_subset(manifest, "train", "images_per_class", Shot(6, 0))
    assert sum(i.label == 0 for i in every) == 6  # all of the smallest class


def test_subset_of_images_counts_items_not_classes():
    manifest = _manifest({"cat": 5, "dog": 1})
    chosen = choose_subset(manifest, "train", "images", Shot(3, seed=1))
    assert len(chosen) == 3
    assert choose_subset(manifest, "train", "images", Shot(3, seed=1)) == chosen  # deterministic
    assert _shas(choose_subset(manifest, "train", "images", Shot(6, 1))) == _shas(manifest.split("train"))


def test_smaller_k_is_a_prefix_of_the_same_seed_larger_k():
    """The order is fixed per seed, so growing k only adds items: the curve's points are nested."""
    manifest = _manifest({"cat": 8, "dog": 8, "fox": 8})
    small = set(_shas(choose_subset(manifest, "train", "images_per_class", Shot(2, 5))))
    large = set(_shas(choose_subset(manifest, "train", "images_per_class", Shot(5, 5))))
    assert small < large


@pytest.mark.parametrize(("unit", "k", "message"), [
    ("images_per_class", 4, "k=4 images per class exceeds the 3 training images of class 'dog'"),
    ("images", 12, "k=12 images exceeds the 11 training images"),
])
def test_too_large_k_is_an_error_naming_what_is_short(unit, k, message):
    manifest = _manifest({"cat": 5, "dog": 3, "fox": 3})
    with pytest.raises(FewShotError, match=message) as error:
        choose_subset(manifest, "train", unit, Shot(k, 0))
    assert "split 'train' of dataset animals" in str(error.value)


def test_per_class_subset_needs_labels():
    manifest = _manifest({"cat": 2})
    unlabelled = [dataclasses.replace(i, label=None) if i.split == "train" else i for i in manifest.items]
    with pytest.raises(FewShotError, match="unlabelled"):
        choose_subset(dataclasses.replace(manifest, items=unlabelled), "train", "images_per_class", Shot(1, 0))


def test_fewshot_manifest_restricts_only_the_training_split():
    manifest = _manifest({"cat": 5, "dog": 5, "fox": 5})
    sub, described = fewshot_manifest(manifest, "train", "images_per_class", Shot(2, 7))
    assert len(sub.split("train")) == 6 and sub.split("val") == manifest.split("val")
    assert (sub.classes, sub.params, sub.root, sub.extra) == (manifest.classes, manifest.params, manifest.root,
                                                              manifest.extra)
    assert described == {"k_shot": 2, "k_shot_unit": "images_per_class", "subset_seed": 7, "subset_size": 6,
                         "subset_sha256": subset_sha256(sub.split("train"))}
    assert len(described["subset_sha256"]) == 64


def test_a_dense_probe_trains_on_k_images_and_evaluates_on_the_full_split(tmp_path):
    """The subset is a manifest like any other: depth on procedural scenes with fixed random features."""
    from harness.datasets.scenes import prepare_procedural_scenes
    from harness.probes import ProbeInputs, get_probe

    scenes = prepare_procedural_scenes("scenes", tmp_path, {"train": 5, "val": 3}, seed=0, size=32)

    def features(item):
        return np.random.default_rng(int(item.sha256[:8], 16)).normal(size=(6, 4, 4)).astype(np.float32)

    params = {"train_split": "train", "eval_split": "val", "epochs": 2, "lr": 0.01, "weight_decay": 0.0,
              "batch_size": 2, "head": "linear", "target_size": 8}
    depth = get_probe("depth")
    sub, described = fewshot_manifest(scenes, "train", "images", Shot(2, seed=4))
    assert described["subset_size"] == 2 and len(sub.split("train")) == 2
    result = depth.run(ProbeInputs(sub, features, params, seed=4))
    assert result.sample_ids == [item.path for item in scenes.split("val")]  # evaluation unchanged
    full = depth.run(ProbeInputs(scenes, features, params, seed=4))
    everything, _ = fewshot_manifest(scenes, "train", "images", Shot(5, seed=4))
    assert depth.run(ProbeInputs(everything, features, params, seed=4)).metrics == full.metrics
    assert result.metrics != full.metrics


# -- the grid spec, paths and run ids -------------------------------------------------------------------

def test_fewshot_grid_spec_is_validated(tmp_path):
    config = image_project_params(tmp_path, ["resnet18.random"])
    config["grids"]["g"]["fewshot"] = {"k_shots": [1, 2, 4], "seeds": [0, 1]}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(config))
    params = load_params(tmp_path / "params.yaml")
    assert stages.stage_shots(params, "g") == [Shot(k, s) for k in (1, 2, 4) for s in (0, 1)]
    assert stages.stage_run_ids(params, RunKey("g", "classification", BackboneRef.parse("resnet18.random")))[:2] == [
        "g-classification@resnet18.random.k1.s0", "g-classification@resnet18.random.k1.s1"]
    for bad, message in (({"k_shots": [1, 1], "seeds": [0]}, "repeats"), ({"k_shots": [0], "seeds": [0]}, "k_shots"),
                         ({"k_shots": [1]}, "seeds"), ({"k_shots": [1], "seeds": [0], "k": 2}, "unknown key")):
        config["grids"]["g"]["fewshot"] = bad
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(config))
        with pytest.raises(ConfigError, match=message):
            load_params(tmp_path / "params.yaml")


def test_fewshot_paths_and_run_ids_name_k_and_seed():
    shot = Shot(4, 2)
    assert paths.record_path("fewshot", "depth", "resnet18.random", shot).as_posix() == \
        "results/fewshot/depth/resnet18.random/k4-s2.json"
    assert paths.samples_path("fewshot", "depth", "resnet18.random", shot).as_posix() == \
        "results/fewshot/depth/resnet18.random/k4-s2.samples.csv"
    assert paths.metrics_path("fewshot", "depth", "resnet18.random").as_posix() == \
        "results/fewshot/depth/resnet18.random.metrics.json"  # beside the folder: DVC outs may not overlap
    key = RunKey("fewshot", "depth", BackboneRef.parse("resnet18.random"), shot)
    assert key.run_id == "fewshot-depth@resnet18.random.k4.s2"
    assert RunKey.from_run_id(key.run_id, 4, 2) == key and key.stage == "fewshot-depth@resnet18.random"
    assert RunKey.from_run_id("default-depth@x", None, 0).stage == "default-depth@x"
    assert RunKey.from_stage(key.stage) == key.at(None)
    assert (key.grid, key.task, key.backbone.spelled) == ("fewshot", "depth", "resnet18.random")


# -- the stage end to end -------------------------------------------------------------------------------

@pytest.fixture
def fewshot_project(tmp_path, monkeypatch):
    """The tiny two-class image folder (4 train + 4 val images per class), prepared and extracted with
    one random-init control, in a grid that runs classification few-shot."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_image_folder(tmp_path / "images")
    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.chdir(work)

    def setup(k_shots: list[int], seeds: list[int]):
        config = image_project_params(tmp_path / "images", ["cifar_resnet20.random"])
        config["grids"]["g"]["tasks"] = {"classification": "tiny"}
        config["grids"]["g"]["fewshot"] = {"k_shots": k_shots, "seeds": seeds}
        (work / "params.yaml").write_text(yaml.safe_dump(config))
        params = load_params()
        stages.prepare("tiny", params)
        stages.extract("g", "cifar_resnet20.random", "tiny", params)
        return params

    return setup


BACKBONE = "cifar_resnet20.random"


def run_probe_stage(grid, task, backbone, params):
    """The full-split run of a few-shot stage's task (no shot), as a plain probe stage would make it."""
    from harness.probes import validate_probe_params
    from harness.runs.probe_run import job_from_params, run_probe

    outcome = run_probe(job_from_params(params, grid, task, backbone), params,
                        validate_probe_params(task, params.probes[task]))
    paths.samples_path(grid, task, backbone).write_text(outcome.samples_text)
    return outcome.record


def test_fewshot_stage_writes_a_record_per_k_and_seed(fewshot_project):
    params = fewshot_project([1, 4], [0, 1])
    records = stages.probe("g", "classification", BACKBONE, params)
    assert [r.run_id for r in records] == [f"g-classification@{BACKBONE}.k{k}.s{s}" for k in (1, 4) for s in (0, 1)]
    assert all(r.status == "ok" and r.schema_version == SCHEMA_VERSION for r in records)
    folder = paths.fewshot_dir("g", "classification", BACKBONE)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"k{k}-s{s}{suffix}" for k in (1, 4) for s in (0, 1)
        for suffix in (".json", ".samples.csv", ".head.safetensors"))  # each run's trained head beside its record
    for record in records:
        shot = Shot(record.k_shot, record.seed)
        assert read_records(paths.record_path("g", "classification", BACKBONE, shot)) == [record]
        assert record.samples.path == paths.samples_path("g", "classification", BACKBONE, shot).as_posix()
        assert record.samples.count == 8  # evaluation is the whole val split, whatever k
        params_ = record.protocol_params
        assert (params_["k_shot"], params_["subset_seed"], params_["subset_size"]) == (
            record.k_shot, record.seed, 2 * record.k_shot)
        assert params_["k_shot_unit"] == "images_per_class" and params_["epochs"] == 20
        assert record.dataset.identity == Manifest.load(paths.manifest_path("tiny")).identity
    by_id = {r.run_id: r for r in records}
    k1 = [by_id[f"g-classification@{BACKBONE}.k1.s{s}"].protocol_params["subset_sha256"] for s in (0, 1)]
    assert k1[0] != k1[1]  # two seeds, two subsets
    # k = 4 per class is the whole training split: seed 0 reproduces the full-split run exactly.
    full = run_probe_stage("g", "classification", BACKBONE, params)
    assert by_id[f"g-classification@{BACKBONE}.k4.s0"].metrics == full.metrics

    summary = json.loads(paths.metrics_path("g", "classification", BACKBONE).read_text())
    assert sorted(summary) == ["k1", "k4", "metric"] and summary["metric"] == "top1"  # the headline only
    for k in (1, 4):
        runs = [by_id[f"g-classification@{BACKBONE}.k{k}.s{s}"] for s in (0, 1)]
        assert summary[f"k{k}"] == pytest.approx(np.mean([r.metrics["top1"] for r in runs]), abs=1e-15)

    assert {r.run_id for r in stages.collect(params)} == set(by_id)


def test_a_failing_k_fails_the_stage_and_keeps_every_earlier_output(fewshot_project):
    """k=5 per class exceeds the 4 training images of a class: that run is a failed record, the stage writes
    none of its outputs (an earlier good curve stays whole) and exits with StageFailed."""
    params = fewshot_project([1], [3])
    stages.probe("g", "classification", BACKBONE, params)
    folder = paths.fewshot_dir("g", "classification", BACKBONE)
    before = {p: p.read_bytes() for p in [*folder.iterdir(), paths.metrics_path("g", "classification", BACKBONE)]}
    wider = fewshot_project([1, 5], [3])
    with pytest.raises(StageFailed, match="1 of 2 run"):
        stages.probe("g", "classification", BACKBONE, wider)
    assert {p: p.read_bytes() for p in before} == before and set(folder.iterdir()) <= set(before)
    [failed] = failed_records(f"g-classification@{BACKBONE}")  # the failed runs only
    assert failed.status == "failed" and failed.k_shot == 5 and failed.failure.phase == "select_subset"
    assert "k=5 images per class exceeds the 4 training images of class 'class0'" in failed.failure.message
    assert failed.protocol_params["k_shot"] == 5 and "subset_sha256" not in failed.protocol_params


def test_fewshot_metrics_never_average_the_survivors_of_a_k(fewshot_project):
    first, second = stages.probe("g", "classification", BACKBONE, fewshot_project([1], [0, 1]))
    broken = second.model_copy(update={"status": "failed", "metrics": {}})
    assert stages.fewshot_metrics([first, broken])["k1"] is None


def test_a_task_without_few_shot_protocol_is_a_configuration_error(fewshot_project):
    params = fewshot_project([1], [0])
    params.grids["g"].tasks["retrieval"] = "tiny"
    with pytest.raises(ConfigError, match=r"'retrieval' has no few-shot protocol.*classification"):
        stages.probe("g", "retrieval", BACKBONE, params)


def test_rerunning_with_fewer_shots_leaves_no_stale_files(fewshot_project):
    params = fewshot_project([1, 2], [0])
    stages.probe("g", "classification", BACKBONE, params)
    fewer = params.model_copy(deep=True)
    fewer.grids["g"].fewshot.k_shots = [2]
    stages.probe("g", "classification", BACKBONE, fewer)
    assert sorted(p.name for p in paths.fewshot_dir("g", "classification", BACKBONE).iterdir()) == [
        "k2-s0.head.safetensors", "k2-s0.json", "k2-s0.samples.csv"]


def test_verify_reruns_a_fewshot_stage_and_compares_every_record(fewshot_project):
    from harness.cli.verify import verify_runs
    from harness.pipeline.plan import select_runs
    from harness.runs.records import write_records

    params = fewshot_project([1, 2], [0, 1])
    stages.probe("g", "classification", BACKBONE, params)
    corpus = stages.collect(params)
    runs, _ = select_runs(params)
    checks = verify_runs(runs, params)
    assert checks and all(c.ok and c.difference == 0.0 for c in checks)
    assert {c.run_id for c in checks if c.metric == "subset_sha256"} == {r.run_id for r in corpus}

    tampered = [r.model_copy(update={"protocol_params": {**r.protocol_params, "subset_sha256": "0" * 64}})
                if r.k_shot == 2 and r.seed == 1 else r for r in corpus]
    write_records(paths.CORPUS, tampered)
    bad = [c for c in verify_runs(runs, params) if not c.ok]
    assert [(c.run_id, c.metric) for c in bad] == [(f"g-classification@{BACKBONE}.k2.s1", "subset_sha256")]
    write_records(paths.CORPUS, corpus[1:])
    with pytest.raises(KeyError, match=corpus[0].run_id.replace(".", r"\.")):
        verify_runs(runs, params)


def test_the_site_draws_the_curve_and_keeps_fewshot_runs_off_the_boards(fewshot_project):
    params = fewshot_project([1, 2, 4], [0, 1])
    records = stages.probe("g", "classification", BACKBONE, params)
    full = run_probe_stage("g", "classification", BACKBONE, params)  # a full-split run beside them
    corpus = [*records, full]
    pages = rendered_pages(corpus)
    shuffled = list(corpus)
    random.Random(1).shuffle(shuffled)
    assert rendered_pages(shuffled) == pages  # deterministic, whatever the record order

    con = connect_corpus(corpus)
    (board,) = boards(con)
    assert [row["run_id"] for row in board["rows"]] == [full.run_id]
    analysis = analyse(con, corpus, paths.CORPUS.parent.parent)
    assert [row.backbone_name for row in analysis.rows] == ["cifar_resnet20@random"]
    assert {r.run_id for r in records} <= {run_id for run_id, _ in analysis.intervals}  # run pages get CIs

    (curve,) = curves(con)
    assert curve["curve_key"] == curve_key(records[0]) and curve["k_shots"] == [1, 2, 4]
    svg = pages[curve_plot_path(curve)]
    assert svg.startswith("<!-- generated by") and ElementTree.fromstring(svg.split("\n", 1)[1]) is not None
    assert svg.count("<circle") == 3 and 'stroke-dasharray="6 4"' in svg  # a control: dashed
    task_page = pages["tasks/classification.md"]
    assert f"](../{curve_plot_path(curve)})" in task_page and "## Learning curves" in task_page
    assert "1 successful run on 1 board, 6 few-shot runs on 1 learning curve" in task_page
    for record in records:
        # grouped under the curve's folder in the navigation, and kept out of the search index
        folder = f"runs/classification/few-shot-{record.dataset.name}-{record.dataset.split}"
        run_page = pages[f"{folder}/{record.run_id.replace('@', '-at-')}.md"]
        title = f'title: "{record.backbone_name}, k={record.k_shot}, seed {record.seed}"'
        assert run_page.startswith(f"---\n{FRONT_MATTER_HEADER}\n{title}\nsearch:\n  exclude: true\n---\n")
        assert f"dvc repro pipelines/g/{BACKBONE}/dvc.yaml:g-classification@{BACKBONE}\n" in run_page
        assert f"#curve-{curve['curve_key']})" in run_page
    assert "search:" not in pages[f"runs/classification/{full.run_id.replace('@', '-at-')}.md"]
    # comparability: the full-split run's key is what it was before k_shot existed; k changes the key
    assert comparability_key(full) != comparability_key(records[0]) != comparability_key(records[2])


# -- the curve's numbers and figure on synthetic records -------------------------------------------------

def _fewshot_records() -> list:
    from test_records import make_record

    rng = np.random.default_rng(11)
    records = []
    for name in ("resnet18@random", "vit_small"):
        for k in (1, 2, 4, 8):
            for seed in (0, 1, 2):
                top1 = float(rng.random())
                records.append(make_record(
                    run_id=f"fewshot-classification@{name.replace('@random', '.random')}.k{k}.s{seed}",
                    backbone=None, backbone_name=name, k_shot=k, seed=seed, samples=None,
                    protocol_params={"epochs": 100, "k_shot": k, "k_shot_unit": "images_per_class",
                                     "subset_seed": seed, "subset_size": 10 * k, "subset_sha256": f"{k}{seed}" * 8},
                    metrics={"top1": top1, "top5": 1.0}, higher_is_better={"top1": True, "top5": True},
                    tolerances={"top1": 0.0, "top5": 0.0}))
    failed = make_record(run_id="fewshot-classification@vit_small.k16.s0", backbone=None, backbone_name="vit_small",
                         k_shot=16, status="failed", metrics={}, higher_is_better={}, tolerances={}, samples=None,
                         failure={"phase": "select_subset", "error_type": "FewShotError", "message": "k=16 ..."})
    return [*records, failed]


def test_curve_points_are_mean_sd_min_max_over_seeds():
    records = _fewshot_records()
    (curve,) = curves(connect_corpus(records))
    assert [line["backbone_name"] for line in curve["lines"]] == ["vit_small", "resnet18@random"]
    assert curve["k_shots"] == [1, 2, 4, 8] and curve["seeds"] == [0, 1, 2] and curve["runs"] == 24
    for line in curve["lines"]:
        for point in line["points"]:
            values = [r.metrics["top1"] for r in records if r.backbone_name == line["backbone_name"]
                      and r.k_shot == point["k_shot"] and r.status == "ok"]
            assert point["n"] == 3 and point["seeds"] == [0, 1, 2]
            assert point["mean"] == pytest.approx(np.mean(values), abs=1e-15)
            assert point["sd"] == pytest.approx(np.std(values, ddof=1), abs=1e-15)
            assert (point["low"], point["high"]) == (min(values), max(values))
    assert boards(connect_corpus(records)) == []  # few-shot only: nothing to rank


def test_curve_table_and_figure():
    records = _fewshot_records()
    pages = rendered_pages(records)
    (curve,) = curves(connect_corpus(records))
    page = pages["tasks/classification.md"]
    vit = [r.metrics["top1"] for r in records if r.backbone_name == "vit_small" and r.k_shot == 8]
    assert f"{np.mean(vit):.4f} ± {np.std(vit, ddof=1):.4f} (n=3)" in page
    assert "No successful runs on a board." in page and "fewshot-classification-at-vit_small.k16.s0" in page
    svg = ElementTree.fromstring(pages[curve_plot_path(curve)].split("\n", 1)[1])
    spaced = "{http://www.w3.org/2000/svg}"
    assert len(svg.findall(f"{spaced}polyline")) == 4  # two lines, two legend samples
    assert len(svg.findall(f"{spaced}circle")) == 8
    assert [t.text for t in svg.findall(f"{spaced}text") if t.text in {"1", "2", "4", "8"}] == ["1", "2", "4", "8"]
    xs = [float(c.get("cx")) for c in svg.findall(f"{spaced}circle")][:4]
    assert np.allclose(np.diff(xs), np.diff(xs)[0], atol=0.02)  # log2 axis: doubling k is one step (2 decimals)


@pytest.mark.parametrize(("low", "high"), [(0.0, 1.0), (0.41, 0.4312), (0.7, 0.7), (-2.5, 13.0), (120.0, 480.0)])
def test_nice_ticks_cover_the_range(low, high):
    ticks, decimals = nice_ticks(low, high)
    assert ticks[0] <= low and ticks[-1] >= high and len(ticks) >= 2
    steps = np.diff(ticks)
    assert np.allclose(steps, steps[0]) and len({f"{t:.{decimals}f}" for t in ticks}) == len(ticks)
