"""A folder's contents file: the SHA-256 of every file in it, in `sha256sum`'s format, written by the stage that
writes the folder.

Why: DVC checks a folder dependency file by file (a state lookup per file) for every stage that depends on it, so a
prepared dataset of 2,600 files read by a hundred stages was a quarter of a million lookups per `dvc status`.
Stages depend on this one file instead: it changes exactly when a file in the folder does (the writing stage
rewrites it last), and DVC still checks the folder as a whole once, as the writing stage's output. A reader can
check a folder against it without the harness: `cd FOLDER && sha256sum -c CONTENTS.sha256`.
"""

from __future__ import annotations

from pathlib import Path

from harness.core.atomic import write_text_atomic
from harness.core.hashing import sha256_file

CONTENTS_NAME = "CONTENTS.sha256"


def contents_path(folder: Path | str) -> Path:
    return Path(folder) / CONTENTS_NAME


def contents_lines(folder: Path) -> list[str]:
    """`<sha256>  <path>` for every file under `folder` but the contents file, by path (POSIX, relative)."""
    files = sorted((path.relative_to(folder).as_posix(), path) for path in Path(folder).rglob("*")
                   if path.is_file() and path.name != CONTENTS_NAME)
    return [f"{sha256_file(path)}  {name}" for name, path in files]


def write_contents(folder: Path) -> Path:
    """Write `folder`'s contents file (atomically); the last thing a stage writes into its folder."""
    path = contents_path(folder)
    lines = contents_lines(Path(folder))
    write_text_atomic(path, "".join(f"{line}\n" for line in lines))
    return path
