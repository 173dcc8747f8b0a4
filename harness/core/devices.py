"""Where tensors are computed: the device a run asks for, resolved once, described in its records.

`settings.device` (params.yaml), the CLI's `device=` and `harness.run(device=...)` take `auto`, `cpu`, `cuda`
or `cuda:N`; `auto` is the first CUDA GPU torch sees, else the CPU. The spelling is checked without importing
torch (`parse_device`, what config validation runs); `resolve_device` is the one place that asks torch, and a
CUDA device on a machine without one is a one-line `DeviceError` naming the fix, raised before any work.

Where the work ran is not a DVC parameter: like the executor, it says where, not what. Which device a stage
uses is decided in one place, `requested_device`, in this order: an explicit argument (the CLI's `device=` or
`devices=`, `harness.run(device=...)`), then params.yaml's `settings.device`, then the environment (which,
since settings always name a device, never decides). The CLI's argument can only reach the stages DVC starts
through their environment, so it travels in `VISBENCH_DEVICE` marked by `VISBENCH_DEVICE_EXPLICIT`
(`hand_on_device`): a stage tells that handed-on choice, which beats settings, from a `VISBENCH_DEVICE` it merely
inherited from a shell, which does not. What the device changes is hashed where it changes numbers instead: a
backbone on CUDA has the device in its identity (so its features never share a cache entry with the CPU's), and a
record names the device that computed it (`describe_device`).

The CPU is described by what decides its kernels, never by what else the machine holds: its model and the
instruction-set flags oneDNN and torch dispatch on. A GPU by its model, compute capability, memory, driver and
CUDA runtime.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.config import DEVICE_SPELLING

if TYPE_CHECKING:
    import torch

# The device an entry point hands on to the stages it runs or starts (`hand_on_device`, `explicit_device`).
DEVICE_ENV = "VISBENCH_DEVICE"
# "1" where DEVICE_ENV holds an explicit argument handed on, not a value inherited from a shell. A mark beside the
# value rather than a second variable for it: the parallel executor gives each of its processes a device by
# setting DEVICE_ENV alone (the mark comes with the CLI's environment, set by its `devices=`).
EXPLICIT_DEVICE_ENV = "VISBENCH_DEVICE_EXPLICIT"
# /proc/cpuinfo flags that select different torch/oneDNN kernels for the same work (and so can change the last
# bits of a ViT's features): the vector width and the bf16/int8 matrix instructions
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_bf16", "amx_int8", "amx_tile")
CPUINFO = Path("/proc/cpuinfo")
NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")


class DeviceError(ValueError):
    """A device that cannot be used as asked; the message names the fix."""


def parse_device(spec: str) -> str:
    """`spec` normalised (`cuda:0` stays `cuda:0`, whitespace and case dropped), or a DeviceError."""
    value = str(spec).strip().lower()
    if not DEVICE_SPELLING.match(value):
        raise DeviceError(f"device={spec!r} is not a device; valid: auto, cpu, cuda, cuda:N (N a GPU index)")
    return value


def parse_devices(spec: str) -> list[str]:
    """`devices=0,1` (GPU indices) or `devices=cuda:0,cpu`: one device per parallel process, each checked."""
    parts = [part.strip() for part in str(spec).split(",")]
    if not parts or any(not part for part in parts):
        raise DeviceError(f"devices={spec!r}: give a comma-separated list, e.g. devices=0,1 or devices=cuda:0,cuda:1")
    return [parse_device(f"cuda:{part}" if part.isdigit() else part) for part in parts]


def requested_device(setting: str) -> str:
    """The device a stage computes on: an explicit argument handed on to it (`handed_on_device`), else `setting`,
    params.yaml's `settings.device`. A VISBENCH_DEVICE inherited without the mark ranks below settings, and
    settings always name a device (`auto` by default), so on its own it changes nothing."""
    return parse_device(handed_on_device() or setting)


def handed_on_device() -> str | None:
    """The device an explicit argument put in this process's environment (`hand_on_device`), else None."""
    if os.environ.get(EXPLICIT_DEVICE_ENV) != "1":
        return None
    return os.environ.get(DEVICE_ENV) or None


def hand_on_device(device: str) -> None:
    """Make `device` the explicit choice of this process and of every process it starts from here on (the CLI's
    `device=`, for the stages DVC starts)."""
    os.environ[DEVICE_ENV] = parse_device(device)
    os.environ[EXPLICIT_DEVICE_ENV] = "1"


