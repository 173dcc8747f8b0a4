"""Writing prepared dataset files: atomically, with the SHA-256 that goes into the manifest."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from harness.core.hashing import sha256_bytes

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp"}
UNREAD_SUFFIXES = {".gif", ".tif", ".tiff"}  # images an image folder does not read: said, not silently dropped


def write_bytes(path: Path, data: bytes) -> str:
    """Write via a temporary file and a rename (a crash leaves no half file); return the bytes' SHA-256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return sha256_bytes(data)


def write_png(path: Path, array: np.ndarray) -> str:
    """Write a PNG atomically; Pillow's PNG encoder is deterministic, so equal pixels give equal bytes."""
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG", compress_level=6)
    return write_bytes(path, buffer.getvalue())
