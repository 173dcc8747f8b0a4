"""dvc.yaml, params.yaml, dvc.lock and the committed corpus agree with each other, and DVC re-runs exactly the
stages an edit touches."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import repro_code_stage

from harness.core import paths
from harness.core.config import load_params
from harness.core.hashing import sha256_file
from harness.core.run_key import BackboneRef, RunKey
from harness.pipeline.checks import missing_requirements
from harness.pipeline.owed import FINGERPRINTS, owed_stages
from harness.probes import resampled
from harness.runs.fewshot import stage_run_ids, stage_shots
from harness.runs.records import read_records
from harness.runs.samples import read_samples
from harness.stages.calls import fewshot_metrics

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def params():
    return load_params(ROOT / "params.yaml")


@pytest.fixture(scope="module")
def lock():
    """Every lock file's entries, by stage name."""
    from harness.core.dvcfiles import read_locks

    return read_locks(ROOT)


@pytest.fixture(autouse=True)
def _at_root(repo_root):
    """Grid requirements are paths relative to the project root (../shared): resolve them there."""


def _grids_run_here(params) -> dict:
    """Grids whose data this checkout has: the declared voc2012/nyuv2/taskonomy/nights grids never ran."""
    return {name: grid for name, grid in params.grids.items() if not missing_requirements(params, name)}


def _locate(record):
    """(grid, task, backbone, shot) of the stage run that wrote `record`."""
    key = RunKey.from_run_id(record.run_id, record.k_shot, record.seed)
    return key.grid, key.task, key.backbone.spelled, key.shot


def test_committed_dvc_yaml_is_a_fresh_generation(params):
    from harness.core.dvcfiles import dvc_files
    from harness.pipeline.documents import render

    rendered = render(params)
    assert sorted(rendered) == sorted(dvc_files(ROOT)), "a grid's file is missing or left over: run `pipeline`"
    for path, text in rendered.items():
        assert (ROOT / path).read_text() == text, f"{path} is stale: run `visbench-harness pipeline`"


@pytest.mark.dvc
def test_a_passing_pipeline_check_spares_the_next_run_its_check(tmp_path, monkeypatch):
    """`visbench-harness pipeline check` (run by the image's build) leaves the stamp a run's own check would:
    the next run then imports no registry (no torch; a fresh process tells). A dvc.lock entry a regeneration
    would prune (see test_regenerating_drops_the_lock_entries_of_removed_stages) leaves no stamp, so the next
    run still regenerates and prunes. (The stamp hashes the code it runs: the first check runs the clone's.)"""
    from harness.pipeline import generate as pipeline

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(clone)], check=True, timeout=120)
    check = [sys.executable, "-m", "harness.cli.main", "pipeline", "check"]
    assert subprocess.run(check, cwd=clone, capture_output=True, timeout=300).returncode == 0
    monkeypatch.chdir(clone)
    run_check = [sys.executable, "-c", "import sys; from harness.core.config import load_params; from harness.pipeline "
                 "import generate; print(generate.ensure_fresh(load_params()), 'torch' in sys.modules)"]
    assert subprocess.run(run_check, cwd=clone, capture_output=True, text=True, timeout=300).stdout.split() == \
        ["False", "False"]
    pipeline.STAMP.unlink()
    lock = clone / "dvc.lock"
    lock.write_text(lock.read_text() + "  gone-stage:\n    cmd: true\n")
    assert pipeline.main(["check"]) == 0
    assert not pipeline.STAMP.exists()


def test_a_stamp_that_cannot_be_read_means_check_again(tmp_path, monkeypatch):
    from harness.pipeline import generate as pipeline

    monkeypatch.chdir(tmp_path)
    assert pipeline._read_stamp() is None  # absent
    pipeline.STAMP.parent.mkdir(parents=True)
    pipeline.STAMP.write_text("{not json")
    assert pipeline._read_stamp() is None
    pipeline.STAMP.unlink()
    pipeline.STAMP.mkdir()  # unreadable as a file (as another uid's 0600 file is): OSError
    assert pipeline._read_stamp() is None


