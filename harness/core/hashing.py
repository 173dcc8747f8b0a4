"""Content hashes that identities and cache keys are derived from."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

_CHUNK = 1 << 20


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal text, hence equal hashes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_jsonable)


def hash_json(value: Any, length: int = 16) -> str:
    return sha256_bytes(canonical_json(value).encode())[:length]


def hash_state_dict(state: Mapping[str, Any]) -> str:
    """SHA-256 over parameter names, dtypes, shapes and raw bytes, in sorted name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name]
        array = tensor.detach().cpu().contiguous()
        digest.update(name.encode())
        digest.update(str(array.dtype).encode())
        digest.update(str(tuple(array.shape)).encode())
        # bf16 has no numpy dtype: view the storage as raw bytes instead.
        digest.update(array.view(-1).view(dtype=_uint8_dtype()).numpy().tobytes() if array.numel() else b"")
    return digest.hexdigest()


def _uint8_dtype():
    import torch

    return torch.uint8


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"cannot hash value of type {type(value).__name__}: {value!r}")
