"""Stages owed a re-run after a committed code change: their lock entry names a code fingerprint (`codedeps/*.txt`,
`harness.pipeline.fingerprints`) other than the one the committed code has now.

A change to a stage's code is committed first and its stages re-run after (a record names the commit that produced
it); a re-run too long for one sitting is split by grid, and the next plain run, DVC resuming, finishes it. In
between, those stages are stale for that reason alone: their records are the ones the earlier commit produced,
still ok and still naming it, and no other input of theirs moved. This module names them, so the checks that hold
a committed project to its lock (tests/test_pipeline.py) can tell that state from a real drift.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from harness.core.dvcfiles import read_locks

FINGERPRINTS = "codedeps/"


def owed_stages(root: Path = Path(".")) -> set[str]:
    """Stage names whose lock entry's code fingerprint differs from the file now (DVC 3's md5 of its bytes)."""
    current: dict[str, str | None] = {}

    def md5(path: str) -> str | None:
        if path not in current:
            file = root / path
            current[path] = hashlib.md5(file.read_bytes()).hexdigest() if file.is_file() else None
        return current[path]

    return {name for name, entry in read_locks(root).items()
            for dep in entry.get("deps", []) if dep["path"].startswith(FINGERPRINTS) and dep.get("md5") != md5(
                dep["path"])}
