"""Atomic writes: a reader (or a crash) never sees half a file.

The temporary file is mkstemp's (private, 0600); before the rename it takes the mode an ordinary `open` would
have given it (0666 less the umask), so records, pages and features are readable wherever the user's files
are (a shared filesystem, a web server), as git's and DVC's checkouts of them are.
"""

from __future__ import annotations

import os
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