def test_each_lock_pins_only_stages_its_dvc_yaml_defines():
    from harness.core.dvcfiles import dvc_files, lock_of, read_lock_file
    from harness.pipeline.targets import stage_names

    for path in dvc_files(ROOT):
        defined = stage_names(yaml.safe_load((ROOT / path).read_text()))
        stale = sorted(set(read_lock_file(ROOT / lock_of(path))) - defined)
        assert not stale, f"{lock_of(path)} pins stages {path} lacks (`pipeline` moves or drops them): {stale}"


def test_run_pages_name_each_committed_stage_as_dvc_addresses_it():
    """A run page's `dvc repro` line (from the record's grid and backbone) is the address the harness gives DVC,
    and that file defines the stage."""
    from harness.leaderboard.pages.runs import rerun_commands, stage_of
    from harness.pipeline.stage_model import load_stages

    stages = load_stages(ROOT)
    records = read_records(ROOT / paths.CORPUS)
    for record in records:
        stage = stage_of(record)
        assert rerun_commands(record)[0] == f"dvc repro {stages[stage].address}"
    assert len(records) > 100


def test_locks_of_earlier_layouts_move_to_the_rows_files_verbatim(tmp_path):
    """Entries of an old single dvc.lock, and of an old per-grid `pipelines/G/dvc.lock`, go to the lock beside the
    row file that defines their stage, unchanged (so nothing re-runs); an entry already there wins; the root
    keeps its own; the earlier layout's files are then stale."""
    from harness.core.dvcfiles import lock_of, read_lock_file, row_file
    from harness.pipeline.generate import _stale_files
    from harness.pipeline.locks import relocate_lock_entries
    from harness.pipeline.stage_model import RowKey, StageSpec, documents_stages

    rows = [RowKey("g", b, "d", "t") for b in "abc"]
    specs = [StageSpec("collect", Path("dvc.yaml"), "c"), *(StageSpec(f"g-t@{k.backbone}", k.file, f"p {k.backbone}",
                                                                      row=k) for k in rows)]
    docs = {path: {"stages": stages} for path, stages in documents_stages(specs).items()}
    old_grid = tmp_path / "pipelines" / "g"
    (old_grid / "b").mkdir(parents=True)
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages:\n  collect:\n    cmd: c\n  g-t@a:\n    cmd: p a\n"
                                       "    params:\n      params.yaml:\n        probes.t.lr: 0.1\n")
    (old_grid / "dvc.lock").write_text("schema: '2.0'\nstages:\n  g-t@b:\n    cmd: old\n  g-t@c:\n    cmd: p c\n")
    (old_grid / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / lock_of(row_file("g", "b"))).write_text("schema: '2.0'\nstages:\n  g-t@b:\n    cmd: p b\n")
    assert relocate_lock_entries(docs, tmp_path) == 3
    assert read_lock_file(tmp_path / "dvc.lock") == {"collect": {"cmd": "c"}}
    assert read_lock_file(old_grid / "dvc.lock") == {}
    assert read_lock_file(tmp_path / lock_of(row_file("g", "a"))) == {
        "g-t@a": {"cmd": "p a", "params": {"params.yaml": {"probes.t.lr": 0.1}}}}
    assert read_lock_file(tmp_path / lock_of(row_file("g", "b"))) == {"g-t@b": {"cmd": "p b"}}
    assert read_lock_file(tmp_path / lock_of(row_file("g", "c"))) == {"g-t@c": {"cmd": "p c"}}
    assert relocate_lock_entries(docs, tmp_path) == 0
    assert _stale_files(docs, tmp_path) == [old_grid / "dvc.lock", old_grid / "dvc.yaml"]


