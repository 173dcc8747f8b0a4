"""docs/performance.md is generated from benchmarks/results/*.json (benchmarks/performance_page.py): the committed
page is a fresh generation of the committed files, and a malformed results file is refused in one line naming it.
The GPU check's reports (gpu_check-<machine>.json, benchmarks/gpu_check.py) are read the same way, without torch."""

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

from benchmarks import gpu_check_report  # noqa: E402
from benchmarks.performance_page import PAGE, GpuCheckFile, load_results, main, render  # noqa: E402
from benchmarks.runner import RESULTS  # noqa: E402

COMMITTED = sorted(RESULTS.glob("*.json"))
GPU_CHECKS = sorted(RESULTS.glob(f"{gpu_check_report.PREFIX}*.json"))


def test_there_are_results_files_and_each_has_its_section():
    assert COMMITTED, "no benchmarks/results/*.json: run a benchmark (docs/performance.md says how)"
    text = PAGE.read_text()
    for results in load_results(COMMITTED):
        assert f"## {results.bench}\n" in text and f"### {results.machine}\n" in text


def test_the_committed_page_is_a_fresh_generation_of_the_committed_results():
    loaded = load_results(COMMITTED)
    assert GPU_CHECKS and sum(isinstance(r, GpuCheckFile) for r in loaded) == len(GPU_CHECKS), \
        "every gpu_check-*.json is read as a GPU check's report"
    text = render(loaded)
    assert "## gpu_check\n" in text
    assert PAGE.read_text() == text, \
        "docs/performance.md is stale: run `.venv/bin/python -m benchmarks.performance_page`"


def _folder_holding(tmp_path: Path, committed: Path) -> Path:
    """A results folder holding a copy of one committed file, to edit."""
    folder = tmp_path / "results"
    folder.mkdir()
    shutil.copy(committed, folder / committed.name)
    return folder


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    return _folder_holding(tmp_path, COMMITTED[0])


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


# -- the GPU check's reports ----------------------------------------------------------------------------------------
def _row(report: dict, model: str, precision: str, phase: str) -> dict:
    (row,) = [r for r in report["extraction"] if (r["model"], r["precision"], r["pass"]) == (model, precision, phase)]
    return row


def test_the_gpu_section_shows_the_measured_vit_s14_bf16_cold_row():
    text = PAGE.read_text()
    section = text[text.index("## gpu_check\n"):].split("\n## ")[0]
    for path in GPU_CHECKS:
        report = json.loads(path.read_text())
        machine = section.split(f"### {path.stem.removeprefix(gpu_check_report.PREFIX)}\n")[1].split("\n### ")[0]
        assert report["environment"]["device"] in machine
        header = next(line for line in machine.splitlines() if line.startswith("| model |"))
        (line,) = [line for line in machine.splitlines() if line.startswith("| ViT-S/14 | bf16 | cold |")]
        cells = dict(zip(header.strip("|").split(" | "), line.strip("|").split(" | "), strict=True))
        row = _row(report, "vit_s14", "bf16", "cold")
        assert cells["img/s"].strip() == f"{row['img_per_s']:.1f}"
        assert abs(float(cells["img/s"]) - row["img_per_s"]) <= 0.05 and int(cells["images"]) == row["images"]


@pytest.fixture
def gpu_dir(tmp_path: Path) -> Path:
    return _folder_holding(tmp_path, GPU_CHECKS[0])


def _vit_bf16_cold_img_per_s(data: dict) -> None:
    _row(data, "vit_s14", "bf16", "cold")["img_per_s"] *= 2


def _verdict(data: dict) -> None:
    data["targets"][0]["met"] = not data["targets"][0]["met"]


def _metric(data: dict) -> None:
    next(iter(data["metric_check"]["metrics"].values()))["measured"] += 1


@pytest.mark.parametrize(("edit", "says"), [
    (lambda data: data["environment"].pop("device"), "environment.device: Field required"),
    (lambda data: data.update(schema="gpu_check/v0"), "schema: Input should be 'gpu_check/v1'"),
    (lambda data: data["matmul_peak"].update(tflops=1.0), "tflops 1.0 is not"),
    (_vit_bf16_cold_img_per_s, "ViT-S/14 bf16 cold: img_per_s"),
    (_verdict, "targets are not what the extraction rows give"),
    (_metric, "abs_diff"),
])
def test_a_malformed_gpu_check_report_is_refused_in_one_line_naming_it(gpu_dir, capsys, edit, says):
    path = gpu_dir / GPU_CHECKS[0].name
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    err = _refused(gpu_dir, capsys)
    assert err.startswith(f"performance_page: {path}: not a gpu_check report of benchmarks/gpu_check.py: "), err
    assert says in err


def test_a_gpu_check_report_that_is_not_json_or_under_another_name_is_refused(gpu_dir, capsys):
    path = gpu_dir / GPU_CHECKS[0].name
    renamed = path.rename(gpu_dir / "gpu_check-another-gpu.json")
    assert "so it must be named " + path.name in _refused(gpu_dir, capsys)
    renamed.write_text("{not json")
    assert str(renamed) in _refused(gpu_dir, capsys)


def test_a_gpu_check_report_renders_and_the_page_never_imports_torch(gpu_dir):
    page = gpu_dir.parent / "performance.md"
    code = ("import sys; from benchmarks.performance_page import main; "
            f"code = main(['--results', {str(gpu_dir)!r}, '--page', {str(page)!r}]); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "## gpu_check\n" in page.read_text()
