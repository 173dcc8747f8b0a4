"""harness.parse_cache keeps a parse under the SHA-256 of the parser and the bytes parsed: the same bytes are parsed
once, other bytes or another parser are a miss, a damaged entry is a miss (never a wrong value), and a cache that
cannot be written or is turned off only costs the parse."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest

from harness import parse_cache
from harness.dvc_fast import _lock_file_parse
from harness.pipeline.generate import stale_lock_entries

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "parses"
    monkeypatch.setenv(parse_cache.ENV, str(folder))
    return folder


def _counting(value: object) -> tuple[list[int], object]:
    calls: list[int] = []

    def parse() -> object:
        calls.append(1)
        return value

    return calls, parse


def test_the_same_bytes_are_parsed_once_and_other_bytes_or_parsers_again(cache: Path) -> None:
    calls, parse = _counting({"stages": {"a": [1, 2.5, None, True]}})
    assert parse_cache.cached("p 1", b"text", parse) == {"stages": {"a": [1, 2.5, None, True]}}
    assert parse_cache.cached("p 1", b"text", parse) == {"stages": {"a": [1, 2.5, None, True]}}
    assert len(calls) == 1
    parse_cache.cached("p 1", b"other text", parse)
    parse_cache.cached("p 2", b"text", parse)  # a new parser version is a new key
    assert len(calls) == 3 and len(list(cache.iterdir())) == 3


@pytest.mark.parametrize("damage", ["truncated", "a flipped byte", "empty"])
def test_a_damaged_entry_is_parsed_again(cache: Path, damage: str) -> None:
    calls, parse = _counting(["x" * 100, 7])
    parse_cache.cached("p", b"text", parse)
    [entry] = cache.iterdir()
    data = entry.read_bytes()
    entry.write_bytes({"truncated": data[:-5], "a flipped byte": data[:-1] + bytes([data[-1] ^ 1]),
                       "empty": b""}[damage])
    assert parse_cache.cached("p", b"text", parse) == ["x" * 100, 7]
    assert len(calls) == 2
    assert parse_cache.cached("p", b"text", parse) == ["x" * 100, 7] and len(calls) == 2  # rewritten whole


def test_turned_off_or_unwritable_it_only_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parse_cache.ENV, "")
    calls, parse = _counting([1])
    assert parse_cache.cached("p", b"t", parse) == [1] and parse_cache.cached("p", b"t", parse) == [1]
    assert len(calls) == 2
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv(parse_cache.ENV, str(blocked / "parses"))  # a folder inside a file cannot be made
    assert parse_cache.cached("p", b"t", parse) == [1] and len(calls) == 3


def test_values_marshal_cannot_write_are_returned_and_not_kept(cache: Path) -> None:
    calls, parse = _counting({"when": datetime.date(2024, 1, 1)})
    assert parse_cache.cached("p", b"t", parse) == {"when": datetime.date(2024, 1, 1)}
    assert parse_cache.cached("p", b"t", parse) == {"when": datetime.date(2024, 1, 1)}
    assert len(calls) == 2 and not list(cache.glob("*.marshal"))


def test_only_the_newest_entries_stay(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parse_cache, "KEEP", 3)
    for index in range(5):  # entry i written at second i (a file system's clock may not tell them apart)
        parse_cache.cached("p", str(index).encode(), lambda index=index: index)
        written = cache / f"{parse_cache.entry_key('p', str(index).encode())}.marshal"
        os.utime(written, ns=(index * 10**9, index * 10**9))
    assert len(list(cache.glob("*.marshal"))) == 3
    calls, parse = _counting(-1)
    assert parse_cache.cached("p", b"4", parse) == 4 and not calls  # the newest is still there
    assert parse_cache.cached("p", b"0", parse) == -1 and calls  # the oldest was dropped


def test_dvc_lock_through_the_cache_is_dvcs_own_parse(cache: Path) -> None:
    """The project's dvc.lock: DVC's strictyaml.load (parse and lock-schema check) cold, then from the cache
    without calling it, equal data and text both times."""
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA
    from dvc.utils import strictyaml

    path = str(REPO / "dvc.lock")
    calls: list[int] = []

    def load() -> tuple[object, str]:
        calls.append(1)
        return strictyaml.load(path, COMPILED_LOCKFILE_SCHEMA)

    expected = strictyaml.load(path, COMPILED_LOCKFILE_SCHEMA)
    assert _lock_file_parse(path, "utf-8", load) == expected
    assert _lock_file_parse(path, "utf-8", load) == expected
    assert len(calls) == 1


def test_stale_lock_entries_from_a_cached_parse(cache: Path, tmp_path: Path) -> None:
    lock = tmp_path / "dvc.lock"
    lock.write_text("schema: '2.0'\nstages:\n  kept:\n    cmd: a\n  gone@x:\n    cmd: b\n")
    assert stale_lock_entries({"kept"}, lock) == ["gone@x"]
    assert stale_lock_entries({"kept"}, lock) == ["gone@x"]  # the cached stage names
    lock.write_text("schema: '2.0'\nstages:\n  kept:\n    cmd: a\n")
    assert stale_lock_entries({"kept"}, lock) == []