def test_a_stage_lives_in_its_rows_file_and_dvc_is_told_it_by_its_address():
    from harness.core.dvcfiles import file_grid, stage_of
    from harness.pipeline.stage_model import load_stages

    stages = load_stages(ROOT)
    assert stages["scenes-depth@resnet18.random"].file == Path("pipelines/scenes/resnet18.random/dvc.yaml")
    assert stages["extract-scenes-scene_pairs@hed_vgg16"].file == Path("pipelines/scenes/hed_vgg16/dvc.yaml")
    assert stages["prepare-scenes"].address == "prepare-scenes" and stages["collect"].file == Path("dvc.yaml")
    assert stage_of(stages["scenes-depth@hed_vgg16"].address) == "scenes-depth@hed_vgg16"
    assert file_grid(stages["scenes-depth@hed_vgg16"].file) == "scenes" and file_grid(Path("dvc.yaml")) is None


def test_regenerating_drops_the_lock_entries_of_removed_stages(tmp_path):
    from harness.pipeline.locks import prune_lock

    lock = tmp_path / "dvc.lock"
    lock.write_text("schema: '2.0'\nstages:\n  old-name:\n    cmd: a\n  extract-g-d@b:\n    cmd: b  # kept\n")
    assert prune_lock({"extract-g-d@b", "collect"}, lock) == ["old-name"]
    assert lock.read_text() == "schema: '2.0'\nstages:\n  extract-g-d@b:\n    cmd: b  # kept\n"
    assert prune_lock({"extract-g-d@b"}, lock) == [] and "old-name" not in lock.read_text()


def test_every_grid_run_has_a_locked_stage_and_a_record(params, lock):
    corpus = {r.run_id: r for r in read_records(ROOT / paths.CORPUS)}
    grids = _grids_run_here(params)
    assert grids, "no grid's data is here: scripts/setup installs the embedded default's"
    for grid_name, grid in grids.items():
        for task in grid.tasks:
            for backbone in grid.backbones:
                key = RunKey(grid_name, task, BackboneRef.parse(backbone))
                assert key.stage in lock, f"{key.stage} has never run: dvc.lock lacks it"
                for run_id in stage_run_ids(params, key):
                    assert run_id in corpus, f"{run_id} has no record in the corpus"
                    assert corpus[run_id].backbone_name == key.backbone.name


def test_locked_record_hashes_match_committed_files(lock):
    checked = 0
    for name, stage in lock.items():
        for out in stage.get("outs", []):
            path = ROOT / out["path"]
            if out["path"].endswith((".json", ".jsonl", ".samples.csv")):
                assert path.is_file(), f"{out['path']} (out of {name}) is not committed"
                assert hashlib.md5(path.read_bytes()).hexdigest() == out["md5"], f"{out['path']} changed since {name}"
                checked += 1
    assert checked > 0


def test_corpus_is_exactly_the_collected_ok_records(params):
    collected = []
    for grid_name, grid in params.grids.items():
        for task in grid.tasks:
            for backbone in grid.backbones:
                for shot in stage_shots(params, grid_name):
                    path = ROOT / paths.record_path(grid_name, task, backbone, shot)
                    if path.is_file():
                        collected += [r for r in read_records(path) if r.status == "ok"]
    corpus = read_records(ROOT / paths.CORPUS)
    assert sorted(r.run_id for r in collected) == [r.run_id for r in corpus]
    assert all(r.status == "ok" for r in corpus)
    attempts = read_records(ROOT / paths.FAILED_CORPUS)
    assert all(r.status == "failed" for r in attempts)


