"""Whether a run reproduced the record already in the checkout: then the stage keeps that record, its per-sample
file and its head, byte for byte, so re-running a committed corpus (on another CPU, after a change that moves no
number) leaves the checkout clean.

The rule: the committed record is ok and came from committed code (a record whose environment says `git_dirty` names
a commit whose code did not produce it, so a run from committed code always replaces it), and the new run agrees
with it on everything that identifies the measurement (backbone identity, dataset identity and split, protocol and
its parameters, pooling, layers, precision, seed, headline, metric names and directions), on every metric within the
tolerance the protocol declares for it (`ProbeSpec.tolerance`: 0, i.e. the same float, unless the probe declares
otherwise), and on the per-sample file: the same sample ids in the same order, the same columns, each score column
within its metric's tolerance and every auxiliary column (labels, predictions, counts) exactly. Not compared: how
long the run took, how fast its extraction forward ran (a record without that speed is replaced by a run that
timed it), the environment that ran it (CPU, versions, git commit) and the trained head's bytes, which last-bit
drift may change while every number stays within tolerance.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from harness.core.hashing import sha256_file
from harness.runs.records import Record, RecordError, parse_record
from harness.runs.samples import SamplesError, parse_samples

# what a run does not have to repeat to reproduce a record
_NOT_COMPARED = {"duration_s", "environment", "samples", "metrics", "throughput"}


def reproduces(new: Record, samples_text: str | None, record_path: Path, samples_path: Path) -> bool:
    """True when `new` (and its per-sample text) reproduces the ok record at `record_path` (see the module)."""
    if new.status != "ok" or not record_path.is_file():
        return False
    try:
        old = parse_record(record_path.read_text(encoding="utf-8"), str(record_path))
    except (RecordError, OSError):
        return False
    if old.status != "ok" or old.environment.git_dirty:
        return False
    if old.throughput is None and new.throughput is not None:  # a run that timed what the record lacks fills it in
        return False
    if old.model_dump(exclude=_NOT_COMPARED) != new.model_dump(exclude=_NOT_COMPARED):
        return False
    if old.metrics.keys() != new.metrics.keys() or not all(
            _within(old.metrics[name], new.metrics[name], new.tolerances.get(name, 0.0)) for name in new.metrics):
        return False
    return _same_samples(old, new, samples_text, samples_path)


def same_head(head_path: Path, head_bytes: bytes | None) -> bool:
    """Whether the head file on disk may stand for the new run's head: both absent, or both safetensors files of
    the same length whose headers (tensor names, dtypes, shapes, offsets and the head's identity) are equal. The
    record names no hash of its head (its tensors may drift in the last bit), so this is what catches a head
    truncated, replaced or edited by hand."""
    if head_bytes is None or not head_path.is_file():
        return head_bytes is None and not head_path.is_file()
    try:
        kept = head_path.read_bytes()
    except OSError:
        return False
    header = _safetensors_header(head_bytes)
    return header is not None and len(kept) == len(head_bytes) and _safetensors_header(kept) == header


def _safetensors_header(data: bytes) -> dict | None:
    """The JSON header of safetensors bytes (an 8-byte little-endian length, then that much JSON), or None."""
    if len(data) < 8:
        return None
    size = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8:8 + size])
    except (ValueError, UnicodeDecodeError):
        return None
    return header if isinstance(header, dict) and 8 + size <= len(data) else None


def _within(a: float, b: float, tolerance: float) -> bool:
    return a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= tolerance)


def _same_samples(old: Record, new: Record, samples_text: str | None, samples_path: Path) -> bool:
    if old.samples is None or new.samples is None or samples_text is None:
        return old.samples is None and new.samples is None
    if (old.samples.unit, old.samples.count, old.samples.columns, old.samples.auxiliary, old.samples.statistics) != (
            new.samples.unit, new.samples.count, new.samples.columns, new.samples.auxiliary, new.samples.statistics):
        return False
    try:
        # the file on disk must still be the one the record describes: a samples file edited (or rotted) since it
        # was written is rewritten, never kept and locked by DVC under a record whose hash it no longer has
        if sha256_file(samples_path) != old.samples.sha256:
            return False
        if old.samples.sha256 == new.samples.sha256:
            return True
        old_ids, old_columns = parse_samples(samples_path.read_text(encoding="utf-8"))
    except (OSError, SamplesError, ValueError, IndexError):
        return False
    new_ids, new_columns = parse_samples(samples_text)
    if old_ids != new_ids or old_columns.keys() != new_columns.keys():
        return False
    for name, column in new_columns.items():
        tolerance = new.tolerances.get(name, 0.0) if name in new.samples.columns else 0.0
        if not np.all(np.abs(column - old_columns[name]) <= tolerance):
            return False
    return True
