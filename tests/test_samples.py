"""Per-sample files: byte-deterministic CSV, exact float round trips (in Python and through DuckDB), and
hash-checked reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.core import paths
from harness.core.hashing import sha256_file
from harness.leaderboard import connect_corpus
from harness.leaderboard.queries.samples import load_samples_table, run_columns
from harness.runs.records import Record, read_records
from harness.runs.samples import SamplesError, read_samples, samples_csv, write_samples

IDS = ["val/0/a.png", "val/1/b,with comma.png", 'val/2/"quoted".png', "p0/warp0.png#3"]
VALUES = {
    "top1": np.array([1.0, 0.0, 1.0, 1.0]),
    "map": np.array([0.1 + 0.2, 1 / 3, 1e-300, 2.0 / 7.0]),  # no short decimal: repr must round-trip
    "mean_error_px": np.array([3.5, 123456.789, 0.0, 5e-324], dtype=np.float64),
}


def test_output_is_byte_deterministic_and_independent_of_column_order(tmp_path):
    first = write_samples(tmp_path / "a.samples.csv", IDS, VALUES, "image")
    reordered = {name: VALUES[name] for name in reversed(list(VALUES))}
    second = write_samples(tmp_path / "b.samples.csv", IDS, reordered, "image")
    assert (tmp_path / "a.samples.csv").read_bytes() == (tmp_path / "b.samples.csv").read_bytes()
    assert first.sha256 == second.sha256 == sha256_file(tmp_path / "a.samples.csv")
    assert samples_csv(IDS, VALUES) == samples_csv(IDS, reordered)
    assert first.columns == sorted(VALUES) and first.count == len(IDS) and first.unit == "image"
    assert (tmp_path / "a.samples.csv").read_text().splitlines()[0] == "sample_id,map,mean_error_px,top1"
    # a float32 column is written as its exact value, the same text as that value in float64
    as32 = {"x": np.array([0.5, 0.25], dtype=np.float32)}
    assert samples_csv(["a", "b"], as32) == samples_csv(["a", "b"], {"x": np.array([0.5, 0.25])})


def test_read_samples_round_trips_exactly(tmp_path):
    info = write_samples(tmp_path / "s.csv", IDS, VALUES, "image")
    ids, columns = read_samples(info)
    assert ids == IDS and set(columns) == set(VALUES)
    for name, column in VALUES.items():
        assert np.array_equal(columns[name], column), name  # bit-exact, not approximately
        assert columns[name].mean() == column.mean()


def test_header_only_file_for_no_samples(tmp_path):
    assert samples_csv([], {}) == "sample_id\n"
    info = write_samples(tmp_path / "empty.csv", [], {}, "image")
    assert read_samples(info) == ([], {})


def test_a_changed_file_is_refused(tmp_path):
    info = write_samples(tmp_path / "s.csv", IDS, VALUES, "image")
    path = tmp_path / "s.csv"
    path.write_text(path.read_text().replace("1.0", "0.0", 1))
    with pytest.raises(SamplesError, match="SHA-256"):
        read_samples(info)


@pytest.mark.parametrize("ids, columns, message", [
    (["a", "a"], {"x": np.zeros(2)}, "unique"),
    (["a", "b"], {"x": np.zeros(3)}, "3 rows for 2 samples"),
])
def test_malformed_samples_are_refused(tmp_path, ids, columns, message):
    with pytest.raises(SamplesError, match=message):
        write_samples(tmp_path / "s.csv", ids, columns, "image")
    assert not (tmp_path / "s.csv").exists()


# -- read by DuckDB (harness.leaderboard.queries.samples) ---------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
TRICKY = np.array([
    0.1 + 0.2, 1 / 3, 2 / 7, 1e-300, 123456.789, -0.0,
    5e-324, 4.9406564584124654e-322, 2.225073858507201e-308,  # subnormals: the smallest, one more, the largest
    2.2250738585072014e-308, 1.0000000000000002, 0.9999999999999999,  # the smallest normal; 1 ± one ulp
])
AWKWARD_IDS = ["a,b", 'say "cheese"', "", "NULL", "multi\nline", " padded ", "é✓", "x#1"]


def sampled_record(root: Path, run_id: str, ids: list[str], columns: dict[str, np.ndarray]) -> Record:
    """A committed ok record renamed to `run_id`, with a per-sample file under `root` and its metrics
    set to the columns' means."""
    base = next(r for r in read_records(REPO / paths.CORPUS) if r.status == "ok")
    info = write_samples(root / f"{run_id}.samples.csv", ids, columns, "image")
    return base.model_copy(update={
        "run_id": run_id, "samples": info.model_copy(update={"path": f"{run_id}.samples.csv"}),
        "metrics": {name: float(np.mean(column)) for name, column in columns.items()},
    })


