"""harness.dvc_fast is DVC's own command line with per-process caches (parsed YAML, built hashes, one project file
per path while targets are collected): on a small project of its own it must see exactly what plain `dvc` sees,
after each kind of edit, and re-run a chain of stages as plain `dvc` would."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dpath
import pytest

from harness.dvc_fast import _MISSING, _plain_lookup, short_command_line

DVC = Path(sys.executable).parent / "dvc"
ABCD = ("a", "b", "c", "d")
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1"}

# in/ -> stage a -> mid/ -> stage b -> b.txt; stage c reads in/ and a param; stage d reads code.py only;
# stage e copies DVC's path locks as its command sees them
DVC_YAML = """\
stages:
  a:
    cmd: python copy_tree.py in mid
    deps: [in, copy_tree.py]
    outs: [mid]
  b:
    cmd: python copy_tree.py mid b.txt
    deps: [mid, copy_tree.py]
    outs: [b.txt]
  c:
    cmd: python copy_tree.py in c.txt
    deps: [in, copy_tree.py]
    params: [opts.size, opts.names]
    outs: [c.txt]
  d:
    cmd: python copy_tree.py code.py d.txt
    deps: [code.py, copy_tree.py]
    outs: [d.txt]
  e:
    cmd: python copy_tree.py .dvc/tmp/rwlock locks_seen.json
    deps: [in]
    outs: [locks_seen.json]
"""

# copies a folder (or a file) to a folder (or concatenates it into a file), upper-casing with a third argument
COPY_TREE_PY = """\
import pathlib, shutil, sys
src, dst = map(pathlib.Path, sys.argv[1:3])
change = (lambda b: b.upper()) if sys.argv[3:] == ["upper"] else (lambda b: b)
if dst.suffix:
    files = sorted(src.rglob("*")) if src.is_dir() else [src]
    dst.write_bytes(b"".join(change(f.read_bytes()) for f in files if f.is_file()))
