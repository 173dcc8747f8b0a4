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
            log.warning("feature cache entry %s is corrupt (%s); recomputing it", path, error)
            path.unlink(missing_ok=True)
            self.corrupt += 1
            self.misses += 1
            return None
        self.hits += 1
        return array

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


# -- the extraction description: what probes read instead of importing any backbone library ----------


def entry_keys(backbone: dict[str, Any], requests: list[dict[str, Any]], item: Item) -> list[str]:
    return [
        feature_key(item.sha256, backbone["identity"], _preprocess_for(backbone["preprocess"], r.get("fit", "crop")),
                    r["layers_resolved"], r["pooling_resolved"], r["mode"])
        for r in requests
    ]


def _preprocess_for(preprocess: dict[str, Any], fit: str) -> dict[str, Any]:
    return preprocess if fit == "crop" else {**preprocess, "fit": fit}


def write_extraction(out_dir: Path, description: dict[str, Any]) -> None:
    write_text_atomic(out_dir / EXTRACTION_FILE, json.dumps(json.loads(canonical_json(description)), indent=1))


def read_extraction(out_dir: Path) -> dict[str, Any]:
    return json.loads((out_dir / EXTRACTION_FILE).read_text())


def write_cache_stats(out_dir: Path, images: int, cached: int) -> None:
    out_dir = Path(out_dir)
    stats = {"images": images, "cached": cached, "computed": images - cached}
    write_text_atomic(out_dir.with_name(out_dir.name + STATS_SUFFIX), json.dumps(stats, sort_keys=True))