def load(records: list[Record], root: Path) -> dict[str, dict[str, dict]]:
    con = connect_corpus(records)
    con.execute("SET threads = 8")  # read files in parallel even on a small machine
    load_samples_table(con, records, root)
    loaded: dict[str, dict[str, dict]] = {}
    for row in run_columns(con):
        loaded.setdefault(row["run_id"], {})[row["metric"]] = row
    return loaded


def test_duckdb_reads_every_score_bit_exactly_and_every_id_verbatim(tmp_path):
    ids = [f"s{i}" for i in range(len(TRICKY) - len(AWKWARD_IDS))] + AWKWARD_IDS
    record = sampled_record(tmp_path, "tricky", ids, {"x": TRICKY, "y z'q": TRICKY[::-1].copy()})
    loaded = load([record], tmp_path)["tricky"]
    assert sorted(loaded) == ["x", "y z'q"]
    for name, expected in (("x", TRICKY), ("y z'q", TRICKY[::-1])):
        assert loaded[name]["ids"] == ids
        assert np.array(loaded[name]["scores"]).tobytes() == expected.tobytes(), name  # -0.0 included


def test_duckdb_keeps_each_files_row_order(tmp_path):
    rng = np.random.default_rng(0)
    records, expected = [], {}
    for run in range(3):
        ids = [f"img/{i:06d}.png" for i in rng.permutation(20_000 + run)]  # not in id order
        scores = rng.random(len(ids))
        records.append(sampled_record(tmp_path, f"run{run}", ids, {"top1": scores}))
        expected[f"run{run}"] = (ids, scores)
    loaded = load(records, tmp_path)
    for run_id, (ids, scores) in expected.items():
        assert loaded[run_id]["top1"]["ids"] == ids
        assert np.array(loaded[run_id]["top1"]["scores"]).tobytes() == scores.tobytes()


def test_duckdb_check_lists_every_column_that_misses_its_metric(tmp_path):
    good = sampled_record(tmp_path, "good", ["a", "b"], {"top1": np.array([1.0, 0.0])})
    bad = sampled_record(tmp_path, "bad", ["a", "b"], {"top1": np.array([1.0, 0.0]), "top5": np.ones(2)})
    bad = bad.model_copy(update={"metrics": {"top1": 0.5 + 1e-11, "top5": 0.9}})
    with pytest.raises(SamplesError) as error:
        load([good, bad], tmp_path)
    message = str(error.value)
    assert "column 'top1' does not average to the metric bad records" in message
    assert "column 'top5' does not average to the metric bad records" in message
    assert "good" not in message


@pytest.mark.parametrize("text, message", [
    ("sample_id,top1\na,\n", "cannot read"),  # an empty score is an error, not a NULL
    ("sample_id,top1\na,1.0,2.0\n", "cannot read"),
    ("sample_id,top1\na,one\n", "cannot read"),
    ("id,top1\na,1.0\n", "header"),
    ("sample_id,top1,top1\na,1.0,1.0\n", "header"),
])
def test_duckdb_refuses_malformed_files(tmp_path, text, message):
    record = sampled_record(tmp_path, "run", ["a"], {"top1": np.ones(1)})
    (tmp_path / record.samples.path).write_text(text)
    record = record.model_copy(update={"samples": record.samples.model_copy(
        update={"sha256": sha256_file(tmp_path / record.samples.path)})})
    with pytest.raises(SamplesError, match=message):
        load([record], tmp_path)
