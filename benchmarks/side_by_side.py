"""What benchmarks/vs_visbench.py needs that imports neither torch nor either tool: the deterministic image
layout both tools read, tree sizes, and the pip constraints that give visbench's environment our lock's versions.
Whole-process timing from outside is the runner's (`ProcessTime`, `run_timed`, `ProcessFailed`: benchmarks/
runner.py), re-exported here for the scripts that import it from this module.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
from pathlib import Path

from runner import ProcessFailed, ProcessTime, run_timed

__all__ = ["IMAGE_SUFFIXES", "SPLITS", "ProcessFailed", "ProcessTime", "constraints_for", "lock_pins", "median",
           "normalise", "run_timed", "split_layout", "tree_bytes", "write_layout"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
SPLITS = ("train", "val")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def split_layout(root: Path, per_class: int, splits: tuple[str, ...] = SPLITS) -> list[tuple[str, str, Path]]:
    """(split, class, image) for `root/<class>/<image>`: per class, images sorted by file name, the first
    `per_class` to the first split, the next `per_class` to the second, and so on. Refuses a class that has
    fewer than per_class × len(splits) images, so every split is balanced."""
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise ValueError(f"{root} has no class folders (expected {root}/<class>/<image>)")
    layout = []
    for folder in classes:
        images = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        need = per_class * len(splits)
        if len(images) < need:
            raise ValueError(f"{folder} holds {len(images)} images; {len(splits)} splits × {per_class} need {need}")
        for index, split in enumerate(splits):
            layout += [(split, folder.name, image) for image in images[index * per_class: (index + 1) * per_class]]
    return layout


def write_layout(layout: list[tuple[str, str, Path]], dest: Path) -> None:
    """Copy the images into `dest/<split>/<class>/`: both tools index the same files, neither through a link."""
    for split, class_name, image in layout:
        folder = dest / split / class_name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(image, folder / image.name)


def tree_bytes(root: Path) -> tuple[int, int]:
    """(apparent bytes, bytes on disk) of every file under root: what the files hold, and what `du` counts."""
    apparent = disk = 0
    for folder, _, files in os.walk(root):
        for name in files:
            stat = os.stat(os.path.join(folder, name))
            apparent += stat.st_size
            disk += stat.st_blocks * 512
    return apparent, disk


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def lock_pins(lock_text: str) -> dict[str, str]:
    """`name==version` of every pin in a pip-compile lock (hashes and comments dropped), names normalised."""
    pins = {}
    for line in lock_text.splitlines():
        match = _PIN.match(line.strip())
        if match:
            pins[normalise(match[1])] = match[2]
    return pins


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def constraints_for(pins: dict[str, str], requirements: list[str]) -> tuple[str, list[str]]:
    """A pip constraints file of our pins, less those that `requirements` (PEP 508 strings, e.g. visbench's
    Requires-Dist) exclude: pip could not install both, so visbench's requirement wins and the dropped pin is
    reported. Returns (file text, one line per dropped pin)."""
    from packaging.requirements import Requirement

    dropped = []
    for text in requirements:
        requirement = Requirement(text)
        name = normalise(requirement.name)
        if name in pins and not requirement.specifier.contains(pins[name], prereleases=True):
            dropped.append(f"{name}=={pins[name]} (visbench requires {name}{requirement.specifier})")
    skip = {line.split("==")[0] for line in dropped}
    text = "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()) if name not in skip)
    return text, dropped
