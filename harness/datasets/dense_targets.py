"""Shared conventions for dense targets of datasets that live in an external folder.

Target convention (every dense kind: `bsds500`, `nyuv2_folder`, `taskonomy`, `voc2012`, and
`procedural_scenes`): `manifest.extra["targets"][item.path][target_name]` is

    {"path": <relative path>, "sha256": <of the file's bytes>, "base": "prepared" | "root"}

- `base: "prepared"`: `path` is relative to the *prepared folder*, the folder that holds
  `manifest.json` (the `out_dir` that `prepare_dataset` wrote; `paths.dataset_dir(name)` in stages).
  Targets converted from the raw annotations (depth in metres, unit normals, edge maps) live there.
- `base: "root"` (also the meaning when `base` is absent, as in `procedural_scenes`, whose root *is* the
  prepared folder): `path` is relative to `manifest.root`; for targets used as distributed, unconverted
  (VOC's palette PNGs).

Neither folder's location enters the identity: only the relative paths and the hashes do, so moving
either folder keeps the identity and changing one target pixel changes it. Use `target_file` to find
a target on disk.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
from PIL import Image

from harness.datasets.files import write_bytes
from harness.datasets.manifest import Item, Manifest

PREPARED, ROOT = "prepared", "root"


def target_file(manifest: Manifest, item: Item | str, name: str, prepared_dir: str | Path) -> Path:
    """Where target `name` of `item` is, given the folder that holds the manifest."""
    key = item if isinstance(item, str) else item.path
    entry = manifest.extra["targets"][key][name]
    base = Path(prepared_dir) if entry.get("base", ROOT) == PREPARED else Path(manifest.root)
    return base / entry["path"]


def save_npy(out_dir: Path, rel: str, array: np.ndarray) -> dict[str, str]:
    """`np.save` into `out_dir / rel` atomically (byte-deterministic); return the target entry."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return {"path": rel, "sha256": write_bytes(Path(out_dir) / rel, buffer.getvalue()), "base": PREPARED}


def natural_key(name: str) -> tuple:
    """Sort key: digit runs compare as integers, the rest as text ("2" < "10"; "point_2" < "point_10")."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part)


def first_n(ids: list[str], limit: int | None) -> list[str]:
    ids = sorted(ids, key=natural_key)
    return ids if limit is None else ids[: int(limit)]


def read_array(path: Path) -> np.ndarray:
    """A PNG's stored values (no mode conversion: 16-bit stays 16-bit, a palette stays indices), or a .npy."""
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    with Image.open(path) as image:
        return np.asarray(image)


def decode_normals(rgb: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """uint8 RGB `n = rgb / 127.5 - 1` → (H, W, 3) float32 unit vectors; 0 where invalid.

    Invalid: pixel (0, 0, 0) (the usual "no normal" fill), a decoded length under 0.5 (not a normal), or
    `valid` False. No axis is flipped: the frame is whatever the dataset encoded.
    """
    if rgb.ndim != 3 or rgb.shape[2] < 3:
        raise ValueError(f"normals must be an RGB image; got shape {rgb.shape}")
    rgb = rgb[..., :3]
    n = rgb.astype(np.float32) / np.float32(127.5) - np.float32(1.0)
    length = np.sqrt(np.sum(n * n, axis=-1))
    ok = (rgb.max(axis=-1) > 0) & (length > 0.5)
    if valid is not None:
        ok &= valid
    out = np.zeros_like(n)
    out[ok] = n[ok] / length[ok][:, None]
    return out
