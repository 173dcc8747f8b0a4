"""Frozen releases of the leaderboard's data, and what moved between them.

`cut_release("v1", docs)` copies the current downloads (docs/downloads/, see `downloads`) to
docs/releases/v1/ once, and refuses if v1 exists: a release never changes afterwards. Nothing else writes
there: the site stage only reads releases, for the downloads page and the changelog, and
tests/test_site_drift.py checks every committed release against its own SHA256SUMS.

The changelog compares releases by run id and headline, in SQL over each release's corpus.json: a run is
added, removed, or moved (its headline value, metric or status changed); everything else is unchanged.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from harness.leaderboard.queries.db import fetch
from harness.leaderboard.queries.downloads import DOWNLOADS_DIR, SUMS, parse_sums, sha256

RELEASES_DIR = "releases"  # relative to docs/
RELEASE_NAME = re.compile(r"v[1-9][0-9]*")
CORPUS_TABLE = "corpus.json"  # what the changelog reads from each release


class ReleaseError(RuntimeError):
    """A release that cannot be cut (it exists, or the downloads are not whole) or is not what it says."""


@dataclass(frozen=True)
class Release:
    name: str  # "v1"
    path: Path
    sums: dict[str, str]  # file name → SHA-256, from its SHA256SUMS
    sums_sha256: str  # of the SHA256SUMS file itself: one digest naming the whole release


def release_number(name: str) -> int:
    if not RELEASE_NAME.fullmatch(name):
        raise ReleaseError(f"a release is named v1, v2, …, not {name!r}")
    return int(name[1:])


def check_files(directory: Path) -> list[str]:
    """What is wrong with a folder of downloads against its SHA256SUMS: missing, extra or changed files."""
    sums_file = directory / SUMS
    if not sums_file.is_file():
        return [f"{directory}: no {SUMS}"]
    sums = parse_sums(sums_file.read_text(encoding="utf-8"))
    present = {p.name for p in directory.iterdir() if p.is_file()} - {SUMS}
    problems = [f"{directory}/{name}: listed in {SUMS} but missing" for name in sorted(set(sums) - present)]
    problems += [f"{directory}/{name}: not listed in {SUMS}" for name in sorted(present - set(sums))]
    problems += [f"{directory}/{name}: SHA-256 differs from {SUMS}" for name in sorted(set(sums) & present)
                 if sha256((directory / name).read_bytes()) != sums[name]]
    return problems


def releases(docs_dir: Path) -> list[Release]:
    """The committed releases, oldest first; ReleaseError for a misnamed folder or one that fails its sums."""
    root = Path(docs_dir) / RELEASES_DIR
    if not root.is_dir():
        return []
    found = []
    for path in sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: release_number(p.name)):
        problems = check_files(path)
        if problems:
            raise ReleaseError("a release changed after it was cut: " + "; ".join(problems))
        sums_bytes = (path / SUMS).read_bytes()
        found.append(Release(path.name, path, parse_sums(sums_bytes.decode("utf-8")), sha256(sums_bytes)))
    return found


def cut_release(name: str, docs_dir: Path) -> Path:
    """Copy docs/downloads/ to docs/releases/<name>/ and return that folder; never overwrites.

    Regenerate the site first (so the downloads are the corpus's) and after (so the downloads page and
    the changelog list the new release). The copy goes to a scratch folder beside the target and is renamed
    into place, so an interrupted cut leaves no half release.
    """
    release_number(name)
    source = Path(docs_dir) / DOWNLOADS_DIR
    target = Path(docs_dir) / RELEASES_DIR / name
    if target.exists():
        raise ReleaseError(f"{target} exists: a release is never overwritten; cut the next version instead")
    problems = check_files(source)
    if problems:
        raise ReleaseError("the downloads are not whole; regenerate the site first: " + "; ".join(problems))
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        for file in sorted(source.iterdir()):
            shutil.copyfile(file, scratch / file.name)
        os.chmod(scratch, 0o755)  # mkdtemp makes it private; a release is for everyone to read
        scratch.rename(target)  # atomic on one filesystem; fails rather than replace a folder made meanwhile
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return target


# -- the changelog -----------------------------------------------------------------------------------

_CHANGES_SQL = """
WITH old AS (SELECT run_id, headline_metric, headline_value, status FROM {old}),
new AS (SELECT run_id, headline_metric, headline_value, status FROM {new})
SELECT run_id,
       CASE WHEN old.run_id IS NULL THEN 'added' WHEN new.run_id IS NULL THEN 'removed' ELSE 'moved' END AS change,
       coalesce(new.headline_metric, old.headline_metric) AS metric,
       old.headline_metric AS old_metric, old.headline_value AS old_value, old.status AS old_status,
       new.headline_value AS new_value, new.status AS new_status,
       new.headline_value - old.headline_value AS delta
FROM old FULL OUTER JOIN new USING (run_id)
WHERE old.run_id IS NULL OR new.run_id IS NULL
   OR old.headline_metric IS DISTINCT FROM new.headline_metric
   OR old.headline_value IS DISTINCT FROM new.headline_value
   OR old.status IS DISTINCT FROM new.status
ORDER BY CASE change WHEN 'moved' THEN 0 WHEN 'added' THEN 1 ELSE 2 END, run_id
"""


def _release_table(release: Release) -> str:
    path = str(release.path / CORPUS_TABLE).replace("'", "''")
    return f"read_json('{path}', format = 'array')"


def changes(con: duckdb.DuckDBPyConnection, old: Release | None, new: Release | None) -> dict[str, Any]:
    """What moved from `old` to `new` (None: the current corpus in `con`'s records table): runs in each,
    and one row per added, removed or moved run."""
    tables = [_release_table(r) if r is not None else "records" for r in (old, new)]
    rows = fetch(con, _CHANGES_SQL.format(old=tables[0], new=tables[1])) if old is not None else []
    (runs,) = con.execute(f"SELECT count(*) FROM {tables[1]}").fetchone()
    return {"runs": runs, "rows": rows}
