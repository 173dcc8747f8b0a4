"""Keeping the pipeline's lock files in step with its dvc.yaml files: entries of stages that no longer exist
dropped, entries moved beside the dvc.yaml that now defines their stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core import dvcfiles
from harness.core.atomic import write_text_atomic
from harness.pipeline.targets import stage_names


def stale_lock_entries(names: set[str], path: Path) -> list[str]:
    """The entries of lock file `path` of stages not in `names` (what prune_lock drops)."""
    return [name for name in dvcfiles.read_lock_file(path) if name not in names]


def prune_lock(names: set[str], path: Path) -> list[str]:
    """Drop the entries of lock file `path` of stages its dvc.yaml no longer defines (renamed or removed by a
    regeneration). DVC rewrites an entry only when its stage runs and never deletes one, so such entries would
    pin outputs that nothing produces, and whatever reads the lock (the dependency tests, lock readers) would
    count them. Written with DVC's own YAML writer, so the file stays as DVC formats it."""
    stale = stale_lock_entries(names, path)
    if stale:
        from dvc.utils.serialize import dumps_yaml, parse_yaml_for_update

        lock = parse_yaml_for_update(path.read_text(), str(path))
        for name in stale:
            del lock["stages"][name]
        write_text_atomic(path, dumps_yaml(lock))
    return stale


def relocate_lock_entries(docs: dict[Path, dict[str, Any]], root: Path = Path(".")) -> int:
    """Move lock entries into the lock beside the dvc.yaml that now defines their stage (a lock written before
    the pipeline was split per grid, or per row, holds the stages of many files), verbatim: the stage's deps,
    params and outs are what they were (paths relative to the project root, every file's wdir), so it stays up
    to date and nothing re-runs. An entry already in its own lock wins. How many moved."""
    from dvc.utils.serialize import dumps_yaml, parse_yaml_for_update

    owner = {name: path for path, document in docs.items() for name in stage_names(document)}
    locks = {path: dvcfiles.lock_of(root / path) for path in docs}
    mine = {lock: path for path, lock in locks.items()}
    # and the locks of an earlier layout (no dvc.yaml of this one beside them): moved out of whole, then removed
    # as stale (_stale_files)
    scanned = [*locks.values(), *(root / lock for lock in dvcfiles.lock_files(root) if root / lock not in mine)]
    moving: dict[Path, dict[str, Any]] = {}
    sources: dict[Path, Any] = {}
    for lock in scanned:
        if not lock.is_file():
            continue
        path = mine.get(lock)
        for name in dvcfiles.read_lock_file(lock):
            if name in owner and owner[name] != path:
                if lock not in sources:
                    sources[lock] = parse_yaml_for_update(lock.read_text(), str(lock))
                moving.setdefault(owner[name], {})[name] = sources[lock]["stages"][name]
    if not moving:
        return 0
    for path, entries in moving.items():  # the destinations first: an interruption then loses nothing
        lock = locks[path]
        data = (parse_yaml_for_update(lock.read_text(), str(lock)) if lock.is_file()
                else {"schema": "2.0", "stages": {}})
        data.setdefault("stages", {})
        for name, entry in entries.items():
            data["stages"].setdefault(name, entry)
        lock.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(lock, dumps_yaml(data))
    moved = {name for entries in moving.values() for name in entries}
    for lock, data in sources.items():
        for name in moved & set(data["stages"]):
            del data["stages"][name]
        write_text_atomic(lock, dumps_yaml(data))
    return len(moved)
