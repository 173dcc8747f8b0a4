"""The generated dvc.yaml files as DVC expands them: every stage by the name DVC gives it (a foreach group's
member as `GROUP@KEY`, its `${key}`, `${item}` and `${item.FIELD}` filled in), with its command and its paths
made project-relative; and which stages may have to run again once some are out of date (those reading, directly
or through others, what an out-of-date stage writes)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

_VARIABLE = re.compile(r"\$\{(key|item)(?:\.(\w+))?\}")


@dataclass(frozen=True)
class Stage:
    name: str
    cmd: str
    deps: tuple[str, ...]  # files and folders, project-relative
    params: tuple[str, ...]  # the params files it reads values from, project-relative
    outs: tuple[str, ...]  # outs, metrics and plots, project-relative


def _fill(value: Any, key: str, item: Any) -> Any:
    """One foreach member's copy of a `do` template, as DVC interpolates it."""
    if isinstance(value, str):
        def one(match: re.Match[str]) -> str:
            base = key if match[1] == "key" else item
            return str(base[match[2]] if match[2] else base)

        return _VARIABLE.sub(one, value)
    if isinstance(value, list):
        return [_fill(v, key, item) for v in value]
    if isinstance(value, dict):
        return {_fill(k, key, item): _fill(v, key, item) for k, v in value.items()}
    return value


def _entry_paths(entries: Iterable[Any]) -> list[str]:
    """Paths of a deps/outs list: an entry is a path or {path: options}."""
    return [entry if isinstance(entry, str) else next(iter(entry)) for entry in entries]


def _stage(name: str, definition: dict[str, Any], file: Path) -> Stage:
    base = file.parent / definition.get("wdir", ".")

    def relative(paths: Iterable[str]) -> tuple[str, ...]:
        return tuple(PurePosixPath(os.path.normpath(base / path)).as_posix() for path in paths)

    outputs = [*definition.get("outs", []), *definition.get("metrics", []), *definition.get("plots", [])]
    params = [file for entry in definition.get("params", []) if isinstance(entry, dict) for file in entry]
    return Stage(name, definition["cmd"], relative(_entry_paths(definition.get("deps", []))), relative(params),
                 relative(_entry_paths(outputs)))


def expand(docs: dict[Path, dict[str, Any]]) -> dict[str, Stage]:
    """Every stage of `docs` (dvc.yaml documents by project-relative path), in file order (each file lists a
    stage after those it reads from)."""
    stages: dict[str, Stage] = {}
    for file, document in docs.items():
        for name, definition in document["stages"].items():
            members = definition.get("foreach")
            if members is None:
                stages[name] = _stage(name, definition, file)
                continue
            pairs = members.items() if isinstance(members, dict) else ((m, m) for m in members)
            for key, item in pairs:
                member = f"{name}@{key}"
                stages[member] = _stage(member, _fill(definition["do"], str(key), item), file)
    return stages


def with_downstream(names: list[str], stale: set[str], stages: dict[str, Stage]) -> list[str]:
    """The stages of `names` (in an order DVC can run them one by one) that may change when DVC brings `stale`
    up to date: the stale ones, and every one reading (as a dependency or params file) a path that one of those
    writes, the same path or one inside or around it. A name `stages` does not know is kept: DVC decides."""
    written: set[str] = set()  # the outs of the stages kept so far
    around: set[str] = set()  # every folder holding one of them
    kept = []
    for name in names:
        stage = stages.get(name)
        if stage is not None and name not in stale and not any(
                _reads_written(path, written, around) for path in (*stage.deps, *stage.params)):
            continue
        kept.append(name)
        for out in stage.outs if stage is not None else ():
            written.add(out)
            around.update(parent.as_posix() for parent in PurePosixPath(out).parents if parent.parts)
    return kept


def _reads_written(path: str, written: set[str], around: set[str]) -> bool:
    return path in written or path in around or any(parent.as_posix() in written
                                                     for parent in PurePosixPath(path).parents if parent.parts)
