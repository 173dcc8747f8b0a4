"""`python -m harness.dvc_fast ARGS…`: DVC's own command line, with per-process caches where DVC repeats work.

DVC re-reads and re-parses params.yaml for every stage it checks (measured: 101 parses in one `dvc status` of
this project, ~6 of its ~9 s), and dvc.yaml once for every target named on its command line (measured: a
`dvc repro` of the 192 stages of `grid=all` parsed the 2,900-line dvc.yaml 192 times, over 10 minutes before
its first stage ran). Here a parse is kept for as long as the file's size and mtime are unchanged (DVC's own
writes of dvc.lock change both). A no-op `dvc repro` of the 183 stages of `grid=all` then still took 24 s: the
hashes of the same folders and source files, rebuilt for every stage that depends on them; a new ProjectFile
per target; a scan of params.yaml per parameter; four nested edits of .dvc/tmp/rwlock per stage, each with
~6 kB of command line beside every locked path. Each has a patch below (measured: 24 s -> 7.0 s; on the
generated 14 × 20 grid of benchmarks/dvc_scale.py, 23.3 s -> 4.9 s). And after each stage that runs, DVC
re-parsed and re-dumped the 28k-line dvc.lock it had just written (~5 s a stage, also patched). Everything
else is DVC's. The CLI runs DVC this way; `dvc` itself works the same, only slower (tests/test_dvc_fast.py
checks both see the same changes after each kind of edit and write the same dvc.lock bytes, that a chain of
stages re-runs through a rewritten folder, and that a running stage still holds its path locks).
"""

from __future__ import annotations

import copy
import io
import marshal
import os
import stat as stat_module
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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


_MISSING = object()


def _plain_lookup(config: Any, key_path: str) -> Any:
    """`dpath.get(config, key_path, separator=".")` for a key path without glob characters, by walking the
    dicts: dpath folds over every leaf of params.yaml per lookup (636 lookups, ~1.4 s profiled, in a no-op
    repro of `grid=all`). Returns _MISSING where dpath raises KeyError; anything unusual goes to dpath."""
    import dpath

    if any(c in key_path for c in "*?[]!\\"):
        return dpath.get(config, key_path, separator=".")
    value = config
    for segment in key_path.split("."):
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            if segment not in value:
                return _MISSING
            value = value[segment]
        else:
            try:
                return dpath.get(config, key_path, separator=".")
            except KeyError:
                return _MISSING
    return value


def patch_param_lookups() -> None:
    """A stage's params (dvc.dependency.param.read_param_file, flattened), looked up directly."""
    from dvc.dependency import param

    original = param.read_param_file
    if getattr(original, "visbench_cached", False):
        return

    def read_param_file(fs: Any, path: str, key_paths: list[str] | None = None, flatten: bool = False,
                        **load_kwargs: Any) -> Any:
        if not flatten or not key_paths:
            return original(fs, path, key_paths, flatten, **load_kwargs)
        config = param.load_path(path, fs, **load_kwargs)
        found = {key_path: _plain_lookup(config, key_path) for key_path in key_paths}
        return {key: value for key, value in found.items() if value is not _MISSING}

    read_param_file.visbench_cached = True  # type: ignore[attr-defined]
    param.read_param_file = read_param_file


def patch_yaml_loads() -> None:
    """dvc.yaml and dvc.lock: DVC's strictyaml.load (parse + schema check), kept per (file, mtime, size, schema).
    Round-trip loads (DVC editing a file and keeping its comments) and other filesystems (a git revision) go
    through as they are."""
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA as lock_schema
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
            if schema is lock_schema:
                cache[key] = _lock_file_parse(path, encoding, lambda: original(path, schema, fs, encoding, False))
            else:
                cache[key] = original(path, schema, fs, encoding, round_trip)
            _SAFE_PARSES[key[0]] = (_stat_key(stat), cache[key][0])
        return _fresh_copy(cache[key])

    load.visbench_cached = True  # type: ignore[attr-defined]
    strictyaml.load = load