else:
    shutil.rmtree(dst, ignore_errors=True)
    for f in src.rglob("*"):
        if f.is_file():
            (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            (dst / f.relative_to(src)).write_bytes(change(f.read_bytes()))
"""


def _dvc(project: Path, *args: str, fast: bool) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "harness.dvc_fast", *args] if fast else [str(DVC), *args]
    # harness must import from the checkout, not from the scratch project's working directory
    env = {**ENV, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    result = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _status(project: Path, *targets: str, fast: bool) -> dict:
    return json.loads(_dvc(project, "status", "--json", *targets, fast=fast).stdout or "{}")


def _ran(project: Path, *targets: str) -> list[str]:
    output = _dvc(project, "repro", "--single-item", *targets, fast=True).stdout
    return [line.split("'")[1] for line in output.splitlines() if line.startswith("Running stage")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    if not DVC.exists():
        pytest.skip(f"no dvc beside {sys.executable}: run scripts/setup")
    root = tmp_path / "project"
    (root / "in" / "sub").mkdir(parents=True)
    for index in range(30):
        (root / "in" / ("sub" if index % 3 else "") / f"f{index:02d}.txt").write_text(f"item {index}\n")
    (root / "copy_tree.py").write_text(COPY_TREE_PY)
    (root / "code.py").write_text("VALUE = 1\n")
    (root / "params.yaml").write_text("opts:\n  size: 3\n  names: [x, y]\nother: {deep: {key: 1}}\n")
    (root / "dvc.yaml").write_text(DVC_YAML)
    subprocess.run([str(DVC), "init", "--no-scm", "-q"], cwd=root, check=True, env=ENV, timeout=120)
    subprocess.run([str(DVC), "config", "core.site_cache_dir", str(root / ".dvc" / "site_cache")], cwd=root,
                   check=True, env=ENV, timeout=120)
    return root


@pytest.mark.dvc
def test_fast_and_plain_dvc_see_the_same_changes(project: Path) -> None:
    assert sorted(_ran(project, *ABCD)) == list(ABCD)
    assert _status(project, *ABCD, fast=True) == _status(project, *ABCD, fast=False) == {}
    assert _ran(project, *ABCD) == []

    edits = {
        # an in-place edit of one file deep in a dependency folder, same size
        "a file inside a folder": lambda: (project / "in" / "sub" / "f01.txt").write_text("ITEM 1\n"),
        "a new file in a folder": lambda: (project / "in" / "new.txt").write_text("new\n"),
        "a file dependency": lambda: (project / "code.py").write_text("VALUE = 2\n"),
        "a param": lambda: (project / "params.yaml").write_text(
            (project / "params.yaml").read_text().replace("size: 3", "size: 4")),
        "an output removed": lambda: shutil.rmtree(project / "mid"),
    }
    for what, edit in edits.items():
        edit()
        fast, plain = _status(project, *ABCD, fast=True), _status(project, *ABCD, fast=False)
        assert fast == plain, what
        assert fast, f"{what}: nothing flagged"
        _ran(project, *ABCD)
        assert _status(project, *ABCD, fast=True) == {}, what


@pytest.mark.dvc
def test_fast_and_plain_dvc_write_the_same_lock_file(project: Path, tmp_path: Path) -> None:
    """dvc_fast keeps the dvc.lock document it wrote for the next stage's rewrite instead of re-parsing it: the
    file must come out byte for byte as plain DVC writes it, over several rewrites in one process."""
    twin = tmp_path / "twin"
    shutil.copytree(project, twin, symlinks=True)
    subprocess.run([str(DVC), "config", "core.site_cache_dir", str(twin / ".dvc" / "site_cache")], cwd=twin,
                   check=True, env=ENV, timeout=120)
    for edit in (None, "in/f03.txt", "code.py"):
        for root in (project, twin):
            if edit:
                (root / edit).write_text((root / edit).read_text() + "more\n")
            _dvc(root, "repro", "--single-item", *ABCD, fast=root == project)
        assert (project / "dvc.lock").read_bytes() == (twin / "dvc.lock").read_bytes(), edit


@pytest.mark.dvc
@pytest.mark.parametrize("edit", ["comments", "a comment between entries"])
def test_a_hand_edited_lock_file_is_rewritten_as_plain_dvc_rewrites_it(project: Path, tmp_path: Path,
                                                                       edit: str) -> None:
    """A process's first dvc.lock rewrite starts from DVC's safe parse, which drops comments; comments a person
    added must come out as DVC's round-trip rewrite leaves them (it keeps one even on an entry it replaces), so
    a text with any comment goes through DVC's own parse and dump (_replay), wherever the comment is."""
    _dvc(project, "repro", "--single-item", *ABCD, fast=False)
    twin = tmp_path / "twin"
    shutil.copytree(project, twin, symlinks=True)
    subprocess.run([str(DVC), "config", "core.site_cache_dir", str(twin / ".dvc" / "site_cache")], cwd=twin,
                   check=True, env=ENV, timeout=120)
    for root in (project, twin):
        lines = (root / "dvc.lock").read_text().splitlines(keepends=True)
        at = {line: number for number, line in enumerate(lines)}
        lines.insert(at["  b:\n"] + 1, "    # checked by hand\n")  # inside an entry that stays
        lines.insert(at["  a:\n"] + 1, "    # inside an entry that changes\n")
        if edit == "a comment between entries":
            lines.insert(at["  c:\n"], "  # between entries\n")
        (root / "dvc.lock").write_text("# edited by hand\n" + "".join(lines))
        (root / "in" / "f03.txt").write_text("changed\n")
        _dvc(root, "repro", "--single-item", *ABCD, fast=root == project)
    assert (project / "dvc.lock").read_text() == (twin / "dvc.lock").read_text()
    assert "# edited by hand" in (project / "dvc.lock").read_text()


@pytest.mark.dvc
def test_a_repro_reruns_the_chain_through_a_rewritten_folder(project: Path) -> None:
    """One process checks `a` (hashing its output mid/), runs it (rewriting mid/ with files of the same sizes),
    hashes mid/ again for dvc.lock, then checks `b`, whose dependency is mid/: both must see the new mid/, not
    a hash kept from before `a` ran."""
    _ran(project, "a", "b")
    (project / "in" / "f00.txt").write_text("ITEM 0\n")  # the same size: only content, inode, times change
    assert _ran(project, "a", "b") == ["a", "b"]
    assert b"ITEM 0" in (project / "b.txt").read_bytes()
    assert _ran(project, "a", "b") == []
    # a changed command, inputs unchanged: DVC hashes a's outputs before running it and again after
    dvc_yaml = project / "dvc.yaml"
    dvc_yaml.write_text(dvc_yaml.read_text().replace("copy_tree.py in mid", "copy_tree.py in mid upper"))
    assert _ran(project, "a", "b") == ["a", "b"]
    assert b"ITEM 12" in (project / "b.txt").read_bytes()
    assert _status(project, "a", "b", fast=False) == {}
    # an output edited by hand, same size: `a` hashes mid/ (changed), DVC restores it from its run cache (a
    # checkout, not a run), and b must see the restored mid/ (hashed afresh), unchanged against dvc.lock
    (project / "mid" / "sub" / "f01.txt").write_text("item 1\n")
    assert _ran(project, "a", "b") == []
    assert (project / "mid" / "sub" / "f01.txt").read_text() == "ITEM 1\n"
    assert _status(project, "a", "b", fast=False) == {}


# In one process: a dependency's walk is a snapshot until DVC runs, checks out or commits a stage.
SNAPSHOT = """
import contextlib, pathlib, sys
from dvc.stage import Stage
from dvc_data.hashfile import build as build_module
from dvc_data.hashfile.db import HashFileDB
from dvc_objects.fs import LocalFileSystem
from harness import dvc_fast

dvc_fast.patch_hash_builds()
root = pathlib.Path(sys.argv[1])
fs, folder = LocalFileSystem(), str(root / "folder")
odb = HashFileDB(fs, str(root / "cache"))

def hashed(dry_run):
    return build_module.build(odb, folder, fs, "md5", dry_run=dry_run)[2].hash_info.value

first = hashed(True)
(root / "folder" / "a.txt").write_text("two\\n")
snapshot, output = hashed(True), hashed(False)  # an output's walk is never reused
with contextlib.suppress(AttributeError):  # Stage.checkout(None) fails here, after the reset
    Stage.checkout(None)  # what DVC calls when it writes into the workspace
print(first, snapshot, output, hashed(True))
"""


def test_a_dependency_walk_is_reused_only_until_dvc_writes(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.txt").write_text("one\n")
    result = subprocess.run([sys.executable, "-c", SNAPSHOT, str(tmp_path)], capture_output=True, text=True,
                            timeout=120, cwd=Path(__file__).resolve().parents[1], env=ENV)
    assert result.returncode == 0, result.stderr
    first, snapshot, output, after = result.stdout.split()
    assert snapshot == first
    assert output != first
    assert after == output


@pytest.mark.dvc
def test_a_running_stage_holds_its_path_locks(project: Path) -> None:
    """Nested locks on paths already held are skipped; the stage's own locks must still be in .dvc/tmp/rwlock
    while its command runs, as other DVC processes read them."""
    _ran(project, "e")
    locks = json.loads((project / "locks_seen.json").read_text())
    assert list(locks["read"]) == [str(project / "in")]
    assert list(locks["write"]) == [str(project / "locks_seen.json")]
    assert locks["write"][str(project / "locks_seen.json")]["cmd"].endswith("repro --single-item e")
    assert json.loads((project / ".dvc" / "tmp" / "rwlock").read_text()) == {}


def test_param_lookup_matches_dpath() -> None:
    config = {"opts": {"size": 3, "names": ["x", "y"], "nested": {"deep": None}}, "other": {1: "int key"}}
    for key in ("opts", "opts.size", "opts.names", "opts.nested.deep", "opts.names.1", "other.1"):
        assert _plain_lookup(config, key) == dpath.get(config, key, separator="."), key
    for key in ("missing", "opts.missing", "opts.size.more"):
        with pytest.raises(KeyError):
            dpath.get(config, key, separator=".")
        assert _plain_lookup(config, key) is _MISSING, key
    assert _plain_lookup(config, "opts.si*") == 3  # globs go to dpath


def test_long_target_lists_are_shortened_for_dvc_lock_files() -> None:
    short = ["repro", "--single-item", "a", "b"]
    assert short_command_line(short) == short
    many = ["repro", "--single-item", "--keep-going", *(f"stage-{i}" for i in range(200))]
    assert short_command_line(many) == ["repro", "--single-item", "--keep-going", "<200 targets>"]


def test_dvc_in_this_project_starts_no_network_daemon(root_dvc: Path) -> None:
    """DVC spawns a detached `dvc daemon analytics` (and, until it has reached its update server once, an updater
    daemon) after every command unless told not to: a network attempt at run time, which the project never
    needs. The committed .dvc/config turns both off, for the CLI and for plain `dvc`."""
    root = root_dvc
    env = {key: value for key, value in os.environ.items() if key not in ("DVC_NO_ANALYTICS", "CI", "DVC_TEST")}
    result = subprocess.run([sys.executable, "-m", "dvc", "config", "--list", "--project"], cwd=root,
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    settings = dict(line.split("=", 1) for line in result.stdout.split())
    assert settings.get("core.analytics") == "false" and settings.get("core.check_update") == "false"
    verbose = subprocess.run([sys.executable, "-m", "dvc", "params", "diff", "-v"], cwd=root, capture_output=True,
                             text=True, timeout=120, env=env)
    assert "Analytics is disabled" in verbose.stdout + verbose.stderr
    assert "Spawned" not in verbose.stdout + verbose.stderr


def test_a_spliced_lock_file_equals_dvcs_full_dump(tmp_path: Path) -> None:
    """The project's own dvc.lock (long wrapped commands, nested params): entries changed at the start, middle
    and end and one added, re-emitted alone, give the bytes of DVC's dump of the whole document."""
    from dvc.utils.serialize import _yaml

    from harness.dvc_fast import _entry_ids, _spliced

    lock = tmp_path / "dvc.lock"
    shutil.copy(Path(__file__).resolve().parents[1] / "dvc.lock", lock)
    data = _yaml.parse_yaml_for_update(lock.read_text(), str(lock))
    before = _entry_ids(data)
    names = list(data["stages"])
    for name in (names[0], names[len(names) // 2], names[-1], "zz-added@stage"):
        entry = json.loads(json.dumps(data["stages"].get(name, data["stages"][names[1]])))
        entry["cmd"] += " --one-more-flag-long-enough-to-wrap-differently"
        entry["outs"][0]["md5"] = "0123456789abcdef0123456789abcdef"
        data["stages"].update({name: entry})  # as DVC's Lockfile.dump_stages does
    full = io.StringIO()
    _yaml._dump(data, full)
    assert _spliced(str(lock), data, before, _yaml._dump) == full.getvalue()
    del data["stages"][names[1]]
    assert _spliced(str(lock), data, before, _yaml._dump) is None  # a removal: left to DVC's full dump
