"""Tolerances are measured, not assumed: each protocol's cross-CPU tolerance comes from the git history's pairs of
the same stage's record on two CPU kinds (benchmarks/cross_cpu_tolerance.py), every pair is within it, and records
carry it."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

from benchmarks import cross_cpu_tolerance as measurement
from harness.probes import get_probe
from harness.probes.measured_tolerances import CROSS_CPU

ROOT = Path(__file__).resolve().parents[1]


def _have(revision: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{revision}^{{commit}}"], cwd=ROOT,
                          capture_output=True).returncode == 0


needs_history = pytest.mark.skipif(not (_have(measurement.BEFORE) and _have(measurement.AFTER)),
                                   reason="a shallow clone: the two measured commits are not in it")


@pytest.fixture(scope="module")
def pairs():
    return measurement._records(measurement.BEFORE), measurement._records(measurement.AFTER)


@needs_history
def test_the_committed_table_is_a_fresh_measurement(pairs):
    assert measurement.render(measurement.measure(*pairs)) == measurement.MODULE.read_text(encoding="utf-8")


@needs_history
def test_every_difference_seen_between_the_two_cpus_is_within_the_tolerance_a_record_would_carry(pairs):
    before, after = pairs
    checked = differing = 0
    for path, new in after.items():
        old = before.get(path)
        if old is None or old.get("status") != "ok" or new.get("status") != "ok":
            continue
        spec = get_probe(new["task"])
        for name, value in new["metrics"].items():
            theirs = old["metrics"].get(name)
            if theirs is not None and math.isfinite(value) and math.isfinite(theirs):
                # a record's tolerance on either CPU's value: the relative part was measured against the larger one
                tolerance = max(spec.tolerances({name: v}, new["protocol"])[name] for v in (value, theirs))
                assert abs(value - theirs) <= tolerance, (path, name, value, theirs, tolerance)
                checked += 1
                differing += value != theirs
    assert checked > 1000 and differing > 100  # the history holds the 228 records that moved


def test_a_metric_nobody_measured_keeps_the_declared_tolerance_and_a_measured_one_grows_with_its_value():
    spec = get_probe("depth")
    assert spec.protocol in CROSS_CPU
    absolute, relative, pairs_seen = CROSS_CPU[spec.protocol]["rmse"]
    assert pairs_seen > 0 and relative > 0
    small, large = spec.tolerances({"rmse": 1.0, "invented": 0.5}), spec.tolerances({"rmse": 100.0})
    assert small["invented"] == spec.tolerance
    assert small["rmse"] == pytest.approx(absolute + relative) and large["rmse"] == pytest.approx(
        absolute + 100 * relative)
