"""A content-addressed store of features: one self-verifying file per image × extraction setting.

Key = hash(image bytes' SHA-256, backbone identity, resolved preprocessing, layers, pooling, feature
mode, stored dtype). A file is the `.npy` bytes of the array followed by their 32-byte SHA-256, so a
truncated or flipped file is detected on read: it is reported, removed and treated as a miss, never
returned as a feature. Writes go through a temporary file and a rename, so a crash leaves no half entry.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.atomic import umask_mode, write_text_atomic
from harness.core.hashing import canonical_json, hash_json

if TYPE_CHECKING:
    from harness.datasets.manifest import Item

log = logging.getLogger(__name__)
_DIGEST = 32
STORED_DTYPE = "float32"
EXTRACTION_FILE = "extraction.json"  # beside entries/: the backbone described and the resolved requests
# beside the feature folder, outside the DVC out (so it changes no hash): the last extraction's cache hits,
# which `visbench-harness cache stats` reports
STATS_SUFFIX = ".cache-stats.json"


def feature_key(
    image_sha256: str,
    backbone_identity: str,
    preprocess: dict[str, Any],
    layers: list[int] | None,
    pooling: str,
    feature_mode: str,
) -> str:
    return hash_json(
        {
            "image": image_sha256,
            "backbone": backbone_identity,
            "preprocess": preprocess,
            "layers": layers,
            "pooling": pooling if feature_mode == "pooled" else None,
            "mode": feature_mode,
            "dtype": STORED_DTYPE,
        },
        length=40,
    )


class FeatureCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.hits = 0
        self.misses = 0
        self.corrupt = 0

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.npyz"

    def __contains__(self, key: str) -> bool:
        return self.path(key).is_file()

    def prune(self, keep: set[str]) -> int:
        """Remove every file under the cache's root that is not the entry of a key in `keep` (entries of reads
        no longer asked for, temporaries an interrupted run left), and the folders that empties; returns how
        many files went. A persisted features folder then holds exactly what this extraction wrote or verified."""
        wanted = {self.path(key) for key in keep}
        removed = 0
        if not self.root.is_dir():
            return 0
        for path in sorted(self.root.rglob("*"), reverse=True):
            if path.is_dir():
                if not any(path.iterdir()):
                    path.rmdir()
            elif path not in wanted:
                path.unlink()
                removed += 1
        return removed

    def get(self, key: str) -> np.ndarray | None:
        path = self.path(key)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            self.misses += 1
            return None
        payload, digest = blob[:-_DIGEST], blob[-_DIGEST:]
        try:
            if len(blob) <= _DIGEST or hashlib.sha256(payload).digest() != digest:
                raise ValueError("checksum mismatch")
            array = np.load(io.BytesIO(payload), allow_pickle=False)
        except Exception as error:  # any unreadable entry is a miss, never a crash or a wrong feature
            self._remove_corrupt(key, f"{type(error).__name__}: {error}" if str(error) != "checksum mismatch"
                                 else "it fails its recorded hash")
            self.misses += 1
            return None
        self.hits += 1
        return array

    def verified(self, key: str) -> bool:
        """Whether the entry is here and passes its recorded hash (what extraction asks before it reuses one); a
        corrupt entry is removed and counted, so the caller computes it again."""
        path = self.path(key)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return False
        if entry_intact(blob):
            return True
        self._remove_corrupt(key, "it fails its recorded hash")
        return False

    def _remove_corrupt(self, key: str, why: str) -> None:
        """Remove a corrupt entry, here and from the DVC cache of the project it is in (where the same bad bytes
        would otherwise be checked out again on the next run, and every run fail the same way)."""
        path = self.path(key)
        path.unlink(missing_ok=True)
        purged = purge_dvc_copies(path)
        self.corrupt += 1
        log.warning("feature cache entry %s is corrupt (%s): removed it%s; the next plain run of its extract stage "
                    "re-extracts it", path, why, f" and its copy in DVC's cache ({purged[0]})" if purged else "")

    def put(self, key: str, array: np.ndarray) -> None:
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(array, dtype=STORED_DTYPE), allow_pickle=False)
        payload = buffer.getvalue()
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload + hashlib.sha256(payload).digest())
                os.fchmod(handle.fileno(), umask_mode())  # readable as the user's other files are (not 0600)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def entry_intact(blob: bytes) -> bool:
    """Whether an entry's bytes pass their own recorded hash (the `.npy` bytes, then their SHA-256)."""
    return len(blob) > _DIGEST and hashlib.sha256(blob[:-_DIGEST]).digest() == blob[-_DIGEST:]


