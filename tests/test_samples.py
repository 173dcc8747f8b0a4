"""Per-sample files: byte-deterministic CSV, exact float round trips, and hash-checked reads."""

from __future__ import annotations

import numpy as np
import pytest

from harness.hashing import sha256_file
from harness.samples import SamplesError, read_samples, samples_csv, write_samples

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
