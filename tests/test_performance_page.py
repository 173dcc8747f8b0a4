"""docs/performance.md is generated from benchmarks/results/*.json (benchmarks/performance_page.py): the committed
page is a fresh generation of the committed files, and a malformed results file is refused in one line naming it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # `benchmarks` is a folder of scripts, not an installed package

from benchmarks.performance_page import PAGE, load_results, main, render  # noqa: E402
from benchmarks.runner import RESULTS  # noqa: E402

COMMITTED = sorted(RESULTS.glob("*.json"))


def test_there_are_results_files_and_each_has_its_section():
    assert COMMITTED, "no benchmarks/results/*.json: run a benchmark (docs/performance.md says how)"
    text = PAGE.read_text()
    for results in load_results(COMMITTED):
        assert f"## {results.bench}\n" in text and f"### {results.machine}\n" in text


def test_the_committed_page_is_a_fresh_generation_of_the_committed_results():
    assert PAGE.read_text() == render(load_results(COMMITTED)), \
        "docs/performance.md is stale: run `.venv/bin/python -m benchmarks.performance_page`"


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    folder.mkdir()
    shutil.copy(COMMITTED[0], folder / COMMITTED[0].name)
    return folder


def _refused(results_dir: Path, capsys) -> str:
    page = results_dir.parent / "performance.md"
    assert main(["--results", str(results_dir), "--page", str(page)]) == 2
    assert not page.exists(), "nothing is written when a file is refused"
    err = capsys.readouterr().err
    assert err.count("\n") == 1, f"not one line: {err!r}"
    return err


def test_a_results_file_whose_median_was_edited_is_refused_in_one_line(results_dir, capsys):
    path = results_dir / COMMITTED[0].name
    data = json.loads(path.read_text())
    data["measurements"][0]["median"] = data["measurements"][0]["max"] + 1
    path.write_text(json.dumps(data))
    err = _refused(results_dir, capsys)
    assert err.startswith(f"performance_page: {path}: not a results file of benchmarks/runner.py: ")
    assert "is not the samples' median" in err


def test_a_file_that_is_not_json_or_lacks_a_field_is_refused(results_dir, capsys):
    path = results_dir / "broken-machine-1cpu.json"
    path.write_text("{not json")
    assert str(path) in _refused(results_dir, capsys)
    data = json.loads((results_dir / COMMITTED[0].name).read_text())
    del data["environment"]
    path.write_text(json.dumps(data))
    assert "environment: Field required" in _refused(results_dir, capsys)


def test_a_file_under_another_name_is_refused(results_dir, capsys):
    (results_dir / COMMITTED[0].name).rename(results_dir / "renamed-x-1cpu.json")
    assert "so it must be named" in _refused(results_dir, capsys)


def test_the_module_runs_from_the_project_root(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.performance_page", "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