def test_metrics_files_match_records_and_the_sites_intervals(params):
    """Each stage's DVC metrics file: its record's headline with the interval the site shows for it (the same
    bootstrap, rows and seed); few-shot stages: the mean per k."""
    from harness.leaderboard.queries.db import connect_corpus
    from harness.leaderboard.statistics.analysis import analyse

    corpus = read_records(ROOT / paths.CORPUS)
    intervals = analyse(connect_corpus(corpus), corpus, ROOT).intervals
    owed = owed_stages(ROOT)  # written by the code before a committed change; their re-run rewrites them
    fewshot = {}
    for record in corpus:
        grid, task, backbone, shot = _locate(record)
        if RunKey(grid, task, BackboneRef.parse(backbone)).stage in owed:
            continue
        if shot is not None:
            fewshot.setdefault((grid, task, backbone), []).append(record)
            continue
        metrics = json.loads((ROOT / paths.metrics_path(grid, task, backbone)).read_text())
        interval = intervals.get((record.run_id, record.headline_metric))
        expected = {"metric": record.headline_metric, "headline": record.headline}
        if interval is not None:
            expected |= {"low": interval.low, "high": interval.high}
        assert metrics == expected, record.run_id
    for (grid, task, backbone), records in fewshot.items():
        metrics = json.loads((ROOT / paths.metrics_path(grid, task, backbone)).read_text())
        assert metrics == fewshot_metrics(records)


def test_ok_records_have_their_per_sample_files():
    """Every ok record points at a committed samples file with its SHA-256, whose columns average to the
    record's metrics."""
    for record in read_records(ROOT / paths.CORPUS):
        grid, task, backbone, shot = _locate(record)
        info = record.samples
        assert info is not None, f"{record.run_id} has no per-sample scores: regenerate the corpus"
        assert info.path == paths.samples_path(grid, task, backbone, shot).as_posix(), record.run_id
        assert (ROOT / info.path).is_file(), f"{info.path} is not committed"
        assert sha256_file(ROOT / info.path) == info.sha256, f"{info.path} does not match {record.run_id}"
        ids, columns = read_samples(info, ROOT)
        assert len(ids) == info.count and sorted(columns) == sorted(info.columns + info.auxiliary), record.run_id
        for name in info.columns:
            assert abs(columns[name].mean() - record.metrics[name]) <= 1e-12, f"{record.run_id} {name}"
        for name, statistic in info.statistics.items():  # a resampled statistic of the whole file is the metric
            value = float(resampled.evaluate(statistic, columns)[0])
            assert abs(value - record.metrics[name]) <= 1e-12 * max(1.0, abs(value)), f"{record.run_id} {name}"


def test_controls_are_marked_and_pretrained_are_not():
    for record in read_records(ROOT / paths.CORPUS):
        if record.backbone is not None:
            # controls: random-init architectures (NAME@random) and fixed-filter baselines (sobel)
            fixed = record.backbone.weights["kind"] == "fixed-filter"
            assert record.backbone.control == (record.backbone_name.endswith("@random") or fixed)
            assert (record.backbone.weights["kind"] in ("random", "fixed-filter")) == record.backbone.control


# -- what DVC says ------------------------------------------------------------------------------------------

ABSENT = {"deleted", "not in cache"}  # a fresh clone lacks DVC-cached data (features, prepared datasets)


def _real_changes(entry) -> bool:
    if isinstance(entry, dict):
        return any(_real_changes(v) for v in entry.values())
    if isinstance(entry, list):
        return any(_real_changes(v) for v in entry)
    return entry not in ABSENT