def purge_dvc_copies(path: Path) -> list[Path]:
    """Remove the DVC cache objects (`.dvc/cache/files/md5/xx/yyyy` of the project in the working directory) that
    DVC's directory listings name for a feature entry at `path` and whose bytes fail the entry's recorded hash.
    DVC trusts its cache (and a file whose mtime it knows), so a rotted object would be checked out again on
    every run; removed, the next run cannot restore it and re-extracts the entry. Only objects that fail the
    check are removed: a good copy stays. Returns what was removed."""
    md5_dir = _dvc_cache_dir() / "files" / "md5"
    if not md5_dir.is_dir():
        return []
    name = "/" + path.name
    removed = []
    for listing in md5_dir.glob("??/*.dir"):
        try:
            entries = json.loads(listing.read_text())
        except (OSError, ValueError):
            continue
        for entry in entries if isinstance(entries, list) else []:
            relpath, md5 = str(entry.get("relpath", "")), str(entry.get("md5", ""))
            if not ("/" + relpath).endswith(name) or len(md5) < 3:
                continue
            obj = md5_dir / md5[:2] / md5[2:]
            try:
                if obj.is_file() and not entry_intact(obj.read_bytes()):
                    obj.chmod(0o644)  # DVC leaves its objects read-only
                    obj.unlink()
                    removed.append(obj)
            except OSError as error:
                log.warning("could not remove the corrupt DVC cache object %s (%s): remove it by hand", obj, error)
    return removed


def _dvc_cache_dir() -> Path:
    """The project's DVC cache: `cache.dir` of .dvc/config.local or .dvc/config (relative to .dvc/), else
    .dvc/cache."""
    import configparser

    for name in ("config.local", "config"):
        config = configparser.ConfigParser()
        try:
            config.read(Path(".dvc") / name)
        except configparser.Error:
            continue
        if config.has_option("cache", "dir"):
            return Path(".dvc") / config.get("cache", "dir")
    return Path(".dvc") / "cache"


# -- the extraction description: what probes read instead of importing any backbone library ----------


def entry_keys(backbone: dict[str, Any], requests: list[dict[str, Any]], item: Item) -> list[str]:
    return [
        feature_key(item.sha256, backbone["identity"], _preprocess_for(backbone["preprocess"], r.get("fit", "crop")),
                    r["layers_resolved"], r["pooling_resolved"], r["mode"])
        for r in requests
    ]


def _preprocess_for(preprocess: dict[str, Any], fit: str) -> dict[str, Any]:
    # the spec a cache key hashes: the crop fit adds nothing, so crop keys predate `fit` unchanged
    return preprocess if fit == "crop" else {**preprocess, "fit": fit}


def write_extraction(out_dir: Path, description: dict[str, Any]) -> None:
    write_text_atomic(out_dir / EXTRACTION_FILE, json.dumps(json.loads(canonical_json(description)), indent=1))


def read_extraction(out_dir: Path) -> dict[str, Any]:
    return json.loads((out_dir / EXTRACTION_FILE).read_text())


def write_cache_stats(out_dir: Path, images: int, cached: int) -> None:
    out_dir = Path(out_dir)
    stats = {"images": images, "cached": cached, "computed": images - cached}
    write_text_atomic(out_dir.with_name(out_dir.name + STATS_SUFFIX), json.dumps(stats, sort_keys=True))
