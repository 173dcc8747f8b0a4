"""docs/reliability.md is generated from the fault suite's results (benchmarks/reliability/faults-*.json, written
by tests/test_faults.py under VISBENCH_FAULTS_RESULTS=1): the committed page is a fresh render of the committed
files, each names every row of the suite, and a malformed file is refused in one line naming it."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # `benchmarks` is a folder of scripts, not an installed package

from benchmarks import reliability_page  # noqa: E402
from benchmarks.reliability_page import PAGE, RESULTS, MalformedResults, load_results, render  # noqa: E402

COMMITTED = sorted(RESULTS.glob("faults-*.json"))


def _suite_tests() -> set[str]:
    """The test functions of tests/test_faults.py (read, not imported: it builds a project at import of fixtures)."""
    tree = ast.parse((REPO / "tests" / "test_faults.py").read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_the_committed_page_is_a_fresh_render_of_the_committed_results():
    assert COMMITTED, "no benchmarks/reliability/faults-*.json: run the suite with VISBENCH_FAULTS_RESULTS=1"
    assert PAGE.read_text() == render(load_results(COMMITTED)), \
        "docs/reliability.md is stale: run `python -m benchmarks.reliability_page` and commit it"
    assert reliability_page.main(["--check"]) == 0


def test_each_results_file_covers_every_test_of_the_suite():
    tests = _suite_tests()
    for results in load_results(COMMITTED):
        covered = {row.test.split("[")[0] for row in results.rows.values()}
        assert covered == tests, f"{results.machine}: rows missing for {sorted(tests - covered)}"
        assert all(row.healed and row.heal_s is not None for row in results.rows.values())


def test_a_malformed_results_file_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "faults-somewhere.json"
    bad.write_text(json.dumps({"machine": "somewhere", "rows": {}}))
    with pytest.raises(MalformedResults, match=r"faults-somewhere.json: not a results file of tests/test_faults.py"):
        load_results([bad])
    good = json.loads(COMMITTED[0].read_text()) if COMMITTED else None
    if good is not None:
        misnamed = tmp_path / "faults-elsewhere.json"
        misnamed.write_text(json.dumps(good))
        with pytest.raises(MalformedResults, match="must be named"):
            load_results([misnamed])
        misnamed.unlink()
    monkeypatch.setattr(reliability_page, "RESULTS", tmp_path)
    page = tmp_path / "reliability.md"
    monkeypatch.setattr(reliability_page, "PAGE", page)
    assert reliability_page.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "faults-somewhere.json" in err
    assert not page.exists()  # nothing written