def _lock_file_parse(path: str, encoding: str, load: Any) -> tuple[Any, str]:
    """DVC's (data, text) for dvc.lock, the data kept across processes by the file's bytes (harness.parse_cache):
    `load()` parses and checks the lock schema only when no process parsed these bytes with this DVC before."""
    import dvc
    import ruamel.yaml
    import voluptuous

    from harness.parse_cache import cached

    with open(path, "rb") as handle:
        raw = handle.read()
    text = raw.decode(encoding)

    def parse() -> Any:
        data, read = load()
        if read != text:  # the file changed between the two reads: keep nothing under these bytes
            raise _Changed(data, read)
        return data

    parser = (f"dvc {dvc.__version__} lockfile; ruamel.yaml {ruamel.yaml.__version__}; "
              f"voluptuous {voluptuous.__version__}")
    try:
        return cached(parser, raw, parse), text
    except _Changed as changed:
        return changed.args[0], changed.args[1]


class _Changed(Exception):
    """dvc.lock was rewritten while being read: DVC's own (data, text) go through uncached."""


# The latest safe (not round-trip) parse of each local YAML file DVC loaded through strictyaml.load, with the
# file's stat when it was read: what a dvc.lock rewrite starts from while the file is unchanged.
_SAFE_PARSES: dict[str, tuple[tuple[int, ...], Any]] = {}


def _stat_key(stat: os.stat_result) -> tuple[int, ...]:
    # DVC's state database trusts inode, mtime and size; ctime and mode cost nothing more and catch more
    return (stat.st_ino, stat.st_dev, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_mode)


def _tree_fingerprint(path: str) -> tuple[Any, ...] | None:
    """Every entry under a directory with its stat, or None when the tree holds a symlink (where DVC's walk and
    this one could disagree on what is inside). Listing order is the filesystem's: a different order for the
    same tree is only a cache miss."""
    entries: list[Any] = [_stat_key(os.stat(path))]
    pending = [path]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as listing:
            for entry in listing:
                if entry.is_symlink():
                    return None
                stat = entry.stat(follow_symlinks=False)
                entries.append(entry.path)
                entries.append(_stat_key(stat))
                if stat_module.S_ISDIR(stat.st_mode):
                    pending.append(entry.path)
    return tuple(entries)


