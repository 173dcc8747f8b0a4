"""benchmarks/runner.py, the one benchmark runner: interleaving, samples and medians, subprocess timing with checks,
the machine slug, and the results model that refuses a file whose numbers do not follow from its samples."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # `benchmarks` is a folder of scripts, not an installed package

from benchmarks.runner import Bench, ProcessFailed, Results, machine_slug  # noqa: E402


def test_the_machine_slug_is_stable_and_separates_kinds_of_machine():
    flags = ["avx2", "avx512f"]
    slug = machine_slug("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz", flags, 2)
    assert slug == machine_slug("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz", list(reversed(flags)), 2)
    assert slug.startswith("intel-xeon-platinum-8480-") and slug.endswith("-2cpu")
    assert len({slug, machine_slug("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz", ["avx2"], 2),
                machine_slug("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz", flags, 4),
                machine_slug("AMD EPYC 7B13", flags, 2)}) == 4


def test_candidates_interleave_forward_then_backward_and_each_call_is_a_sample(tmp_path):
    bench, calls = Bench("unit", argv=["benchmarks/unit.py"]), []
    bench.interleave({name: (lambda name=name: calls.append(name)) for name in "abc"}, repeats=3, warmup=1,
                     work=10, unit="items/s")
    assert calls == list("abc" "abc" "cba" "abc")  # the warm-up, then three rounds
    bench.interleave({name: (lambda: None) for name in "xy"}, repeats=1)  # its first round runs backward ...
    assert [m.name for m in bench.results().measurements][-2:] == ["x", "y"]  # ... its rows keep their order
    bench.ratio("b ÷ a", "b", "a")
    results = bench.results()
    assert [m.name for m in results.measurements] == ["a", "b", "c", "x", "y"]
    a = results.measurements[0]
    assert len(a.samples) == len(a.cpu_samples) == 3 and a.unit == "items/s" and a.work == 10
    assert a.min <= a.median <= a.max
    assert results.ratios[0].value == pytest.approx(results.measurements[1].median / a.median)
    assert results.command == ["benchmarks/unit.py"] and results.environment.cpu_count == os.cpu_count()


def test_commands_are_timed_by_the_kernel_and_their_output_checked(tmp_path):
    bench = Bench("unit", argv=["x"])
    burn = [sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\n"
            "print('done')"]
    timed = bench.sample_command("burn", burn, tmp_path, os.environ, tmp_path / "log",
                                 check=lambda out: None if "done" in out else "not done")
    assert timed.cpu >= 0.2 and timed.wall >= timed.cpu * 0.5 and timed.max_rss_mb > 0
    with pytest.raises(ProcessFailed, match="a stage ran"):
        bench.sample_command("burn", burn, tmp_path, os.environ, tmp_path / "log", check=lambda out: "a stage ran")
    with pytest.raises(ProcessFailed, match="exit 3"):
        bench.sample_command("fail", [sys.executable, "-c", "raise SystemExit(3)"], tmp_path, os.environ,
                             tmp_path / "log")
    assert len(bench.samples("burn")) == 1  # a failed run is no sample


def test_a_written_file_validates_and_a_number_edited_by_hand_does_not(tmp_path):
    bench = Bench("unit", argv=["x"])
    bench.record("size", "MiB", [1.0, 3.0, 2.0])
    bench.record("batch", "MiB", [0.5])
    bench.ratio("size ÷ batch", "size", "batch")
    path = bench.write(tmp_path)
    assert path.name == f"unit-{path.stem.split('-', 1)[1]}.json"
    data = json.loads(path.read_text())
    assert Results.model_validate(data).measurements[0].median == 2.0
    for edit, message in (
        (lambda d: d["measurements"][0].update(median=2.5), "is not the samples' median"),
        (lambda d: d["ratios"][0].update(value=5.0), "is not 4.0"),
        (lambda d: d["ratios"][0].update(denominator="gone"), "which is no measurement here"),
        (lambda d: d.update(machine="another-machine-1cpu"), "the slug of its environment"),
        (lambda d: d.update(extra=1), "Extra inputs are not permitted"),
    ):
        tampered = json.loads(path.read_text())
        edit(tampered)
        with pytest.raises(ValidationError, match=message):
            Results.model_validate(tampered)
