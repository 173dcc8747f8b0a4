"""Parses of dvc.lock kept by content, across processes and checkouts.

Every DVC process the CLI starts parses dvc.lock afresh (~1 MB, 28k lines: 0.8 s of DVC's safe parse and
schema check), and so does every CLI run that prunes stale entries from it (0.9 s of PyYAML for the stage
names). A parse is a function of the file's bytes and of the parser, so it is kept under the SHA-256 of both:
a later process, or another clone of the same commit, reads it back in milliseconds. An entry holds the
SHA-256 of its own payload, so a truncated or damaged entry is a miss, never a wrong parse; any failure to
read or write the cache is a miss too. The cache is an optimisation and never a source of truth.

Where: `$VISBENCH_PARSE_CACHE` if set (empty turns the cache off), else `$XDG_CACHE_HOME/visbench-harness/parses`
(`~/.cache/...`). The newest `KEEP` entries stay; dvc.lock changes whenever a stage runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.atomic import write_bytes_atomic

ENV = "VISBENCH_PARSE_CACHE"
KEEP = 16
_SUFFIX = ".marshal"


def cache_dir() -> Path | None:
    configured = os.environ.get(ENV)
    if configured is not None:
        return Path(configured) if configured.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "visbench-harness" / "parses"


def entry_key(parser: str, content: bytes) -> str:
    """The key of `content` parsed by `parser` (a name that changes whenever the parse could: library versions)."""
    # marshal's format is versioned per Python release; the interpreter is part of what wrote an entry
    header = f"{parser}\0marshal {marshal.version}\0python {sys.version_info[0]}.{sys.version_info[1]}\0"
    return hashlib.sha256(header.encode() + content).hexdigest()


def cached(parser: str, content: bytes, parse: Callable[[], Any]) -> Any:
    """`parse()`, or what it returned for the same parser and content before. Values must be plain data
    (what marshal writes: dicts, lists, strings, numbers); anything else is returned but not kept."""
    folder = cache_dir()
    if folder is None:
        return parse()
    entry = folder / f"{entry_key(parser, content)}{_SUFFIX}"
    found = _read(entry)
    if found is not None:
        return found[0]
    value = parse()
    with contextlib.suppress(OSError, ValueError):
        payload = marshal.dumps(value)
        write_bytes_atomic(entry, hashlib.sha256(payload).digest() + payload)
        _prune(folder)
    return value


def _read(entry: Path) -> tuple[Any] | None:
    try:
        data = entry.read_bytes()
    except OSError:
        return None
    digest, payload = data[:32], data[32:]
    if hashlib.sha256(payload).digest() != digest:
        return None
    try:
        value = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    with contextlib.suppress(OSError):
        os.utime(entry)  # recently used: kept by _prune
    return (value,)


def _prune(folder: Path) -> None:
    entries = []
    for path in folder.glob(f"*{_SUFFIX}"):
        with contextlib.suppress(OSError):
            entries.append((path.stat().st_mtime_ns, path))
    for _, path in sorted(entries, reverse=True)[KEEP:]:
        path.unlink(missing_ok=True)
