"""The feature cache: exact round trips, self-verifying entries, and keys that change with every input."""

from __future__ import annotations

import hashlib
import io
import logging

import numpy as np
import pytest

from harness.runs.feature_cache import STORED_DTYPE, FeatureCache, feature_key

KEY = feature_key("ab" * 32, "0123456789abcdef", {"crop": 224}, [11], "avg", "pooled")


def _array(seed: int = 0, shape=(8, 3, 3)) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _entry_bytes(array: np.ndarray) -> bytes:
    """The documented format, built independently: `.npy` bytes then their 32-byte SHA-256."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array, dtype=np.float32), allow_pickle=False)
    payload = buffer.getvalue()
    return payload + hashlib.sha256(payload).digest()


def test_put_get_round_trip_is_exact(tmp_path):
    cache = FeatureCache(tmp_path)
    array = _array()
    cache.put(KEY, array)
    assert KEY in cache
    got = cache.get(KEY)
    assert got is not None and got.dtype == np.float32 and got.shape == array.shape
    np.testing.assert_array_equal(got, array)
    assert (cache.hits, cache.misses, cache.corrupt) == (1, 0, 0)


def test_put_stores_float32_and_overwrites(tmp_path):
    cache = FeatureCache(tmp_path)
    wide = np.linspace(0, 1, 7, dtype=np.float64)
    cache.put(KEY, wide)
    got = cache.get(KEY)
    assert got.dtype == np.dtype(STORED_DTYPE)
    np.testing.assert_array_equal(got, wide.astype(np.float32))
    cache.put(KEY, _array(1))
    np.testing.assert_array_equal(cache.get(KEY), _array(1))
    # non-contiguous input is stored by value
    strided = _array(2, (4, 6))[:, ::2]
    cache.put(KEY, strided)
    np.testing.assert_array_equal(cache.get(KEY), strided)


def test_put_leaves_no_temporary_files(tmp_path):
    cache = FeatureCache(tmp_path)
    for seed in range(3):
        cache.put(feature_key(str(seed), "b", {}, None, "avg", "pooled"), _array(seed))
    files = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert len(files) == 3 and all(name.endswith(".npyz") for name in files)


def test_miss_returns_none_and_counts(tmp_path):
    cache = FeatureCache(tmp_path)
    assert KEY not in cache
    assert cache.get(KEY) is None
    assert cache.get(KEY) is None
    assert (cache.hits, cache.misses, cache.corrupt) == (0, 2, 0)


def _corrupt_truncate(blob: bytes) -> bytes:
    return blob[: len(blob) // 2]


def _corrupt_flip_payload(blob: bytes) -> bytes:
    data = bytearray(blob)
    data[len(blob) - 32 - 5] ^= 0x40  # inside the array's data, before the digest
    return bytes(data)


def _corrupt_flip_digest(blob: bytes) -> bytes:
    data = bytearray(blob)
    data[-1] ^= 0x01
    return bytes(data)


def _garbage(blob: bytes) -> bytes:
    return b"this is not a feature file at all" * 5


def _short(blob: bytes) -> bytes:
    return blob[:10]  # shorter than the digest itself


def _empty(blob: bytes) -> bytes:
    return b""


def _valid_checksum_bad_payload(blob: bytes) -> bytes:
    payload = b"\x93NUMPY but not really an array"
    return payload + hashlib.sha256(payload).digest()


@pytest.mark.parametrize(
    "corrupt",
    [_corrupt_truncate, _corrupt_flip_payload, _corrupt_flip_digest, _garbage, _short, _empty,
     _valid_checksum_bad_payload],
)
def test_corrupt_entry_is_a_logged_miss_and_removed(tmp_path, caplog, corrupt):
    cache = FeatureCache(tmp_path)
    cache.put(KEY, _array())
    path = cache.path(KEY)
    path.write_bytes(corrupt(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="harness.runs.feature_cache"):
        assert cache.get(KEY) is None
    assert not path.exists()
    assert KEY not in cache
    assert cache.corrupt == 1 and cache.misses == 1 and cache.hits == 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0].getMessage()
    # the next read is a plain miss, and a fresh put heals the entry
    assert cache.get(KEY) is None and cache.corrupt == 1
    cache.put(KEY, _array())
    np.testing.assert_array_equal(cache.get(KEY), _array())


def test_entry_bytes_are_deterministic(tmp_path):
    a, b = FeatureCache(tmp_path / "a"), FeatureCache(tmp_path / "b")
    array = _array(3)
    a.put(KEY, array)
    b.put(KEY, array.copy())
    a.put("ff" + KEY[2:], array)
    assert a.path(KEY).read_bytes() == b.path(KEY).read_bytes() == a.path("ff" + KEY[2:]).read_bytes()
    assert a.path(KEY).read_bytes() == _entry_bytes(array)


def test_entries_are_sharded_by_key_prefix(tmp_path):
    cache = FeatureCache(tmp_path)
    assert cache.path(KEY) == tmp_path / KEY[:2] / f"{KEY}.npyz"


BASE = {
    "image_sha256": "ab" * 32,
    "backbone_identity": "0123456789abcdef",
    "preprocess": {"library": "pillow", "crop": 224, "resize": 256, "mean": [0.5] * 3, "std": [0.5] * 3},
    "layers": [11],
    "pooling": "avg",
    "feature_mode": "pooled",
}
CHANGES = {
    "image_sha256": "cd" * 32,
    "backbone_identity": "fedcba9876543210",
    "preprocess": {**BASE["preprocess"], "crop": 196},
    "layers": [10, 11],
    "pooling": "cls",
    "feature_mode": "dense",
}


def test_feature_key_is_stable():
    assert feature_key(**BASE) == feature_key(**BASE)
    assert len(feature_key(**BASE)) == 40
    # key order inside the preprocessing spec does not matter (canonical JSON)
    shuffled = dict(reversed(list(BASE["preprocess"].items())))
    assert feature_key(**{**BASE, "preprocess": shuffled}) == feature_key(**BASE)


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_feature_key_changes_with_every_input(field):
    assert feature_key(**{**BASE, field: CHANGES[field]}) != feature_key(**BASE)


def test_dense_key_ignores_pooling():
    """Dense maps do not depend on the pooling, so one dense entry serves every pooling request."""
    dense = {**BASE, "feature_mode": "dense"}
    assert feature_key(**{**dense, "pooling": "cls"}) == feature_key(**{**dense, "pooling": "avg"})
    assert feature_key(**dense) != feature_key(**BASE)


def test_a_corrupt_entry_is_removed_from_dvcs_cache_too_and_a_good_copy_stays(tmp_path, monkeypatch, caplog):
    """DVC trusts its cache: a rotted object would be checked out again on every run, so `get` removes it (and only
    objects that fail the entry's own hash) from the project's .dvc/cache, as DVC's directory listing names it."""
    import json
    import os

    monkeypatch.chdir(tmp_path)
    cache = FeatureCache(tmp_path / "features" / "g" / "b" / "d" / "entries")
    other = feature_key("cd" * 32, "0123456789abcdef", {"crop": 224}, [11], "avg", "pooled")
    cache.put(KEY, _array(0))
    cache.put(other, _array(1))
    md5_dir = tmp_path / ".dvc" / "cache" / "files" / "md5"
    listing = []
    for key in (KEY, other):
        data = cache.path(key).read_bytes()
        md5 = hashlib.md5(data).hexdigest()
        (md5_dir / md5[:2]).mkdir(parents=True, exist_ok=True)
        listing.append({"md5": md5, "relpath": f"entries/{key[:2]}/{key}.npyz", "data": data})
    (md5_dir / "aa").mkdir(exist_ok=True)
    (md5_dir / "aa" / "bbbb.dir").write_text(json.dumps([{k: v for k, v in e.items() if k != "data"} for e in listing]))
    rotted = bytearray(listing[0]["data"])
    rotted[200] ^= 0xFF  # one flipped bit pattern inside the array's bytes
    objects = [md5_dir / e["md5"][:2] / e["md5"][2:] for e in listing]
    objects[0].write_bytes(bytes(rotted))
    objects[1].write_bytes(listing[1]["data"])
    for obj in objects:
        obj.chmod(0o444)  # as DVC leaves them
    stat = cache.path(KEY).stat()
    cache.path(KEY).write_bytes(bytes(rotted))  # the workspace copy DVC checked out of its cache, mtime kept
    os.utime(cache.path(KEY), ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with caplog.at_level(logging.WARNING, logger="harness.runs.feature_cache"):
        assert cache.get(KEY) is None
    assert not cache.path(KEY).exists() and not objects[0].exists()
    assert objects[1].read_bytes() == listing[1]["data"]  # a good object is never touched
    [warning] = [r.getMessage() for r in caplog.records]
    assert "fails its recorded hash" in warning and str(objects[0].relative_to(tmp_path)) in warning
    assert warning.endswith("the next plain run of its extract stage re-extracts it")
    np.testing.assert_array_equal(cache.get(other), _array(1))


def test_verified_removes_a_corrupt_entry_and_prune_keeps_only_what_is_asked_for(tmp_path):
    cache = FeatureCache(tmp_path / "entries")
    other = feature_key("cd" * 32, "0123456789abcdef", {"crop": 224}, [11], "avg", "pooled")
    cache.put(KEY, _array(0))
    cache.put(other, _array(1))
    assert cache.verified(KEY) and not cache.verified("0" * 40)
    blob = bytearray(cache.path(other).read_bytes())
    blob[150] ^= 0x01
    cache.path(other).write_bytes(bytes(blob))
    assert not cache.verified(other) and not cache.path(other).exists() and cache.corrupt == 1
    (cache.root / KEY[:2] / ".tmp-half").write_bytes(b"an interrupted write")
    (cache.root / "zz").mkdir()
    (cache.root / "zz" / "stale.npyz").write_bytes(b"an entry no read asks for")
    assert cache.prune({KEY}) == 2
    assert sorted(p.relative_to(cache.root).as_posix() for p in cache.root.rglob("*")) == [
        KEY[:2], f"{KEY[:2]}/{KEY}.npyz"]


STAGE = """
import sys
import numpy as np
from harness.runs.feature_cache import FeatureCache
cache = FeatureCache("features/entries")
keys = sys.argv[1:]
for n, key in enumerate(keys):
    if not cache.verified(key):  # as the extract stage reuses an entry: only one that passes its hash
        cache.put(key, np.full((4, 4), n, dtype=np.float32))
        print("extracted", key, flush=True)
cache.prune(set(keys))
"""


@pytest.mark.dvc
def test_a_rotted_entry_in_dvcs_cache_heals_with_one_plain_dvc_repro(tmp_path, monkeypatch):
    """Against real DVC: an entry rotted in DVC's cache and in the workspace (the mtime DVC knows kept) is found by
    the reader, removed from both, and the next plain `dvc repro` runs the persisted extract-like stage, which
    computes that entry alone and keeps the others."""
    import os
    import subprocess
    import sys

    keys = [feature_key(f"{n:02d}" * 32, "0123456789abcdef", {"crop": 224}, [11], "avg", "pooled") for n in range(3)]
    (tmp_path / "extract.py").write_text(STAGE)
    (tmp_path / "dvc.yaml").write_text(
        f"stages:\n  extract:\n    cmd: {sys.executable} extract.py {' '.join(keys)}\n"
        "    deps:\n    - extract.py\n    outs:\n    - features:\n        persist: true\n")
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}

    def dvc(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=tmp_path, capture_output=True, text=True,
                              env=env, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    dvc("init", "-q", "--no-scm")
    assert dvc("repro").count("extracted") == 3
    monkeypatch.chdir(tmp_path)
    cache = FeatureCache(tmp_path / "features" / "entries")
    entry = cache.path(keys[1])
    good = entry.read_bytes()
    objects = [p for p in (tmp_path / ".dvc" / "cache" / "files" / "md5").glob("??/*")
               if p.suffix != ".dir" and p.read_bytes() == good]
    assert len(objects) == 1
    rotted = bytearray(good)
    rotted[-40] ^= 0xFF
    for path in (entry, objects[0]):  # the same bit rot in the object DVC checks out and in the workspace copy
        stat = path.stat()
        path.chmod(0o644)
        path.write_bytes(bytes(rotted))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert cache.get(keys[1]) is None  # what the probe stage reads: removed here and from DVC's cache
    assert not entry.exists() and not objects[0].exists()
    out = dvc("repro")
    assert out.count("extracted") == 1 and f"extracted {keys[1]}" in out
    assert entry.read_bytes() == good and objects[0].read_bytes() == good
    again = dvc("repro")
    assert "extracted" not in again and "Running stage" not in again
