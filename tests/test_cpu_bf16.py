"""`settings.precision: bf16` on a CPU without bf16 instructions: warned about before any work (core.cpu_bf16)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from harness import executors
from harness.cli import cpu_bf16
from harness.cli import main as cli
from harness.core.config import load_params
from harness.pipeline import generate as pipeline

# the first lines of /proc/cpuinfo's processor block that matter, as three kinds of machine print them
AVX2_ONLY = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx fma avx2 sha_ni\n"
ZEN4 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\n"
GRAVITON3 = "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve bf16 i8mm\n"
GRAVITON2 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics\n"


def _cpuinfo(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "native"), [
    (AVX2_ONLY, False), (ZEN4, True), (SAPPHIRE_RAPIDS, True), (GRAVITON3, True), (GRAVITON2, False),
    ("processor\t: 0\nmodel name\t: ?\n", None),  # neither line: unknown, never a warning
])
def test_native_bf16_is_read_from_the_cpus_own_flags(tmp_path, text, native):
    assert cpu_bf16.native_bf16_cpu(_cpuinfo(tmp_path, text)) is native


def test_no_cpuinfo_is_unknown(tmp_path):
    assert cpu_bf16.native_bf16_cpu(tmp_path / "missing") is None


def test_only_bf16_run_locally_on_the_cpu_without_bf16_is_warned_about(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    slow, fast = _cpuinfo(tmp_path, AVX2_ONLY), tmp_path / "fast"
    fast.write_text(ZEN4)
    warning = cpu_bf16.slow_bf16_warning("bf16", "local", slow)
    assert warning and "settings.precision: fp32" in warning and "\n" not in warning
    assert cpu_bf16.slow_bf16_warning("fp32", "local", slow) is None
    assert cpu_bf16.slow_bf16_warning("bf16", "local", fast) is None
    assert cpu_bf16.slow_bf16_warning("bf16", "slurm", slow) is None  # the nodes' CPUs are not this one's
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cpu_bf16.slow_bf16_warning("bf16", "local", slow) is None  # extraction runs on the GPU


class _Started(Exception):
    """Raised where the run would hand its stages to DVC."""


def test_the_cli_warns_before_it_runs_any_stage(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(cpu_bf16, "CPUINFO", _cpuinfo(tmp_path, AVX2_ONLY))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    params = load_params()
    bf16 = params.model_copy(update={"settings": params.settings.model_copy(update={"precision": "bf16"})})
    monkeypatch.setattr(cli, "load_params", lambda: bf16)
    monkeypatch.setattr(pipeline, "ensure_fresh", lambda params: False)  # dvc.yaml is not this test's to rewrite

    def run_stages(*args, **kwargs):
        assert "no bf16 instructions" in caplog.text  # already said
        raise _Started

    monkeypatch.setattr(executors, "run_stages", run_stages)
    with caplog.at_level(logging.WARNING, logger="visbench"), pytest.raises(_Started):
        cli.run_grid({"task": "classification", "backbone": "efficientnet_lite0"})
    assert sum("no bf16 instructions" in r.getMessage() for r in caplog.records) == 1
