"""What benchmarks/vs_visbench.py needs that imports neither torch nor either tool: the deterministic image
layout both tools read, whole-process timing from outside, tree sizes, and the pip constraints that give
visbench's environment our lock's versions.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class ProcessTime:
    wall: float  # seconds, from spawn to reap
    cpu: float  # user + sys of the process and every descendant it waited for
    max_rss_mb: float

    def __add__(self, other: ProcessTime) -> ProcessTime:
        return ProcessTime(self.wall + other.wall, self.cpu + other.cpu, max(self.max_rss_mb, other.max_rss_mb))


class ProcessFailed(RuntimeError):
    """A timed process exited non-zero; the message carries its exit status, command and log tail."""


def run_timed(command: list[str] | str, cwd: Path, env: dict[str, str], log: Path) -> ProcessTime:
    """Run one whole process (a string goes through /bin/sh -c, as DVC runs a stage's cmd) and time it from
    outside with wait4: wall clock, and the rusage the kernel accounts to it and its reaped children."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"$ {command if isinstance(command, str) else ' '.join(map(str, command))}\n".encode())
        out.flush()
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   shell=isinstance(command, str))
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise ProcessFailed(f"exit {process.returncode} from {command!r} (log {log}):\n{tail}")
    return ProcessTime(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


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