def patch_hash_builds() -> None:
    """A path's hash, computed once per process for as long as nothing under it changes on disk.

    One stage's check walks and looks up (in DVC's state database) every file of every dependency; in a grid the
    same data and feature folders and the same ~30 source files are dependencies of many stages: a no-op
    `dvc repro` of the 183 stages of `grid=all` spent 27 of its 42 s (profiled) in 373 directory walks covering
    67k files. Here the result of DVC's own build is kept, keyed by the stat of the file or of every entry under
    the folder (inode, device, mtime, ctime, size, mode), so any write (a stage re-creating its outputs, a
    checkout from the run cache) is a new key and DVC computes it again. Trees holding symlinks and other
    filesystems always go to DVC.

    Walking a folder for its stats is itself the next cost (data/scenes, 2,200 entries, is a dependency of 78
    stages), so a dependency's walk (a dry run: only its hash is wanted) is reused until DVC runs, checks out
    or commits a stage in this process, which is when DVC itself writes into the workspace; an output's walk
    is never reused. What one process sees is thus one snapshot of its dependencies: an edit made while it
    runs is seen by the next `dvc` command, against the unchanged dvc.lock."""
    from dvc import output
    from dvc.stage import Stage
    from dvc_data.hashfile import build as build_module

    original = build_module.build
    if getattr(original, "visbench_cached", False):
        return
    cache: dict[tuple[Any, ...], Any] = {}
    walks: dict[str, tuple[Any, ...] | None] = {}

    def forget_walks(method: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            walks.clear()
            try:
                return method(*args, **kwargs)
            finally:
                walks.clear()

        return wrapper

    for name in ("run", "checkout", "commit"):
        setattr(Stage, name, forget_walks(getattr(Stage, name)))

    def walk(path: str, dry_run: bool) -> tuple[Any, ...] | None:
        if not dry_run:
            return _tree_fingerprint(path)
        if path not in walks:
            walks[path] = _tree_fingerprint(path)
        return walks[path]

    def build(odb: Any, path: str, fs: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if getattr(fs, "protocol", None) != "local" or args or kwargs.get("upload"):
            return original(odb, path, fs, name, *args, **kwargs)
        ignore, dry_run = kwargs.get("ignore"), bool(kwargs.get("dry_run"))
        where = os.path.abspath(path)
        try:
            stat = os.stat(where, follow_symlinks=False)
            if stat_module.S_ISLNK(stat.st_mode):
                return original(odb, path, fs, name, *args, **kwargs)
            fingerprint = walk(where, dry_run) if stat_module.S_ISDIR(stat.st_mode) else _stat_key(stat)
        except OSError:
            return original(odb, path, fs, name, *args, **kwargs)
        if fingerprint is None:
            return original(odb, path, fs, name, *args, **kwargs)
        key = (where, id(odb), id(ignore), name, fingerprint)
        # a dry run (a dependency's check) only needs the hash, so an output's full build of the same tree
        # serves it; a full build (objects staged for a commit) is never served by a dry run's
        found = cache.get((*key, False)) or (cache.get((*key, True)) if dry_run else None)
        if found is None:
            # odb and ignore are kept alive with the result, so their ids in the key are never reused
            found = cache[(*key, dry_run)] = (original(odb, path, fs, name, *args, **kwargs), odb, ignore)
        return found[0]

    build.visbench_cached = True  # type: ignore[attr-defined]
    build_module.build = output.build = build


def patch_nested_rwlocks() -> None:
    """DVC takes its path locks (.dvc/tmp/rwlock, a JSON file it reads, validates and rewrites under a file lock)
    four times per stage checked, nested: reproduce (deps read, outs written), and inside it changed, its deps
    check and its outs check, each on paths the outer lock already holds for this process: 8 edits per stage,
    6.7 s (profiled) of a no-op repro of 342 stages. A lock asking only for paths this process already holds
    (read under a read or a write, written under a write) adds nothing another process could see, so it is
    skipped; the outer lock, and every lock on anything not yet held, is DVC's."""
    from dvc import rwlock as rwlock_module

    original = rwlock_module.rwlock
    if getattr(original, "visbench_cached", False):
        return
    held: dict[str, dict[str, list[str]]] = {}

    @contextmanager
    def rwlock(tmp_dir: str, fs: Any, cmd: str, read: list[str], write: list[str], hardlink: bool) -> Iterator[None]:
        mine = held.setdefault(tmp_dir, {"read": [], "write": []})
        if all(p in mine["write"] for p in write) and all(p in mine["write"] or p in mine["read"] for p in read):
            yield
            return
        with original(tmp_dir, fs, cmd, read, write, hardlink):
            mine["read"].extend(read)
            mine["write"].extend(write)
            try:
                yield
            finally:
                for path in read:
                    mine["read"].remove(path)
                for path in write:
                    mine["write"].remove(path)

    rwlock.visbench_cached = True  # type: ignore[attr-defined]
    rwlock_module.rwlock = rwlock


def _entry_ids(data: Any) -> tuple[list[tuple[str, int]], dict[str, int]] | None:
    """The top-level keys and the identity of each entry under `stages` (DVC replaces the entries it changes)."""
    stages = data.get("stages") if isinstance(data, dict) else None
    if not isinstance(stages, dict):
        return None
    return [(key, id(value)) for key, value in data.items()], {key: id(value) for key, value in stages.items()}


def _spliced(path: str, data: Any, before: Any, dump: Any) -> str | None:
    """The file's new text from its current text with only the changed `stages` entries re-emitted, or None
    when that is not certain to equal DVC's full dump (then the caller dumps everything).

    Each entry is dumped as `{"stages": {name: entry}}`, with DVC's dumper, so it is emitted at the column and
    with the line wrapping it has in the whole file; an entry's block in the text runs from its key line to the
    next line with two spaces of indentation or none. Changed entries are replaced in place, new ones appended
    (a mapping's update keeps old keys in place and adds new ones at its end); anything else (a key removed,
    another top-level key changed, `stages` not the file's last key) is left to the full dump."""
    now = _entry_ids(data)
    if before is None or now is None:
        return None
    (top_before, stages_before), (top_now, stages_now) = before, now
    if [key for key, _ in top_now] != [key for key, _ in top_before] or top_now[-1][0] != "stages":
        return None
    if not {key for key, _ in top_now} <= {"schema", "stages"}:
        return None  # e.g. `datasets`, which DVC edits in place: only a full dump is sure to carry that
    if any(value != dict(top_before)[key] for key, value in top_now if key != "stages"):
        return None
    if any(key not in stages_now for key in stages_before):
        return None
    if list(stages_now)[: len(stages_before)] != list(stages_before):
        return None
    changed = [key for key, value in stages_now.items() if stages_before.get(key) != value]
    with open(path, encoding="utf-8") as stream:
        lines = stream.read().splitlines(keepends=True)
    blocks = _stage_blocks(lines)
    if blocks is None or list(blocks) != list(stages_before):
        return None
    replacement: dict[str, list[str]] = {}
    for key in changed:
        stream = io.StringIO()
        dump({"stages": {key: data["stages"][key]}}, stream)
        emitted = stream.getvalue().splitlines(keepends=True)
        if not emitted or emitted[0] != "stages:\n":
            return None
        replacement[key] = emitted[1:]
    out: list[str] = lines[: blocks[next(iter(blocks))][0]] if blocks else lines[:]
    for key, (start, end) in blocks.items():
        out += replacement.get(key, lines[start:end])
    for key in changed:
        if key not in blocks:
            out += replacement[key]
    return "".join(out)


def _replay(document: Any, data: Any, before: Any) -> None:
    """Make `document` (DVC's round-trip parse) what `data` became, by the same edits: keys removed, changed
    top-level values set, and under `stages` each entry DVC replaced (a new object) replaced here too; an
    entry left alone keeps its comments and styles, as DVC's own rewrite would."""
    stage_ids = before[1] if before else {}
    for key in [key for key in document if key not in data]:
        del document[key]
    for key, value in data.items():
        old = document.get(key, _MISSING)
        if key == "stages" and isinstance(value, dict) and isinstance(old, dict):
            for name in [name for name in old if name not in value]:
                del old[name]
            for name, entry in value.items():
                if name not in old or id(entry) != stage_ids.get(name):
                    old[name] = entry
        elif old is _MISSING or old != value:
            document[key] = value


def _stage_blocks(lines: list[str]) -> dict[str, tuple[int, int]] | None:
    """Line ranges of the entries under a last top-level `stages:` key, by key; None if the layout is not that,
    or if the text may hold a comment (DVC's round-trip rewrite keeps a comment even on an entry it replaces)."""
    if any("#" in line for line in lines):
        return None
    try:
        start = lines.index("stages:\n")
    except ValueError:
        return None
    blocks: dict[str, tuple[int, int]] = {}
    current: str | None = None
    for number in range(start + 1, len(lines)):
        line = lines[number]
        if not line.startswith(" "):
            return None  # another top-level key after stages
        if line.startswith("  ") and not line.startswith("   ") and line[2] != "-":
            if current is not None:
                blocks[current] = (blocks[current][0], number)
            if not line.rstrip("\n").endswith(":") or line[2] in "'\"":
                return None  # a key written with a value inline or quoted: not the layout expected
            current = line[2:].rstrip("\n")[:-1]
            blocks[current] = (number, len(lines))
    return blocks


def patch_lock_rewrites() -> None:
    """After each stage that runs, DVC rewrites dvc.lock: a comment-preserving (round-trip) parse of the whole
    file, one entry changed, a dump. ruamel's round-trip parser is pure Python: ~3 s of the ~5 s DVC added to
    every stage in this project (28k-line dvc.lock), measured in a clone running a 9-stage grid. Here the
    document this process last wrote is kept with the file's stat after the write, and the next rewrite starts
    from it instead of re-parsing, as long as nothing else touched the file (any write changes its mtime and
    ctime). The dump (the other ~1.9 s) then re-emits only the entries that changed, with DVC's dumper, into
    the text as it is (_spliced); where that is not certain to give DVC's bytes, DVC's full dump runs. The
    process's first rewrite starts from DVC's safe (C) parse of the file instead, the one it made while checking
    the stages (~0.6 s when made afresh); if that rewrite cannot be spliced, DVC's round-trip parse gets the
    same edits (_replay) and its dump is written. tests/test_dvc_fast.py compares the bytes with plain DVC's,
    run for run, on this project's dvc.lock, and on a hand-edited lock file."""
    from dvc import dvcfile
    from dvc.utils.serialize import _yaml

    original = dvcfile.modify_yaml
    if getattr(original, "visbench_cached", False):
        return
    written: dict[str, tuple[tuple[int, ...], Any]] = {}
    # Only Lockfile.dump_stages goes the fast way: its one change to the document is `stages.update(...)`, which
    # replaces whole entries (what _spliced detects). Other writers (dvc.yaml edits, datasets, removals) may
    # change the document in place, so they get DVC's own parse and dump.
    in_dump_stages = [False]
    dump_stages = dvcfile.Lockfile.dump_stages

    def marked_dump_stages(self: Any, *args: Any, **kwargs: Any) -> Any:
        in_dump_stages[0] = True
        try:
            return dump_stages(self, *args, **kwargs)
        finally:
            in_dump_stages[0] = False

    def current(where: str) -> tuple[int, ...] | None:
        try:
            return _stat_key(os.stat(where))
        except OSError:
            return None

    def commented(where: str) -> bool:
        """Whether the file may hold a comment: ruamel drops a comment on a replaced entry at the second dump of
        one document, where DVC, parsing afresh each time, keeps it; so such a document is not kept."""
        with open(where, encoding="utf-8") as stream:
            return "#" in stream.read()

    def first_parse(where: str, stat: tuple[int, ...] | None) -> Any:
        """The file as DVC's safe loader reads it (the parse DVC made while checking stages, if the file is
        unchanged since), or None when it is absent or not a mapping."""
        if stat is None:
            return None
        parsed = _SAFE_PARSES.get(where)
        if parsed is not None and parsed[0] == stat:
            return _fresh_copy(parsed[1])
        with open(where, encoding="utf-8") as stream:
            data = _yaml.parse_yaml(stream.read(), where)
        return data if isinstance(data, dict) and data else None

    @contextmanager
    def modify_yaml(path: Any, fs: Any = None) -> Iterator[Any]:
        where = os.path.abspath(os.fspath(path))
        kept = written.pop(where, None)
        tracked = in_dump_stages[0] and (fs is None or getattr(fs, "protocol", None) == "local")
        round_trip = kept is not None and kept[0] == current(where)  # DVC's own document, written by this process
        data = kept[1] if round_trip else first_parse(where, current(where)) if tracked else None
        if data is None:
            with original(path, fs=fs) as data:
                yield data
        else:
            before = _entry_ids(data)
            yield data
            text = _spliced(where, data, before, _yaml._dump)
            if text is not None:
                with open(where, "w", encoding="utf-8") as stream:
                    stream.write(text)
            elif round_trip:
                _yaml._dump_data(path, data, dumper=_yaml._dump, fs=fs)
            else:
                # a safe parse keeps no comments or styles: DVC's round-trip parse gets the same edits instead
                with original(path, fs=fs) as document:
                    _replay(document, data, before)
                data = document
        if tracked and not commented(where):
            written[where] = (current(where), data)

    modify_yaml.visbench_cached = True  # type: ignore[attr-defined]
    dvcfile.modify_yaml = modify_yaml
    dvcfile.Lockfile.dump_stages = marked_dump_stages


@contextmanager
def _one_project_file_per_path() -> Iterator[None]:
    """While DVC collects stages, one ProjectFile (dvc.yaml with its dvc.lock, parsed and interpolated once) per
    file serves every target; each target still becomes its own Stage object."""
    from dvc import dvcfile

    load_file = dvcfile.load_file
    files: dict[tuple[Any, ...], Any] = {}

    def shared_load_file(repo: Any, path: Any, **options: Any) -> Any:
        if options:
            return load_file(repo, path, **options)
        key = (id(repo), os.path.abspath(path))
        if key not in files:
            files[key] = (load_file(repo, path), repo)  # the repo kept alive: its id is never reused here
        return files[key][0]

    dvcfile.load_file = shared_load_file
    try:
        yield
    finally:
        dvcfile.load_file = load_file


def patch_stage_collection() -> None:
    """`dvc repro T1 T2 …` and `dvc status T1 T2 …` load dvc.yaml and dvc.lock afresh for every target (a new
    ProjectFile, its own copy of both files and its own interpolation of dvc.yaml): 7 of 25 s (profiled) of a
    no-op repro of the 183 stages of `grid=all`. Here repro's target collection (before any stage runs) and the
    whole of a local status (which writes nothing) share one ProjectFile per file; DVC's own target parsing and
    lookup are untouched."""
    from dvc.repo import reproduce, status

    for module, name in ((reproduce, "collect_stages"), (status, "_local_status")):
        original = getattr(module, name)
        if getattr(original, "visbench_cached", False):
            continue

        def shared(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            with _one_project_file_per_path():
                return _original(*args, **kwargs)

        shared.visbench_cached = True  # type: ignore[attr-defined]
        setattr(module, name, shared)


def patch_local_fs_lookups() -> None:
    """The filesystem of an output or dependency (dvc.output.get_cloud_fs), resolved once per local path: DVC
    checks the remote-config schema again for each of the project's ~8,000 outputs whenever it loads the stages
    (5 of 35 s profiled of a probe-override experiment, which loads them 8 times). For a path without a URL
    scheme and no named remote, the answer depends only on the keyword arguments and core.checksum_jobs."""
    from urllib.parse import urlparse

    from dvc import output

    original = output.get_cloud_fs
    if getattr(original, "visbench_cached", False):
        return
    cache: dict[tuple[Any, ...], Any] = {}

    def get_cloud_fs(repo_config: Any, **kwargs: Any) -> Any:
        url = kwargs.get("url")
        if (not isinstance(url, str) or "name" in kwargs or urlparse(url).scheme
                or not all(isinstance(v, str | bool | int | None) for v in kwargs.values())):
            return original(repo_config, **kwargs)
        key = (tuple(sorted(kwargs.items())), ((repo_config or {}).get("core") or {}).get("checksum_jobs"))
        if key not in cache:
            cache[key] = original(repo_config, **kwargs)
        cls, config, fs_path = cache[key]
        return cls, dict(config), fs_path  # the caller owns its config, as it would a fresh one

    get_cloud_fs.visbench_cached = True  # type: ignore[attr-defined]
    output.get_cloud_fs = get_cloud_fs


def pin_site_cache_dir() -> None:
    """.dvc/config says `site_cache_dir = .dvc/site_cache`, relative to the working directory; DVC's temporary
    experiment workspaces (`dvc exp run --temp`, how probe overrides run) change directory and then fail on
    "unable to open database file". The same folder, given as an absolute path, works everywhere."""
    if not os.environ.get("DVC_SITE_CACHE_DIR") and os.path.isdir(".dvc"):
        os.environ["DVC_SITE_CACHE_DIR"] = os.path.abspath(os.path.join(".dvc", "site_cache"))


def short_command_line(args: list[str], limit: int = 400) -> list[str]:
    """What DVC writes, as the holder's command, into .dvc/tmp/rwlock beside every path a stage locks, twice per
    stage (it joins sys.argv): with the 183 targets of `grid=all` that was ~6 kB per path, ~30 paths per stage,
    ~1.5 s of JSON per no-op repro. Long target lists are shortened to their count; the options stay."""
    if sum(len(a) + 1 for a in args) <= limit:
        return args
    options = [a for a in args if a.startswith("-")]
    targets = [a for a in args if not a.startswith("-")]
    return [*targets[:1], *options, f"<{len(targets) - 1} targets>"]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    sys.argv = [sys.argv[0], *short_command_line(args)]
    pin_site_cache_dir()
    patch_param_reads()
    patch_param_lookups()
    patch_yaml_loads()
    patch_hash_builds()
    patch_stage_collection()
    patch_local_fs_lookups()
    patch_nested_rwlocks()
    patch_lock_rewrites()
    from dvc.cli import main as dvc_main

    return dvc_main(args)


if __name__ == "__main__":
    sys.exit(main())
