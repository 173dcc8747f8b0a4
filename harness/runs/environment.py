"""The environment fingerprint every record carries: code version, libraries, device, image."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import runpy
import subprocess
import sys
from functools import cache
from pathlib import Path

from harness import __version__
from harness.core.config import ConfigError
from harness.runs.records import Environment

# Set by the Dockerfiles. The commit is baked in from the GIT_COMMIT build arg because an image holds no git
# metadata; the digest is known only once the image is built, so it is passed at run time (docker/README.md).
COMMIT_ENV = "VISBENCH_GIT_COMMIT"
IMAGE_ENV = "VISBENCH_IMAGE"  # the image's name, e.g. "visbench-harness"; a value holding "@" is taken whole
IMAGE_DIGEST_ENV = "VISBENCH_IMAGE_DIGEST"
# "1": a probe stage may run on code that differs from HEAD (the CLI's allow_dirty=true sets it); its records say
# git_dirty, every page marks them, and tests/test_corpus_provenance.py keeps them out of the committed corpus
ALLOW_DIRTY_ENV = "VISBENCH_ALLOW_DIRTY"
# what a record's code is: the package and the metadata that installs it
CODE_PATHS = ("harness", "pyproject.toml")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def uncommitted_code() -> list[str] | None:
    """The files of the code (`CODE_PATHS`) in the working directory's checkout that differ from HEAD, new files
    included (a stage may import a module never committed); None outside a git checkout (or before its first
    commit)."""
    changed = _git("diff", "--name-only", "HEAD", "--", *CODE_PATHS)
    new = _git("ls-files", "--others", "--exclude-standard", "--", *CODE_PATHS)
    if changed is None or new is None:
        return None
    return sorted({*changed.splitlines(), *new.splitlines()})


def require_committed_code(allow_dirty: bool | None = None) -> None:
    """Refuse, before any work, to write a record from code that differs from HEAD: the record would name a
    commit that did not produce it. `allow_dirty` (default: the `VISBENCH_ALLOW_DIRTY` environment variable)
    lets it run; its records then say git_dirty."""
    if allow_dirty is None:
        allow_dirty = os.environ.get(ALLOW_DIRTY_ENV) == "1"
    changed = uncommitted_code()
    if allow_dirty or not changed:
        return
    more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
    raise ConfigError(f"the code differs from HEAD ({changed[0]}{more}), so a record would name a commit that did "
                      "not produce it: commit the change and re-run, or run with allow_dirty=true (its records are "
                      "marked git_dirty and must not be committed)")


def device_name(device: str | None = None) -> str:
    """What computed this process's work: `device` (a torch device string) described by `harness.core.devices`,
    the CPU when None. A GPU the process merely could see is never named: only the device its tensors were on.
    A process that never imported torch (a pooled probe stage: NumPy only) computed on the CPU with
    OMP_NUM_THREADS threads, else the usable cores (what torch reports on this project's machines)."""
    from harness.core.devices import describe_device, device_kind

    torch = sys.modules.get("torch")
    if device is not None and device_kind(device) != "cpu":
        return describe_device(device)
    return describe_device("cpu", threads=None if torch is None else torch.get_num_threads())


def cuda_runtime() -> str | None:
    """The CUDA runtime torch loads: its CUDA libraries come from the lock's nvidia-* wheels (RPATH into
    site-packages/nvidia), in an image as on a host, so the cudart wheel's version names it exactly. Read from
    the installed wheels, so a process that never imports torch reports the same."""
    build = _torch_build().get("cuda")
    return None if build is None else _version("nvidia-cuda-runtime") or build


@cache
def _torch_build() -> dict:
    """torch's own `torch/version.py` (`__version__` with its local tag, e.g. 2.14.1+cu130, and `cuda`), run
    without importing torch: the wheel's metadata says only 2.14.1, and `import torch` costs a pooled probe stage
    more than its work."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return {"__version__": torch.__version__, "cuda": torch.version.cuda}
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {}
    return runpy.run_path(str(Path(next(iter(spec.submodule_search_locations))) / "version.py"))


def code_commit() -> str | None:
    """The commit of the code that runs: the checkout's HEAD, else the one baked into the image."""
    # The checkout wins: a repository bind-mounted into the image may be at another commit than the one the image
    # was built from. The baked commit is for trees without git metadata (the image's own copy of the project).
    return _git("rev-parse", "HEAD") or os.environ.get(COMMIT_ENV) or None


def image_identity() -> str | None:
    """`NAME@DIGEST+rev.COMMIT` of the image this runs in (the commit it was built from); None outside one."""
    name = os.environ.get(IMAGE_ENV)
    if not name or "@" in name:
        return name or None
    digest = os.environ.get(IMAGE_DIGEST_ENV) or "unknown-digest"
    return f"{name}@{digest}+rev.{os.environ.get(COMMIT_ENV) or 'unknown'}"


@cache
def environment_fingerprint(device: str | None = None, features_device: str | None = None) -> Environment:
    """The record's environment: `device` is what computed the run (None: the CPU), `features_device` what
    computed the features it read, where that was not the CPU (the extraction's own description says)."""
    import numpy

    changed = uncommitted_code()
    return Environment(
        harness_version=__version__,
        git_commit=code_commit(),
        git_dirty=None if changed is None else bool(changed),
        python=platform.python_version(),
        torch=_torch_build().get("__version__"),
        timm=_version("timm"),
        open_clip=_version("open_clip_torch"),
        numpy=numpy.__version__,
        opencv=_version("opencv-python-headless"),
        device=device_name(device),
        features_device=features_device,
        image=image_identity(),
        cuda=cuda_runtime(),
    )
