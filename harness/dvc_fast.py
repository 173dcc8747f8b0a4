"""`python -m harness.dvc_fast ARGS…`: DVC's own command line, with each YAML file parsed once per process.

DVC re-reads and re-parses params.yaml for every stage it checks (measured: 101 parses in one `dvc status` of
this project, ~6 of its ~9 s), and dvc.yaml once for every target named on its command line (measured: a
`dvc repro` of the 192 stages of `grid=all` parsed the 2,900-line dvc.yaml 192 times, over 10 minutes before
its first stage ran). Here a parse is kept for as long as the file's size and mtime are unchanged (DVC's own
writes of dvc.lock change both); everything else is DVC's. The CLI runs DVC this way; `dvc` itself works the
same, only slower (tests/test_pipeline.py checks both agree).
"""

from __future__ import annotations

import copy
import marshal
import os
import sys
from typing import Any


def _fresh_copy(value: Any) -> Any:
    """What a fresh parse would return: callers own (and DVC may change) what they get. YAML's plain types go
    through marshal, ~10× faster than deepcopy on a 3,000-line dvc.yaml; anything else (a date) through deepcopy."""
    try:
        return marshal.loads(marshal.dumps(value))
    except ValueError:
        return copy.deepcopy(value)


def patch_param_reads() -> None:
    """params.yaml, as stage params (dvc.dependency.param) and as dvc.yaml's interpolation context
    (dvc.parsing.context, which imports dvc.utils.serialize.load_path when it runs)."""
    from dvc.dependency import param
    from dvc.utils import serialize

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
        return _fresh_copy(cache[key])

    load_path.visbench_cached = True  # type: ignore[attr-defined]
    param.load_path = serialize.load_path = load_path


def patch_yaml_loads() -> None:
    """dvc.yaml and dvc.lock: DVC's strictyaml.load (parse + schema check), kept per (file, mtime, size, schema).
    Round-trip loads (DVC editing a file and keeping its comments) and other filesystems (a git revision) go
    through as they are."""
    from dvc.utils import strictyaml

    original = strictyaml.load
    if getattr(original, "visbench_cached", False):
        return
    cache: dict[tuple[Any, ...], Any] = {}

    def load(path: str, schema: Any = None, fs: Any = None, encoding: str = "utf-8", round_trip: bool = False) -> Any:
        if round_trip or (fs is not None and getattr(fs, "protocol", None) != "local"):
            return original(path, schema, fs, encoding, round_trip)
        try:
            stat = os.stat(path)
        except OSError:
            return original(path, schema, fs, encoding, round_trip)
        key = (os.path.abspath(path), stat.st_mtime_ns, stat.st_size, id(schema), encoding)
        if key not in cache:
            cache[key] = original(path, schema, fs, encoding, round_trip)
        return _fresh_copy(cache[key])

    load.visbench_cached = True  # type: ignore[attr-defined]
    strictyaml.load = load


def pin_site_cache_dir() -> None:
    """.dvc/config says `site_cache_dir = .dvc/site_cache`, relative to the working directory; DVC's temporary
    experiment workspaces (`dvc exp run --temp`, how probe overrides run) change directory and then fail on
    "unable to open database file". The same folder, given as an absolute path, works everywhere."""
    if not os.environ.get("DVC_SITE_CACHE_DIR") and os.path.isdir(".dvc"):
        os.environ["DVC_SITE_CACHE_DIR"] = os.path.abspath(os.path.join(".dvc", "site_cache"))


def main(argv: list[str] | None = None) -> int:
    pin_site_cache_dir()
    patch_param_reads()
    patch_yaml_loads()
    from dvc.cli import main as dvc_main

    return dvc_main(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