def dvc_status(workspace: Path, *targets: str) -> dict:
    """`dvc status --json` of stages named as the harness names them (none: every stage), by stage name."""
    from harness.core.dvcfiles import stage_of
    from harness.pipeline.stage_model import addresses, load_stages

    named = addresses(targets, load_stages(workspace))
    result = subprocess.run([sys.executable, "-m", "dvc", "status", "--json", *named],
                            cwd=workspace, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    assert result.returncode == 0, result.stderr
    return {stage_of(address): entries for address, entries in json.loads(result.stdout or "{}").items()}


def test_each_stage_pins_the_outputs_it_reads_as_their_stage_locked_them(lock):
    """A stage re-run alone (an extraction on another machine) leaves its readers pinning the old hash: a fresh
    clone then re-runs them, which `dvc status` on a clone without the DVC-cached features cannot show. A code
    fingerprint pinned older than the codedeps stage wrote it is not such a drift: that stage owes a re-run after
    a committed code change (harness.pipeline.owed; a long re-run is split by grid), and its record still names the
    commit that produced it."""
    written = {out["path"]: (name, out["md5"]) for name, stage in lock.items() for out in stage.get("outs", [])}
    stale = sorted(f"{name} reads {dep['path']} as {dep['md5']}, {written[dep['path']][0]} wrote "
                   f"{written[dep['path']][1]}" for name, stage in lock.items() for dep in stage.get("deps", [])
                   if dep["path"] in written and dep.get("md5") != written[dep["path"]][1]
                   and not dep["path"].startswith(FINGERPRINTS))
    assert len(written) > 100 and not stale, "re-run these stages (visbench-harness task=…):\n" + "\n".join(stale)


@pytest.mark.dvc
def test_dvc_metrics_show_reads_every_declared_file(clone):
    """`dvc metrics show` on a clone: no "failed to load" for grids nobody ran, and each committed run's row has
    its headline and interval."""
    shown = subprocess.run([sys.executable, "-m", "dvc", "metrics", "show", "--json"], cwd=clone, text=True,
                           capture_output=True, timeout=300)
    assert shown.returncode == 0 and "failed to load" not in shown.stderr + shown.stdout, shown.stderr
    files = json.loads(shown.stdout)[""]["data"]
    assert all("error" not in entry for entry in files.values())
    corpus = read_records(ROOT / paths.CORPUS)
    rows = []
    for record in (r for r in corpus if r.k_shot is None):
        grid, task, backbone, _ = _locate(record)
        rows.append(files[paths.metrics_path(grid, task, backbone).as_posix()]["data"])
        assert rows[-1]["headline"] == record.headline
    assert sum("low" in row and "high" in row for row in rows) > len(rows) // 2  # the interval beside it


@pytest.mark.dvc
def test_dvc_sees_nothing_to_reproduce(params, lock, root_dvc):
    """No-op: code, params and committed outputs all match dvc.lock for every stage of the grids whose data is
    here, their upstream stages, collect and site (absent DVC-cached data on a fresh clone aside)."""
    grids = _grids_run_here(params)
    targets = [name for name in lock if name in ("collect", "site") or _grid_of(name) in grids]
    status = dvc_status(root_dvc, *targets)
    # a stage whose code fingerprint alone moved owes a re-run after a committed code change (harness.pipeline.owed:
    # a long re-run split by grid); its records still name the commit that produced them. Nothing else may drift.
    owed = owed_stages(ROOT)
    changed = sorted(stage for stage, entries in status.items()
                     if _real_changes(entries) and not (stage in owed and _only_code_moved(entries)))
    assert not changed, "stages out of date with dvc.lock:\n" + "\n".join(changed)
    print(f"{len(owed & set(status))} of {len(targets)} stages owe a re-run after a committed code change")


def _only_code_moved(entries) -> bool:
    """Whether every change `dvc status` reports (absent cached data aside) is a modified code fingerprint."""
    for entry in entries if isinstance(entries, list) else [entries]:
        if not isinstance(entry, dict):
            return False
        for kind, changes in entry.items():
            if not isinstance(changes, dict):
                return False
            for path, state in changes.items():
                if state not in ABSENT and (kind != "changed deps" or not path.startswith(FINGERPRINTS)):
                    return False
    return True


def _grid_of(stage: str) -> str | None:
    if stage.startswith("prepare-"):
        return None
    if stage.startswith("extract-"):
        return stage.removeprefix("extract-").split("-", 1)[0]
    return stage.split("-", 1)[0] if "@" in stage else None


# Each edit, and the stages DVC must flag for it (among the locked ones) — nothing more, nothing less.
def _is_probe(stage: str) -> bool:
    return "@" in stage and not stage.startswith(("extract-", "prepare-"))


EDITS = {
    "probes.retrieval.recall_at": (("params", "probes", "retrieval", "recall_at", [1, 10]),
                                   lambda s: _is_probe(s) and "-retrieval@" in s),
    "probes.depth.layers": (("params", "probes", "depth", "layers", [-2]),
                            lambda s: (_is_probe(s) and "-depth@" in s) or s.startswith("extract-scenes-scenes@")),
    "a backbone family module": (("code", "harness/backbones/cifar_resnet.py"),
                                 lambda s: s.startswith("extract-") and "@cifar_resnet" in s),
    "a dataset kind's module": (("code", "harness/datasets/distortion_2afc.py"),
                                lambda s: s == "prepare-distortion_2afc"),
    "harness/runs/records.py": (("code", "harness/runs/records.py"),
                                lambda s: _is_probe(s) or s in ("collect", "site")),
    "a leaderboard renderer": (("code", "harness/leaderboard/pages/boards.py"), lambda s: s == "site"),
}


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    workspace = tmp_path_factory.mktemp("deps") / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(workspace)], check=True, timeout=120)
    return workspace


