"""The stage entry points end to end on a tiny generated project: ok runs, failed runs, cache reuse, and
the per-sample files beside each record."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import image_project_params, write_image_folder

from harness.core import paths
from harness.core.config import load_params
from harness.core.hashing import sha256_file
from harness.datasets.manifest import Manifest
from harness.executors.report import report_failures
from harness.pipeline.plan import select_runs
from harness.runs import extract as extract_module
from harness.runs import failures
from harness.runs.failed_records import failed_records
from harness.runs.records import read_records
from harness.runs.samples import read_samples
from harness.stages import calls as stages
from harness.stages.common import StageFailed


def _extracted_control(work: Path, images: Path):
    """Params of a one-control grid, with its dataset prepared and its features extracted."""
    (work / "params.yaml").write_text(yaml.safe_dump(image_project_params(images, ["cifar_resnet20.random"])))
    params = load_params()
    stages.prepare("tiny", params)
    stages.extract("g", "cifar_resnet20.random", "tiny", params)
    return params


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_image_folder(tmp_path / "images")
    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.chdir(work)
    return work, tmp_path / "images"


def _run_grid(params):
    """Every stage of grid g, as `dvc repro --keep-going` would: a failed extract skips its probes."""
    stages.prepare("tiny", params)
    for backbone in params.grids["g"].backbones:
        try:
            stages.extract("g", backbone, "tiny", params)
        except StageFailed:
            continue
        for task in params.grids["g"].tasks:
            with contextlib.suppress(StageFailed):
                stages.probe("g", task, backbone, params)
    return stages.collect(params)


def test_ok_runs_land_in_the_corpus_and_failures_are_kept_apart(project):
    work, images = project
    backbones = ["cifar_resnet20.random", "resnet18"]
    (work / "params.yaml").write_text(yaml.safe_dump(image_project_params(images, backbones)))
    params = load_params()
    _run_grid(params)
    # the CLI turns the failed extract (no resnet18 weights offline) into a failed record per run that needed it
    runs, _ = select_runs(params)
    failed = report_failures(runs, dvc_failed=True)
    assert {run.stage for run, _, _ in failed} == {"g-classification@resnet18", "g-retrieval@resnet18"}
    records = {r.run_id: r for r in stages.collect(params)}
    assert set(records) == {"g-classification@cifar_resnet20.random", "g-retrieval@cifar_resnet20.random"}
    ok = records["g-classification@cifar_resnet20.random"]
    assert ok.status == "ok" and ok.backbone.control and ok.backbone_name == "cifar_resnet20@random"
    assert 0.0 <= ok.metrics["top1"] <= 1.0 and "train_top1" in ok.metrics
    assert ok.dataset.size == 8 and ok.dataset.split == "val"
    attempts = {r.run_id: r for r in read_records(paths.FAILED_CORPUS)}
    assert set(attempts) == {"g-classification@resnet18", "g-retrieval@resnet18"}
    failed_run = attempts["g-retrieval@resnet18"]
    assert failed_run.status == "failed" and failed_run.metrics == {}
    assert failed_run.failure.phase == "load_backbone"
    assert "checkpoint" in failed_run.failure.message and "SHA-256" in failed_run.failure.message
    assert read_records(paths.CORPUS) == sorted(records.values(), key=lambda r: r.run_id)
    val_paths = [item.path for item in Manifest.load(paths.manifest_path("tiny")).split("val")]
    assert_samples_match(ok, "g", "classification", "cifar_resnet20.random", val_paths, "image", ["top1", "top5"])
    retrieval = records["g-retrieval@cifar_resnet20.random"]
    assert_samples_match(retrieval, "g", "retrieval", "cifar_resnet20.random", val_paths, "query",
                         ["map", "recall@1", "recall@5"])
    for task in ("classification", "retrieval"):  # a run that never succeeded has no outputs at all
        assert not paths.samples_path("g", task, "resnet18").exists()
        assert not paths.record_path("g", task, "resnet18").exists()
    written = stages.site()
    assert Path("docs/index.md") in written
    task_page = Path("docs/tasks/retrieval.md").read_text()
    assert "g-retrieval@resnet18" in task_page
    assert "visbench-harness grid=g task=retrieval backbone=resnet18" in task_page


def test_a_failed_rerun_keeps_the_ok_record_and_a_later_success_clears_the_failure(project, monkeypatch):
    from harness.runs import probe_run

    work, images = project
    params = _extracted_control(work, images)
    [good] = stages.probe("g", "classification", "cifar_resnet20.random", params)
    record_file = paths.record_path("g", "classification", "cifar_resnet20.random")
    kept = {p: p.read_bytes() for p in (record_file, paths.samples_path("g", "classification", "cifar_resnet20.random"),
                                         paths.metrics_path("g", "classification", "cifar_resnet20.random"))}

    def broken(job, params, probe_params, shot=None, saved_head=None):
        return real(job, params, {**probe_params, "train_split": "nope"}, shot, saved_head)

    real = probe_run.run_probe
    monkeypatch.setattr(stages.probe_stage, "run_probe", broken)
    with pytest.raises(StageFailed, match=r"g-classification@cifar_resnet20\.random: 1 of 1 run"):
        stages.probe("g", "classification", "cifar_resnet20.random", params)
    assert {p: p.read_bytes() for p in kept} == kept  # nothing the good run wrote was touched
    [attempt] = failed_records("g-classification@cifar_resnet20.random")
    assert attempt.status == "failed" and attempt.failure.phase == "probe"
    assert [r.run_id for r in stages.collect(params)] == [good.run_id]
    assert [r.run_id for r in read_records(paths.FAILED_CORPUS)] == [good.run_id]
    monkeypatch.setattr(stages.probe_stage, "run_probe", real)
    [again] = stages.probe("g", "classification", "cifar_resnet20.random", params)
    assert again.metrics == good.metrics and not paths.failure_path(again.run_id).exists()


def test_a_rerun_that_reproduces_the_record_keeps_its_files_and_one_that_differs_replaces_them(
        project, monkeypatch, caplog):
    from harness.runs import probe_run

    work, images = project
    params = _extracted_control(work, images)
    [first] = stages.probe("g", "classification", "cifar_resnet20.random", params)
    files = [paths.record_path("g", "classification", "cifar_resnet20.random"),
             paths.samples_path("g", "classification", "cifar_resnet20.random"),
             paths.head_path("g", "classification", "cifar_resnet20.random")]
    kept = {p: p.read_bytes() for p in files}
    assert first.samples.auxiliary == ["label", "predicted"]
    assert first.samples.statistics == {"macro_f1": "macro_f1:2"}  # the tiny project's two classes
    with caplog.at_level("INFO", logger="visbench"):
        [again] = stages.probe("g", "classification", "cifar_resnet20.random", params)
    assert "reproduced: kept the committed record" in caplog.text
    # the record names the run that computed it (its duration and environment), byte for byte
    assert {p: p.read_bytes() for p in files} == kept and again == first

    real = probe_run.run_probe

    def moved(job, params, probe_params, shot=None, saved_head=None):  # one last-bit change in one metric
        outcome = real(job, params, probe_params, shot, saved_head)
        record = outcome.record.model_copy(update={"metrics": {**outcome.record.metrics,
                                                               "train_top1": outcome.record.metrics["train_top1"] / 2}})
        return dataclasses.replace(outcome, record=record)

    monkeypatch.setattr(stages.probe_stage, "run_probe", moved)
    [changed] = stages.probe("g", "classification", "cifar_resnet20.random", params)
    assert changed.metrics["train_top1"] == first.metrics["train_top1"] / 2
    assert read_records(files[0])[0].metrics == changed.metrics


@pytest.mark.parametrize("edit", ["samples", "head"])
def test_a_rerun_rewrites_a_samples_or_head_file_edited_since_its_record(project, edit):
    work, images = project
    params = _extracted_control(work, images)
    stages.probe("g", "classification", "cifar_resnet20.random", params)
    samples_file = paths.samples_path("g", "classification", "cifar_resnet20.random")
    head_file = paths.head_path("g", "classification", "cifar_resnet20.random")
    written = {samples_file: samples_file.read_bytes(), head_file: head_file.read_bytes()}
    if edit == "samples":  # a hand edit of one score: same shape, other bytes
        lines = samples_file.read_text().splitlines(keepends=True)
        lines[1] = lines[1].replace("1", "0", 1) if "1" in lines[1] else lines[1].replace("0", "1", 1)
        samples_file.write_text("".join(lines))
    else:  # a truncated head
        head_file.write_bytes(written[head_file][:-4])
    assert samples_file.read_bytes() + head_file.read_bytes() != written[samples_file] + written[head_file]
    stages.probe("g", "classification", "cifar_resnet20.random", params)
    assert {p: p.read_bytes() for p in written} == written  # the re-run wrote them back, not kept the edit


def test_a_full_disk_at_the_write_fails_the_stage_in_one_line_and_keeps_the_ok_record(project, monkeypatch, capsys):
    import argparse
    import errno
    import os

    from harness.core import atomic
    from harness.runs import probe_run
    from harness.stages.common import stage_main

    work, images = project
    params = _extracted_control(work, images)
    stages.probe("g", "classification", "cifar_resnet20.random", params)
    files = [paths.record_path("g", "classification", "cifar_resnet20.random"),
             paths.samples_path("g", "classification", "cifar_resnet20.random"),
             paths.head_path("g", "classification", "cifar_resnet20.random"),
             paths.metrics_path("g", "classification", "cifar_resnet20.random")]
    kept = {p: p.read_bytes() for p in files}
    real = probe_run.run_probe

    def moved(job, params, probe_params, shot=None, saved_head=None):  # a run that differs: every file rewritten
        outcome = real(job, params, probe_params, shot, saved_head)
        record = outcome.record.model_copy(update={"metrics": {**outcome.record.metrics, "train_top1": 0.125}})
        return dataclasses.replace(outcome, record=record)

    real_replace = os.replace

    def full_disk(src, dst):  # the disk fills when the record is renamed, after its samples file landed
        if Path(dst) == files[0]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_replace(src, dst)

    monkeypatch.setattr(stages.probe_stage, "run_probe", moved)
    monkeypatch.setattr(atomic.os, "replace", full_disk)
    capsys.readouterr()
    code = stage_main("probe", argparse.ArgumentParser(),
                      lambda _: stages.probe("g", "classification", "cifar_resnet20.random", params), [])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert line == f"probe: FAILED: {files[0]}: No space left on device: free space and re-run"
    assert {p: p.read_bytes() for p in files} == kept  # all or nothing: the ok record and its files, byte for byte
    assert not [p for p in files[0].parent.iterdir() if p.name.startswith(".")]  # no temporary left behind
    [attempt] = failed_records("g-classification@cifar_resnet20.random")
    assert attempt.status == "failed" and attempt.failure.phase == "write" and str(files[0]) in attempt.failure.message
    monkeypatch.setattr(atomic.os, "replace", real_replace)
    [again] = stages.probe("g", "classification", "cifar_resnet20.random", params)  # a plain re-run writes it all
    assert again.metrics["train_top1"] == 0.125 and read_records(files[0])[0].metrics == again.metrics
    assert files[1].read_bytes() != b"" and not paths.failure_path(again.run_id).exists()


def test_a_failure_to_record_the_failed_write_is_still_one_line(project, monkeypatch, capsys):
    import argparse
    import errno
    import os

    from harness.core import atomic
    from harness.stages.common import stage_main

    work, images = project
    params = _extracted_control(work, images)

    def read_only(src, dst):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(atomic.os, "replace", read_only)
    capsys.readouterr()
    code = stage_main("probe", argparse.ArgumentParser(),
                      lambda _: stages.probe("g", "classification", "cifar_resnet20.random", params), [])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and "Read-only file system: make the filesystem writable and re-run" in line
    assert "nor could the failed attempt be recorded in failures/" in line
    assert not paths.record_path("g", "classification", "cifar_resnet20.random").exists()


def _entries(backbone: str = "cifar_resnet20.random") -> list[Path]:
    return sorted((paths.features_dir("g", backbone, "tiny") / "entries").rglob("*.npyz"))


def _computed() -> int:
    """How many images the last extraction computed (its cache statistics, beside the features folder)."""
    import json

    folder = paths.features_dir("g", "cifar_resnet20.random", "tiny")
    return json.loads(folder.with_name(folder.name + ".cache-stats.json").read_text())["computed"]


def test_a_rotted_feature_fails_the_probe_in_one_line_and_the_next_plain_run_reextracts_it(project):
    import os

    work, images = project
    params = _extracted_control(work, images)
    entry = _entries()[0]
    good, stat = entry.read_bytes(), entry.stat()
    rotted = bytearray(good)
    rotted[-40] ^= 0xFF  # a flipped byte in the array, the mtime DVC knows kept
    entry.write_bytes(bytes(rotted))
    os.utime(entry, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(StageFailed) as caught:
        stages.probe("g", "classification", "cifar_resnet20.random", params)
    assert len(str(caught.value).splitlines()) == 1
    assert f"the feature entry {entry} of " in str(caught.value)
    assert str(caught.value).endswith("failed its recorded hash and was removed: the next plain run re-extracts it")
    assert not entry.exists()
    stages.extract("g", "cifar_resnet20.random", "tiny", params)  # what the next plain run runs first
    assert entry.read_bytes() == good and _computed() == 1
    [record] = stages.probe("g", "classification", "cifar_resnet20.random", params)
    assert record.status == "ok"


def test_an_interrupted_extraction_keeps_its_verified_entries_and_nothing_else(project):
    work, images = project
    params = _extracted_control(work, images)
    entries = _entries()
    written = {p: p.read_bytes() for p in entries}
    for lost in entries[:3]:  # the run was killed before these were written
        lost.unlink()
    rotted = bytearray(written[entries[3]])
    rotted[-40] ^= 0xFF  # and one kept entry rotted since: reused only if it passes its hash
    entries[3].write_bytes(bytes(rotted))
    folder = paths.features_dir("g", "cifar_resnet20.random", "tiny")
    (entries[4].parent / ".tmp-half").write_bytes(b"an interrupted write")
    (folder / "entries" / "zz").mkdir()
    (folder / "entries" / "zz" / f"{'z' * 40}.npyz").write_bytes(b"an entry of a read no longer asked for")
    (folder / "stray.txt").write_text("not the extraction's")
    stages.extract("g", "cifar_resnet20.random", "tiny", params)
    assert _computed() == 4  # the three lost and the rotted one; every other entry was reused
    assert {p: p.read_bytes() for p in _entries()} == written
    assert sorted(p.name for p in folder.iterdir()) == ["CONTENTS.sha256", "entries", "extraction.json"]
    assert not list((folder / "entries").rglob(".tmp-*")) and not (folder / "entries" / "zz").exists()
    # the Python API's workspace shares one features folder between tasks: another read's entries stay there
    (folder / "entries" / "zz").mkdir()
    (folder / "entries" / "zz" / f"{'z' * 40}.npyz").write_bytes(b"another task's entry")
    stages.extract("g", "cifar_resnet20.random", "tiny", params, prune=False)
    assert (folder / "entries" / "zz" / f"{'z' * 40}.npyz").is_file() and _computed() == 0


def assert_samples_match(record, grid, task, backbone, ids, unit, columns):
    """The record points at its samples file by project-relative path; hash, ids and means agree."""
    info = record.samples
    path = paths.samples_path(grid, task, backbone)
    assert info.path == f"results/{grid}/{task}/{backbone}.samples.csv" == path.as_posix()
    assert path.is_file() and sha256_file(path) == info.sha256
    assert info.unit == unit and info.columns == columns and info.count == len(ids)
    read_ids, read_columns = read_samples(info)
    assert read_ids == ids and sorted(read_columns) == sorted(columns + info.auxiliary)
    for name in info.columns:
        assert np.isclose(read_columns[name].mean(), record.metrics[name], rtol=0, atol=1e-12), name


def test_a_corrupt_image_fails_the_extract_stage_and_names_the_file(project):
    work, images = project
    bad = images / "val" / "class0" / "0.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    (work / "params.yaml").write_text(yaml.safe_dump(image_project_params(images, ["cifar_resnet20.random"])))
    params = load_params()
    stages.prepare("tiny", params)
    with pytest.raises(StageFailed, match=r"cannot decode"):
        stages.extract("g", "cifar_resnet20.random", "tiny", params)
    failure = failures.stage_failure("extract-g-tiny@cifar_resnet20.random")
    assert failure.phase == "extract" and str(bad) in failure.message
    assert not paths.samples_path("g", "classification", "cifar_resnet20.random").exists()


def test_cached_images_are_never_decoded_again(project, monkeypatch):
    work, images = project
    params = _extracted_control(work, images)
    [first] = stages.probe("g", "classification", "cifar_resnet20.random", params)

    manifest = Manifest.load(paths.manifest_path("tiny"))
    timed = [manifest.resolve(item) for item in manifest.items[:4]]
    real = extract_module.load_image

    def refuse(path):
        # the early decode (beside the backbone's build) reads ahead before the cache is checked and stops on an
        # error; beyond it, only the batch the stage times (runs.throughput: the dataset's first images, the tiny
        # project's batch of 4) may be decoded
        if threading.current_thread().name != "early-decode" and Path(path) not in timed:
            raise AssertionError(f"decoded {path} although its features are cached")
        return real(path)

    monkeypatch.setattr(extract_module, "load_image", refuse)
    stages.extract("g", "cifar_resnet20.random", "tiny", params)
    assert len(manifest.items) > len(timed)
    [again] = stages.probe("g", "classification", "cifar_resnet20.random", params)
    assert again.status == "ok" and again.metrics == first.metrics
    assert again.samples == first.samples  # same bytes, same SHA-256


def test_only_pooled_features_are_stored_for_pooled_tasks(project):
    work, images = project
    _extracted_control(work, images)
    entries = list((paths.features_dir("g", "cifar_resnet20.random", "tiny") / "entries").rglob("*.npyz"))
    assert len(entries) == 16  # one pooled entry per image, no dense maps
    assert all(p.stat().st_size < 1024 for p in entries)


def test_prepare_and_extract_leave_a_contents_file_that_sha256sum_checks(project):
    """The stages downstream depend on these files (harness.core.contents): each lists every other file of its
    folder, so a changed file changes it, and `sha256sum -c` reads it."""
    from harness.core.contents import CONTENTS_NAME

    work, images = project
    _extracted_control(work, images)
    for folder in (paths.dataset_dir("tiny"), paths.features_dir("g", "cifar_resnet20.random", "tiny")):
        listed = {}
        for line in (folder / CONTENTS_NAME).read_text().splitlines():
            digest, name = line.split("  ", 1)
            listed[name] = digest
        files = {p.relative_to(folder).as_posix(): p for p in folder.rglob("*") if p.is_file()}
        assert set(listed) == set(files) - {CONTENTS_NAME} and listed
        assert all(sha256_file(files[name]) == digest for name, digest in listed.items())
        if shutil.which("sha256sum"):
            check = subprocess.run(["sha256sum", "--check", "--quiet", CONTENTS_NAME], cwd=folder,
                                   capture_output=True, text=True)
            assert check.returncode == 0, check.stdout + check.stderr


def test_verify_reproduces_committed_records_exactly_and_flags_an_edit(project):
    from harness.cli.verify import verify_runs
    from harness.runs.records import write_records

    work, images = project
    (work / "params.yaml").write_text(yaml.safe_dump(image_project_params(images, ["cifar_resnet20.random"])))
    params = load_params()
    corpus = _run_grid(params)
    runs, _ = select_runs(params)
    checks = verify_runs(runs, params)
    assert checks and all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert all(c.difference == 0.0 for c in checks)  # same CPU build: bit-identical, tolerance 0
    assert sorted(c.run_id for c in checks if c.metric == "samples_sha256") == sorted(r.run_id for r in corpus)

    tampered = [r.model_copy(update={"metrics": {**r.metrics, r.headline_metric: r.headline + 0.001}})
                for r in corpus]
    write_records(paths.CORPUS, tampered)
    assert not all(c.ok for c in verify_runs(runs, params))

    # metrics intact, but the committed per-sample file is not the one the re-run writes
    swapped = [r.model_copy(update={"samples": r.samples.model_copy(update={"sha256": "0" * 64})})
               for r in corpus]
    write_records(paths.CORPUS, swapped)
    bad = [c for c in verify_runs(runs, params) if not c.ok]
    # the re-run's file is not the one the records name, and neither is the committed file on disk
    assert bad and {c.metric for c in bad} == {"samples_sha256", "samples_file"}

    # records intact, a committed per-sample file edited on disk: verify checks the file, not only the records
    write_records(paths.CORPUS, corpus)
    edited = Path(corpus[0].samples.path)
    original = edited.read_bytes()
    edited.write_bytes(original.replace(b"\n", b"\n ", 1))
    bad = [c for c in verify_runs(runs, params) if not c.ok]
    assert [(c.run_id, c.metric) for c in bad] == [(corpus[0].run_id, "samples_file")]
    assert str(edited) in bad[0].note
    edited.write_bytes(original)

    # what another CPU's kernels do: every metric and per-sample score off in the last bits. Exact by default;
    # within a tolerance when one is given, the per-sample files then compared value by value
    from harness.core.hashing import sha256_file

    rounded = []
    for record in corpus:
        samples = Path(record.samples.path)
        header, *rows = samples.read_text().splitlines()
        samples.write_text("\n".join([header, *(",".join([row.split(",")[0], *(repr(float(v) + 3e-7) for v in
                                                                               row.split(",")[1:])])
                                                for row in rows)]) + "\n")
        rounded.append(record.model_copy(update={
            "metrics": {name: value + 3e-7 for name, value in record.metrics.items()},
            "samples": record.samples.model_copy(update={"sha256": sha256_file(samples)})}))
    write_records(paths.CORPUS, rounded)
    assert {c.metric for c in verify_runs(runs, params) if not c.ok} >= {"samples_sha256", corpus[0].headline_metric}
    within = verify_runs(runs, params, tolerance=1e-6)
    assert within and all(c.ok for c in within), [c for c in within if not c.ok]
    assert {c.metric for c in within} >= {"samples_max_diff"} and "samples_sha256" not in {c.metric for c in within}
    assert all(abs(c.difference) == pytest.approx(3e-7, rel=1e-3) for c in within if not c.same_or_not)
    assert all(c.ok for c in within if c.metric == "samples_file")  # the rewritten files match their records
    assert not all(c.ok for c in verify_runs(runs, params, tolerance=1e-7))


def test_metrics_that_are_not_their_column_means_fail_the_run(project, monkeypatch):
    import dataclasses

    from harness.probes import ProbeResult, get_probe
    from harness.runs import probe_run

    work, images = project
    params = _extracted_control(work, images)
    real = get_probe("classification")

    def off_by_a_little(inputs):
        result = real.run(inputs)
        return ProbeResult({**result.metrics, "top5": result.metrics["top5"] - 1e-9}, result.sample_ids,
                           result.samples, result.unit)

    spec = dataclasses.replace(real, run=off_by_a_little)
    monkeypatch.setattr(probe_run, "get_probe", lambda task: spec)
    with pytest.raises(StageFailed):
        stages.probe("g", "classification", "cifar_resnet20.random", params)
    [record] = failed_records("g-classification@cifar_resnet20.random")
    assert record.status == "failed" and record.failure.phase == "probe"
    assert "top5" in record.failure.message and "mean of its per-sample column" in record.failure.message
    assert record.samples is None and record.metrics == {}
    assert not paths.samples_path("g", "classification", "cifar_resnet20.random").exists()


@pytest.mark.parametrize("change, message", [
    ({"metrics": {"top1": 0.5 + 2e-12, "top5": 1.0}}, "not the mean"),
    ({"metrics": {"top1": 0.5}}, "'top5' has no metric"),
    ({"sample_ids": ["a", "b", "c"]}, "2 rows for 3 ids"),
    ({"metrics": {"top1": float("nan"), "top5": 1.0}}, "non-finite"),
    ({"metrics": {"top5": 1.0}, "samples": {"top5": np.ones(2)}}, "headline"),
])
def test_check_result_refuses_inconsistent_results(change, message):
    import dataclasses

    from harness.probes import ProbeResult, get_probe
    from harness.runs.probe_run import check_result

    spec = dataclasses.replace(get_probe("classification"), statistics={})  # test_resampled.py checks those
    good = ProbeResult({"top1": 0.5, "top5": 1.0}, ["a", "b"], {"top1": np.array([0.0, 1.0]),
                                                              "top5": np.array([1.0, 1.0])}, "image")
    check_result(spec, good)
    check_result(spec, dataclasses.replace(good, metrics={"top1": 0.5 + 1e-13, "top5": 1.0}))  # rounding
    with pytest.raises((ValueError, KeyError), match=message):
        check_result(spec, dataclasses.replace(good, **change))


def test_a_grid_override_reads_a_named_layer_set_and_the_record_says_which_layers(project):
    work, images = project
    data = image_project_params(images, ["cifar_resnet20.random"])
    data["grids"]["g"]["probes"] = {"classification": {"layers": "stride2"}}
    (work / "params.yaml").write_text(yaml.safe_dump(data))
    params = load_params()
    stages.prepare("tiny", params)
    stages.extract("g", "cifar_resnet20.random", "tiny", params)
    [record] = stages.probe("g", "classification", "cifar_resnet20.random", params)
    assert record.layers == [1]  # cifar_resnet20's deepest layer of stride ≤ 2
    [retrieval] = stages.probe("g", "retrieval", "cifar_resnet20.random", params)
    assert retrieval.layers is None  # the override is classification's only
    data["grids"]["g"]["probes"] = {"classification": {"layers": "stride16"}}
    (work / "params.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(StageFailed, match="no layer set 'stride16'"):
        stages.extract("g", "cifar_resnet20.random", "tiny", load_params())
