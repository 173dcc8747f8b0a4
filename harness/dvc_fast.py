"""`python -m harness.dvc_fast ARGS…`: DVC's own command line, with each params file parsed once per process.

DVC re-reads and re-parses params.yaml for every stage it checks (measured: 101 parses in one `dvc status` of
this project, ~6 of its ~9 s), so a no-op over a few hundred stages costs most of its time in a YAML parser.
Here a parse is kept for as long as the file's size and mtime are unchanged; everything else is DVC's. The CLI
runs DVC this way; `dvc` itself works the same, only slower (tests/test_pipeline.py checks both agree).
"""

from __future__ import annotations

import copy
import os
import sys
from typing import Any


def patch_param_reads() -> None:
    from dvc.dependency import param

    original = param.load_path
    if getattr(original, "visbench_cached", False):
        return
    cache: dict[tuple[str, int, int], Any] = {}

    def load_path(path: str, fs: Any, **kwargs: Any) -> Any:
        if getattr(fs, "protocol", None) != "local" or kwargs:
            return original(path, fs, **kwargs)
        try:
            stat = os.stat(path)
        except OSError:
            return original(path, fs, **kwargs)
        key = (os.path.abspath(path), stat.st_mtime_ns, stat.st_size)
        if key not in cache:
            cache[key] = original(path, fs, **kwargs)
        return copy.deepcopy(cache[key])  # callers own what they get, as with a fresh parse

    load_path.visbench_cached = True  # type: ignore[attr-defined]
    param.load_path = load_path


def pin_site_cache_dir() -> None:
    """.dvc/config says `site_cache_dir = .dvc/site_cache`, relative to the working directory; DVC's temporary
    experiment workspaces (`dvc exp run --temp`, how probe overrides run) change directory and then fail on
    "unable to open database file". The same folder, given as an absolute path, works everywhere."""
    if not os.environ.get("DVC_SITE_CACHE_DIR") and os.path.isdir(".dvc"):
        os.environ["DVC_SITE_CACHE_DIR"] = os.path.abspath(os.path.join(".dvc", "site_cache"))


def main(argv: list[str] | None = None) -> int:
    pin_site_cache_dir()
    patch_param_reads()
    from dvc.cli import main as dvc_main

    return dvc_main(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