@pytest.fixture(scope="module")
def unedited(clone) -> set[str]:
    """What `dvc status` flags in the clone as cloned (outputs DVC keeps out of git): each edit test restores
    its file's text afterwards, so this holds before every one of them."""
    return _flagged(clone)


def _flagged(workspace: Path) -> set[str]:
    return {stage for stage, entries in dvc_status(workspace).items() if _real_changes(entries)}


@pytest.mark.dvc
@pytest.mark.parametrize("what", list(EDITS))
def test_an_edit_reruns_exactly_the_stages_that_read_it(clone, unedited, lock, what):
    """In a clone, make one edit and compare what `dvc status` flags with what reads the edited thing. An edit
    reaches the stages through their fingerprints (code) or their grid's params file (params.yaml), which plain
    `dvc repro codedeps` rewrites (as a plain `dvc repro` of anything does first); the codedeps stage itself is
    then up to date again."""
    edit, reads = EDITS[what]
    before = unedited
    if edit[0] == "params":
        params_file = clone / "params.yaml"
        original = params_file.read_text()
        data = yaml.safe_load(original)
        *keys, value = edit[1:]
        node = data
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
        params_file.write_text(yaml.safe_dump(data, sort_keys=False))
    else:
        code_file = clone / edit[1]
        original = code_file.read_text()
        code_file.write_text(original + "\n# an edit\n")
    repro_code_stage(clone)
    try:
        flagged = _flagged(clone) - before
    finally:
        (clone / "params.yaml" if edit[0] == "params" else clone / edit[1]).write_text(original)
        repro_code_stage(clone)
    reading = {stage for stage in lock if reads(stage)}
    assert reading, f"no locked stage reads {what}"
    # a stage flagged before the edit owes a re-run after a committed code change (harness.pipeline.owed, a long
    # re-run split by grid): it cannot be flagged again, and it shows in neither set
    expected = reading - before
    print(f"edit of {what}: dvc status flags {len(flagged)} stages")  # the counts the pipeline issue reports
    assert flagged == expected, f"{what}: flagged {sorted(flagged - expected)} too many, " \
                                f"{sorted(expected - flagged)} missing"


def _all_stages() -> dict:
    """The stages of every committed dvc.yaml by name (harness.pipeline.stage_model)."""
    from harness.pipeline.stage_model import load_stages

    return load_stages(ROOT)


def _reads(stage) -> str:
    """The `--reads` an extract stage's command tells it."""
    return stage.cmd.split(" --reads ", 1)[1]


def test_stage_names_keep_the_run_ids_users_know(params):
    """Probe stages are `GRID-TASK@BACKBONE` (each record's run id); controls spelled NAME.random; each row's
    file holds its own backbone's stages only."""
    from harness.core.dvcfiles import dvc_files, file_grid

    stages = _all_stages()
    for grid, spec in params.grids.items():
        for task in spec.tasks:
            members = sorted(name.split("@", 1)[1] for name in stages if name.startswith(f"{grid}-{task}@"))
            # rows: one file per backbone, by path
            assert members == sorted(BackboneRef.parse(b).spelled for b in spec.backbones)
    assert all(re.fullmatch(r"[a-z0-9_-]+", spec.group) for spec in stages.values())
    for path in dvc_files(ROOT):
        if file_grid(path) is not None:
            for name, stage in yaml.safe_load((ROOT / path).read_text())["stages"].items():
                assert list(stage["foreach"]) == [path.parent.name], f"{path}: {name}"


