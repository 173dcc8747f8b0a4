"""Run records: lossless JSON round trips, strict validation, and atomic writes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from harness.runs.records import (
    SCHEMA_VERSION,
    BackboneInfo,
    DatasetInfo,
    Environment,
    Failure,
    Record,
    RecordError,
    SamplesInfo,
    dump_record,
    parse_record,
    read_records,
    write_records,
    write_text_atomic,
)

ENVIRONMENT = Environment(
    harness_version="0.1.0", git_commit="0123456789abcdef0123456789abcdef01234567", git_dirty=True,
    python="3.11.9", torch="2.14.1", timm="1.0.20", open_clip="3.0.0", numpy="2.3.0", device="cpu",
    image="visbench@sha256:" + "e" * 64,
)
BACKBONE = BackboneInfo(
    name="resnet18@random", identity="0123456789abcdef", control=True,
    weights={"kind": "random", "seed": 0, "init": "timm defaults", "state_sha256": "ab" * 32},
    architecture={"family": "timm", "model": "resnet18"},
    preprocess={"library": "pillow", "crop": 224, "resize": 235, "mean": [0.485, 0.456, 0.406],
                "std": [0.229, 0.224, 0.225], "interpolation": "bicubic"},
)
DATASET = DatasetInfo(name="fashion_mnist", identity="fedcba9876543210", split="val", size=400,
                      params={"per_class": {"train": 80, "val": 40}})


SAMPLES = SamplesInfo(path="results/default/classification/resnet18.random.samples.csv", sha256="cd" * 32,
                      count=400, unit="image", columns=["top1", "top5"])


def make_record(**changes) -> Record:
    fields = dict(
        schema_version=SCHEMA_VERSION, run_id="default-classification@resnet18.random", backbone=BACKBONE,
        backbone_name="resnet18@random", task="classification", level="high",
        protocol="linear-probe-adamw/v1", protocol_params={"epochs": 100, "lr": 0.001, "batch_size": 64},
        dataset=DATASET, pooling_requested="default", pooling_resolved="avg", feature_mode="pooled",
        layers=[3, 4], precision="fp32", image_size=224, seed=0,
        metrics={"top1": 0.6125, "top5": 0.93, "macro_f1": 0.6, "train_top1": 1.0}, headline_metric="top1",
        higher_is_better={"top1": True, "top5": True, "macro_f1": True, "train_top1": True},
        tolerances={"top1": 0.0, "top5": 0.0, "macro_f1": 0.0, "train_top1": 0.0}, status="ok",
        failure=None, duration_s=12.5, environment=ENVIRONMENT, samples=SAMPLES,
    )
    fields.update(changes)
    return Record(**fields)


FAILED = make_record(
    status="failed", metrics={}, higher_is_better={}, tolerances={}, backbone=None, pooling_resolved=None,
    samples=None, failure=Failure(phase="load_backbone", error_type="WeightsUnavailableError", message="download X"),
)


def _as_dict(record: Record) -> dict:
    return json.loads(dump_record(record))


@pytest.mark.parametrize("record", [make_record(), FAILED], ids=["ok", "failed"])
def test_dump_parse_round_trip(record):
    text = dump_record(record)
    parsed = parse_record(text)
    assert parsed == record
    assert dump_record(parsed) == text  # byte-stable
    assert "\n" not in text  # one record per JSON line


def test_every_field_is_dumped():
    assert set(_as_dict(make_record())) == set(Record.model_fields)
    assert make_record().headline == 0.6125
    assert FAILED.headline is None


def test_dump_is_canonical():
    text = dump_record(make_record())
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def test_unknown_field_is_refused_by_name():
    payload = {**_as_dict(make_record()), "accuracy_note": "x"}
    with pytest.raises(RecordError, match="accuracy_note"):
        parse_record(json.dumps(payload))


def test_unknown_nested_field_is_refused_by_name():
    payload = _as_dict(make_record())
    payload["backbone"]["weights_url"] = "https://example.invalid"
    with pytest.raises(RecordError, match=r"backbone\.weights_url"):
        parse_record(json.dumps(payload))


def test_version_1_records_remain_readable():
    """Version 1 predates per-sample files: such records carry no `samples` and read with samples=None."""
    payload = _as_dict(make_record())
    del payload["samples"], payload["k_shot"]
    payload["schema_version"] = 1
    record = parse_record(json.dumps(payload))
    assert record.schema_version == 1 and record.samples is None and record.k_shot is None
    assert record.metrics == make_record().metrics
    assert parse_record(dump_record(record)) == record  # and round-trips as version 1


def test_version_2_records_read_as_full_split_runs():
    """Version 2 predates few-shot runs: no `k_shot`, which reads as None (trained on the full split)."""
    payload = _as_dict(make_record())
    del payload["k_shot"]
    payload["schema_version"] = 2
    record = parse_record(json.dumps(payload))
    assert record.schema_version == 2 and record.k_shot is None and record.samples == SAMPLES
    assert parse_record(dump_record(record)) == record
    with pytest.raises(RecordError, match="k_shot arrived in schema version 3"):
        parse_record(json.dumps({**payload, "k_shot": 4}))


def test_version_3_records_read_without_warnings_or_target_sources():
    """Version 3 predates `warnings`, `dataset.target_sources` and `environment.opencv`: they read empty/None."""
    payload = _as_dict(make_record())
    del payload["warnings"], payload["dataset"]["target_sources"], payload["environment"]["opencv"]
    payload["schema_version"] = 3
    record = parse_record(json.dumps(payload))
    assert record.warnings == [] and record.dataset.target_sources == {} and record.environment.opencv is None
    assert parse_record(dump_record(record)) == record


def test_warnings_round_trip_on_ok_records_and_are_refused_on_failed_ones():
    record = make_record(warnings=["near chance: ...; re-run with probes.surface_normal.uncertainty: false"])
    assert parse_record(dump_record(record)).warnings == record.warnings
    failed = {**_as_dict(make_record()), "status": "failed", "metrics": {},
              "failure": {"phase": "probe", "error_type": "ValueError", "message": "x"},
              "warnings": ["near chance"]}
    with pytest.raises(RecordError, match="warnings belong to ok records"):
        parse_record(json.dumps(failed))


def test_few_shot_record_round_trips():
    record = make_record(run_id="fewshot-classification@resnet18.random.k4.s2", k_shot=4, seed=2,
                         protocol_params={"epochs": 100, "k_shot": 4, "k_shot_unit": "images_per_class",
                                          "subset_seed": 2, "subset_size": 40, "subset_sha256": "ab" * 32})
    assert record.schema_version == SCHEMA_VERSION
    text = dump_record(record)
    assert parse_record(text) == record and json.loads(text)["k_shot"] == 4
    for bad in (0, -1, "four"):
        with pytest.raises(RecordError, match="k_shot"):
            parse_record(json.dumps({**_as_dict(record), "k_shot": bad}))


def test_samples_info_is_strict():
    payload = _as_dict(make_record())
    payload["samples"]["rows"] = 3
    with pytest.raises(RecordError, match=r"samples\.rows"):
        parse_record(json.dumps(payload))
    del payload["samples"]["rows"], payload["samples"]["sha256"]
    with pytest.raises(RecordError, match=r"samples\.sha256"):
        parse_record(json.dumps(payload))


def test_newer_schema_is_refused():
    payload = {**_as_dict(make_record()), "schema_version": SCHEMA_VERSION + 1}
    with pytest.raises(RecordError) as error:
        parse_record(json.dumps(payload), source="corpus.jsonl:3")
    message = str(error.value)
    assert "newer" in message and str(SCHEMA_VERSION + 1) in message and "corpus.jsonl:3" in message


@pytest.mark.parametrize("field", ["metrics", "run_id", "environment", "status"])
def test_missing_required_field_is_refused(field):
    payload = _as_dict(make_record())
    del payload[field]
    with pytest.raises(RecordError, match=field):
        parse_record(json.dumps(payload))


@pytest.mark.parametrize(
    "change", [{"status": "maybe"}, {"level": "top"}, {"feature_mode": "sparse"}, {"metrics": {"top1": "high"}}]
)
def test_invalid_values_are_refused(change):
    with pytest.raises(RecordError):
        parse_record(json.dumps({**_as_dict(make_record()), **change}))


def test_bad_json_is_a_record_error():
    with pytest.raises(RecordError):
        parse_record('{"run_id": ')


def test_records_are_frozen():
    with pytest.raises(ValidationError, match="frozen"):
        make_record().seed = 3


def test_write_read_records_round_trip(tmp_path):
    records = [make_record(), FAILED, make_record(run_id="other", seed=1)]
    path = tmp_path / "sub" / "corpus.jsonl"
    write_records(path, records)
    assert read_records(path) == records
    assert path.read_text().count("\n") == 3
    write_records(path, records[:1])  # rewriting replaces, never appends
    assert read_records(path) == records[:1]


def test_read_records_skips_blank_lines_and_names_the_bad_line(tmp_path):
    path = tmp_path / "corpus.jsonl"
    good = dump_record(make_record())
    path.write_text(f"{good}\n\n{good}\n")
    assert len(read_records(path)) == 2
    path.write_text(f"{good}\n{good[:-1]}, \"bogus\": 1}}\n")
    with pytest.raises(RecordError, match=r"corpus\.jsonl:2"):
        read_records(path)


def test_write_text_atomic_leaves_no_temp_files(tmp_path):
    path = tmp_path / "deep" / "er" / "file.txt"
    write_text_atomic(path, "one\n")
    write_text_atomic(path, "two\n")
    assert path.read_text() == "two\n"
    assert [p.name for p in path.parent.iterdir()] == ["file.txt"]


def test_write_text_atomic_failure_keeps_the_old_file(tmp_path):
    path = tmp_path / "file.txt"
    write_text_atomic(path, "old\n")
    with pytest.raises(TypeError):
        write_text_atomic(path, 123)  # type: ignore[arg-type]
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["file.txt"]


def test_an_interval_is_seeded_by_the_scores_never_by_the_run_id():
    """The same per-sample scores under two run ids (a user's runs of the same data) give the same interval; other
    scores a different draw."""
    from harness.runs.intervals import metric_interval

    rng = np.random.default_rng(0)
    columns = {"top1": (rng.random(30) < 0.6).astype(np.float64), "top5": np.ones(30)}
    one = make_record(run_id="user-a", samples=SAMPLES.model_copy(update={"count": 30}))
    other = make_record(run_id="user-b", samples=SAMPLES.model_copy(update={"count": 30}))
    assert metric_interval(one, "top1", columns) == metric_interval(other, "top1", columns)
    changed = make_record(run_id="user-a", samples=SAMPLES.model_copy(update={"count": 30, "sha256": "ef" * 32}))
    assert metric_interval(changed, "top1", columns) != metric_interval(one, "top1", columns)
