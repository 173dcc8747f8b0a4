"""The environment fingerprint every record carries: code version, libraries, device, image."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from functools import cache

from harness import __version__
from harness.records import Environment

# Set by the Dockerfiles. The commit is baked in from the GIT_COMMIT build arg because an image holds no git
# metadata; the digest is known only once the image is built, so it is passed at run time (docker/README.md).
COMMIT_ENV = "VISBENCH_GIT_COMMIT"
IMAGE_ENV = "VISBENCH_IMAGE"  # the image's name, e.g. "visbench-harness"; a value holding "@" is taken whole
IMAGE_DIGEST_ENV = "VISBENCH_IMAGE_DIGEST"


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


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"cpu:{platform.machine()}:{torch.get_num_threads()}threads"


def cuda_runtime() -> str | None:
    """The CUDA runtime torch loads: its CUDA libraries come from the lock's nvidia-* wheels (RPATH into
    site-packages/nvidia), in an image as on a host, so the cudart wheel's version names it exactly."""
    import torch

    if torch.version.cuda is None:
        return None
    return _version("nvidia-cuda-runtime") or torch.version.cuda


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
def environment_fingerprint() -> Environment:
    import numpy
    import torch

    status = _git("status", "--porcelain", "--untracked-files=no", "--", "harness", "pyproject.toml")
    return Environment(
        harness_version=__version__,
        git_commit=code_commit(),
        git_dirty=None if status is None else bool(status),
        python=platform.python_version(),
        torch=torch.__version__,
        timm=_version("timm"),
        open_clip=_version("open_clip_torch"),
        numpy=numpy.__version__,
        device=device_name(),
        image=image_identity(),
        cuda=cuda_runtime(),
    )