def test_stages_read_a_folder_through_the_contents_file_its_writer_leaves_in_it():
    """No extract or probe stage depends on a prepared dataset or a features folder itself (DVC would walk its
    thousands of files once per dependent stage): each names the folder's contents file, which lies inside the
    output of exactly one stage, the one that writes the folder (so DVC orders them, and checks the folder once)."""
    from harness.core.contents import CONTENTS_NAME
    stages = _all_stages()
    folders = {out.path: name for name, stage in stages.items() for out in stage.outs
               if out.path.startswith(("data/", "features/"))}
    checked = 0
    for name, stage in stages.items():
        if not name.startswith(("extract-", "prepare-")) and "@" not in name:
            continue
        for dep in stage.deps:
            assert dep not in folders, f"{name} depends on the folder {dep}"
            if dep.endswith(f"/{CONTENTS_NAME}"):
                writers = [writer for folder, writer in folders.items() if dep == f"{folder}/{CONTENTS_NAME}"]
                assert len(writers) == 1, f"{name}: {dep} is written by {writers}"
                checked += 1
    readers = sum(1 for name in stages if name.startswith("extract-")) + 2 * sum(
        1 for name, stage in stages.items() if "@" in name and not name.startswith(("extract-", "prepare-")))
    assert checked == readers  # every extraction reads its dataset's file; every probe its features' and dataset's


def test_an_extraction_serves_only_the_grids_that_list_its_backbone(params):
    """A grid reading another's features (scenes_layers reads the scenes extraction at stride 16) asks its layer
    set of its own backbones only: clip_vitb32@random, not in scenes_layers, has no stride-16 layer to give."""
    stages = _all_stages()
    checked = 0
    for name, stage in stages.items():
        if not name.startswith("extract-"):
            continue
        for read in _reads(stage).split(","):
            grid = read.split(":", 1)[0]
            assert stage.row.backbone in {BackboneRef.parse(b).spelled for b in params.grids[grid].backbones}, \
                f"{name} serves {grid}"
            checked += 1
    assert "scenes_layers" not in _reads(stages["extract-scenes-scenes@clip_vitb32.random"])
    assert "scenes_layers" in _reads(stages["extract-scenes-scenes@efficientnet_lite0"])
    assert checked


def test_an_extraction_run_from_python_reads_what_its_dvc_stage_reads(params, monkeypatch):
    """`verify` and the API call the extract stage through harness.stages.calls: it must be told the same reads as
    the command line dvc.yaml gives DVC (verify once asked efficientnet_lite2 for scenes_layers' stride16)."""
    from harness.stages import calls as stage_calls

    told = {}
    monkeypatch.setattr(stage_calls.extract_stage, "run",
                        lambda grid, backbone, dataset, params, code, reads, *_: told.setdefault(backbone, reads))
    for name, stage in _all_stages().items():
        if not name.startswith("extract-"):
            continue
        row = stage.row
        told.clear()
        stage_calls.extract(row.grid, row.backbone, row.dataset, params)
        assert ",".join(told[row.backbone]) == _reads(stage), name