@contextlib.contextmanager
def explicit_device(device: str | None) -> Iterator[None]:
    """`hand_on_device(device)` for the stages run inside (`harness.run`), the environment as it was after; None
    changes nothing."""
    if device is None:
        yield
        return
    before = {name: os.environ.get(name) for name in (DEVICE_ENV, EXPLICIT_DEVICE_ENV)}
    hand_on_device(device)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def resolve_device(spec: str) -> torch.device:
    """The torch device `spec` names on this machine; CUDA asked for where torch sees none is a DeviceError."""
    import torch

    value = parse_device(spec)
    if value == "cpu" or (value == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        build = f"torch {torch.__version__}" + (f" built for CUDA {torch.version.cuda}" if torch.version.cuda else
                                               " built without CUDA")
        raise DeviceError(f"device={value} but torch sees no CUDA GPU here ({build}; {_driver_state()}): "
                          "run with device=cpu or device=auto, or on a machine with an NVIDIA GPU and driver")
    count = torch.cuda.device_count()
    index = 0 if value in ("auto", "cuda") else int(value.split(":")[1])
    if index >= count:
        raise DeviceError(f"device={value} but this machine has {count} CUDA GPU(s) (cuda:0..cuda:{count - 1}); "
                          "pick one of those, or check CUDA_VISIBLE_DEVICES")
    return torch.device("cuda", index)


def _driver_state() -> str:
    return "NVIDIA driver loaded" if NVIDIA_DRIVER.is_file() else "no NVIDIA driver loaded"


def device_kind(device: torch.device | str) -> str:
    """`cpu` or `cuda`: what decides which kernels compute, as it goes into identities and comparability."""
    return str(device).split(":")[0]


def describe_device(device: torch.device | str, threads: int | None = None) -> str:
    """What a record says computed it: `cpu:MODEL:FLAGS:Nthreads` or `cuda:MODEL:sm_XY:MEMGiB:driver V:cuda V`."""
    if device_kind(device) == "cuda":
        return describe_gpu(int(str(device).split(":")[1]) if ":" in str(device) else 0)
    flags = ",".join(cpu_kernel_flags()) or "baseline"
    return f"cpu:{cpu_model()}:{flags}:{threads if threads is not None else default_threads()}threads"


@cache
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the architecture (`platform.machine()`)."""
    for line in _cpuinfo_lines():
        if line.startswith(("model name", "Model")) and ":" in line:
            return " ".join(line.split(":", 1)[1].split()).replace(":", "-")
    return platform.machine() or "unknown"


@cache
def cpu_kernel_flags() -> tuple[str, ...]:
    """Which of KERNEL_FLAGS this CPU has, in KERNEL_FLAGS' order."""
    flags: set[str] = set()
    for line in _cpuinfo_lines():
        if line.startswith("flags") and ":" in line:
            flags.update(line.split(":", 1)[1].split())
    return tuple(flag for flag in KERNEL_FLAGS if flag in flags)


def _cpuinfo_lines() -> list[str]:
    try:
        return CPUINFO.read_text().splitlines()
    except OSError:
        return []


def default_threads() -> int:
    """The compute threads a process uses: OMP_NUM_THREADS, else the cores it may run on (torch's default)."""
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        return int(threads)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def describe_gpu(index: int) -> str:
    import torch

    props = torch.cuda.get_device_properties(index)
    memory = props.total_memory / 2**30
    return (f"cuda:{props.name}:sm_{props.major}{props.minor}:{memory:.1f}GiB:driver {nvidia_driver() or 'unknown'}"
            f":cuda {torch.version.cuda}")


@cache
def nvidia_driver() -> str | None:
    """The loaded NVIDIA kernel driver's version: /proc's record of it, else nvidia-smi's; None without one."""
    try:
        match = re.search(r"Kernel Module\s+([0-9.]+)", NVIDIA_DRIVER.read_text())
        if match:
            return match.group(1)
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def set_deterministic(device: torch.device) -> dict[str, object]:
    """Same GPU, same bits: cuDNN's deterministic algorithms without autotuning, no TF32 (fp32 means fp32),
    cuBLAS with a fixed workspace, torch's deterministic algorithms. Returns what was set, for the record.
    On the CPU nothing needs setting (oneDNN's fp32 kernels are deterministic for a fixed thread count)."""
    import torch

    if device_kind(device) != "cuda":
        return {}
    # must be set before cuBLAS is first used in the process; an existing value (the user's) is kept
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    return {"cudnn.deterministic": True, "cudnn.benchmark": False, "allow_tf32": False,
            "CUBLAS_WORKSPACE_CONFIG": os.environ["CUBLAS_WORKSPACE_CONFIG"], "deterministic_algorithms": True}


def is_out_of_memory(error: BaseException) -> bool:
    """A CUDA out-of-memory error (torch.OutOfMemoryError, or a RuntimeError cuDNN/cuBLAS raise saying so)."""
    import torch

    return isinstance(error, torch.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and "out of memory" in str(error).lower())
