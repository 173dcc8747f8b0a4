"""Whether `settings.precision: bf16` will be fast here: a CPU without bfloat16 instructions emulates it.

bf16 is offered as the fast path, and on a CPU with AVX-512 BF16 or AMX it is one. On a CPU without them torch
converts every element in software, and the same extraction is far slower than at fp32
(benchmarks/vs_visbench.py and benchmarks/cpu_precision.py measure both; their results per machine are in
docs/performance.md). The numbers are still right, so this is a warning before any work, not a refusal: bf16
records are worth making to compare with other bf16 records.
"""

from __future__ import annotations

from pathlib import Path

from harness.executors import DEFAULT as LOCAL_EXECUTOR

CPUINFO = Path("/proc/cpuinfo")
# /proc/cpuinfo names of the instructions oneDNN uses for bf16 matmuls and convolutions: x86's "flags" line
# (Cooper Lake, Sapphire Rapids and later Intel; Zen 4 and later AMD), aarch64's "Features" line (Armv8.6)
X86_BF16_FLAGS = {"avx512_bf16", "amx_bf16"}
ARM_BF16_FEATURE = "bf16"


def native_bf16_cpu(cpuinfo: Path | None = None) -> bool | None:
    """True or False from /proc/cpuinfo; None where it cannot be read (not Linux) or names neither line."""
    try:
        text = (cpuinfo or CPUINFO).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "flags":
            return bool(X86_BF16_FLAGS & set(value.split()))
        if key == "features":
            return ARM_BF16_FEATURE in value.split()
    return None


def slow_bf16_warning(precision: str, executor: str, cpuinfo: Path | None = None) -> str | None:
    """The one-line warning for bf16 extraction on this machine's CPU without bf16 instructions, else None.
    Only for the local executor: a cluster's nodes may have other CPUs (or GPUs)."""
    if precision != "bf16" or executor != LOCAL_EXECUTOR or native_bf16_cpu(cpuinfo) is not False:
        return None
    import torch  # only here: a bare run at fp32 never pays for the import

    if torch.cuda.is_available():
        return None  # extraction runs on the GPU (harness.runs.environment)
    return ("settings.precision is bf16, but this CPU has no bf16 instructions (avx512_bf16, amx_bf16 or Arm "
            "bf16): torch emulates them, and extraction runs several times slower than at fp32 (measured by "
            "benchmarks/cpu_precision.py: docs/performance.md), with numbers that differ from fp32's; for speed here "
            "set settings.precision: fp32 in params.yaml")