def test_dvc_is_told_whole_rows_as_one_target_each():
    """DVC loads a dvc.yaml and its lock once per target named: a row (one backbone's file in a grid) whose stages
    are all asked for is its file (`FILE:*` under --glob), the rest go by address, in the order given; a grid
    reading another's features comes after it; the prepare stages are `prepare-*` when all are asked."""
    from fnmatch import fnmatch

    from harness.pipeline.stage_model import RowKey, StageSpec
    from harness.pipeline.targets import dvc_targets

    root = [StageSpec(name, Path("dvc.yaml"), "c") for name in ("codedeps", "prepare-d", "prepare-e")]

    def row(grid: str, b: str, tasks: tuple[str, ...], extract: bool = True) -> list[StageSpec]:
        keys = [*([RowKey(grid, b, "d")] if extract else []), *(RowKey(grid, b, "d", t) for t in tasks)]
        return [StageSpec(f"{key.group}@{b}", key.file, "x", deps=(f"features/g/{b}/d/CONTENTS.sha256",), row=key)
                for key in keys]

    final = [StageSpec(name, Path("dvc.yaml"), "k") for name in ("collect", "site")]
    specs = [*root, *row("g", "x", ("t", "u")), *row("g", "y", ("t", "u")), *row("later", "x", ("t",), False),
             *final]
    stages = {spec.name: spec for spec in specs}
    gx, gy, lx = Path("pipelines/g/x/dvc.yaml"), Path("pipelines/g/y/dvc.yaml"), Path("pipelines/later/x/dvc.yaml")
    every = ["codedeps", "prepare-d", "prepare-e", "extract-g-d@x", "extract-g-d@y", "g-t@x", "g-t@y", "g-u@x",
             "g-u@y"]
    assert dvc_targets(every, stages) == [
        "codedeps", "prepare-d", "prepare-e", gx.as_posix(), gy.as_posix()]
    # every root stage named: without --glob (dvc status) the root file is one target, as a row's is
    assert dvc_targets([*every, "collect", "site"], stages) == ["dvc.yaml", gx.as_posix(), gy.as_posix()]
    assert dvc_targets([*every, "collect", "site"], stages, glob=True) == [
        "codedeps", "prepare-*", f"{gx.as_posix()}:*", f"{gy.as_posix()}:*", "collect", "site"]
    assert dvc_targets(every, stages, glob=True) == ["codedeps", "prepare-*", f"{gx.as_posix()}:*",
                                                     f"{gy.as_posix()}:*"]
    partial = ["codedeps", "prepare-d", "extract-g-d@x", "g-t@x", "g-t@y", "g-u@x"]
    assert dvc_targets(partial, stages, glob=True) == [
        "codedeps", "prepare-d", f"{gx.as_posix()}:*", f"{gy.as_posix()}:g-t@y"]
    # `later` reads g's features: named first, it still comes after g
    assert dvc_targets(["later-t@x", "extract-g-d@x"], stages) == [
        f"{gx.as_posix()}:extract-g-d@x", lx.as_posix()]
    # what the targets select is exactly what was asked for
    for names in (every, partial, every[:6]):
        chosen = set()
        for target in dvc_targets(names, stages, glob=True):
            file, _, pattern = target.rpartition(":")
            in_file = {spec.name for spec in specs if spec.file == Path(file or "dvc.yaml")}
            chosen |= {n for n in in_file if fnmatch(n, pattern)}
        assert chosen == set(names)


def test_a_backbones_extraction_reads_its_own_checkpoint_entry_only(params):
    """Weights of your own for one backbone (`checkpoints.NAME`) change that backbone's extract stages' params and
    no other stage's: the params key is the backbone's entry, never the whole block."""
    import copy

    from harness.pipeline.documents import documents

    mine = copy.deepcopy(params)
    mine.checkpoints["efficientnet_lite0"] = "weights/my_lite0.pth"
    before, after = documents(params), documents(mine)
    changed = {}
    for path, document in after.items():
        for name, stage in document["stages"].items():
            old = before.get(path, {}).get("stages", {}).get(name)
            if old != stage:
                changed[(path.as_posix(), name)] = stage
    assert changed and all(name.startswith("extract-") and "/efficientnet_lite0/" in path
                           for path, name in changed), sorted(changed)
    for stage in changed.values():
        keys = [key for entry in stage["do"]["params"] for keys in entry.values() for key in keys]
        assert "checkpoints.efficientnet_lite0" in keys and "checkpoints" not in keys
    for document in before.values():
        for stage in document["stages"].values():
            keys = [key for entry in stage.get("do", stage).get("params", []) if isinstance(entry, dict)
                    for keys in entry.values() for key in keys]
            assert "checkpoints" not in keys
