"""Atomic writes: a reader (or a crash) never sees half a file.

The temporary file is mkstemp's (private, 0600); before the rename it takes the mode an ordinary `open` would
have given it (0666 less the umask), so records, pages and features are readable wherever the user's files
are (a shared filesystem, a web server), as git's and DVC's checkouts of them are.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path


def umask_mode() -> int:
    """0666 less the process's umask: the mode `open(path, "w")` creates files with."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _write_atomic(path: Path, data: bytes | str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            os.fchmod(handle.fileno(), umask_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename: readers never see half a file."""
    _write_atomic(path, text)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """`write_text_atomic` for bytes (the site's Parquet and gzip downloads, a probe head's safetensors)."""
    _write_atomic(path, data)


def write_all_atomic(files: list[tuple[Path, bytes | str]]) -> None:
    """Write several files as one unit: every file goes to a temporary beside its target first (where a full or
    read-only disk fails), and only when all are written are they renamed into place. On an OSError no target
    changes: the temporaries are removed and any target already renamed gets its old bytes back (or is removed
    when it had none), so a record never lands without its samples file, nor a samples file under an old record.
    The OSError raised names the target it concerns in `filename`."""
    staged: list[tuple[Path, str]] = []
    backups: list[tuple[Path, str | None]] = []  # renamed targets and where their old bytes were kept
    try:
        for path, data in files:
            path = Path(path)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
                staged.append((path, tmp))
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data.encode("utf-8") if isinstance(data, str) else data)
                    os.fchmod(handle.fileno(), umask_mode())
            except OSError as error:
                raise _naming(error, path) from None
        for path, tmp in staged:
            backup = None
            try:
                if path.is_file():
                    backup = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.old")
                    _keep(path, backup)
                os.replace(tmp, path)
            except OSError as error:
                if backup is not None:
                    Path(backup).unlink(missing_ok=True)
                raise _naming(error, path) from None
            backups.append((path, backup))
    except BaseException:
        for path, backup in reversed(backups):  # undo the renames already done
            try:
                if backup is None:
                    path.unlink(missing_ok=True)
                else:
                    os.replace(backup, path)
            except OSError:
                pass
        for _, tmp in staged:
            Path(tmp).unlink(missing_ok=True)
        raise
    for _, backup in backups:
        if backup is not None:
            Path(backup).unlink(missing_ok=True)


def _keep(path: Path, backup: str) -> None:
    """The old bytes of `path` at `backup`: a hard link where the filesystem has them (no copy), else a copy."""
    try:
        os.link(path, backup)
    except OSError:
        shutil.copy2(path, backup)


def _naming(error: OSError, path: Path) -> OSError:
    """The same error, naming the target rather than a temporary (or nothing, as a failed write names)."""
    return OSError(error.errno, error.strerror or str(error), str(path)) if error.errno else error
