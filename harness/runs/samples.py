"""Per-sample scores beside each record: the rows whose mean is a record's metric.

Statistics on the site (bootstrap intervals, paired tests between backbones) resample these rows, so
they are written deterministically (sorted columns, shortest round-trip float text) as CSV that DuckDB
reads directly, and the record carries the file's SHA-256 so a swapped file is caught.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from harness.core.atomic import write_text_atomic
from harness.core.hashing import sha256_bytes, sha256_file
from harness.runs.records import SamplesInfo


class SamplesError(ValueError):
    pass


def samples_csv(sample_ids: Sequence[str], columns: Mapping[str, np.ndarray]) -> str:
    names = sorted(columns)
    for name in names:
        if len(columns[name]) != len(sample_ids):
            raise SamplesError(f"column {name!r} has {len(columns[name])} rows for {len(sample_ids)} samples")
    if len(set(sample_ids)) != len(sample_ids):
        raise SamplesError("sample ids must be unique")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["sample_id", *names])
    for row, sample_id in enumerate(sample_ids):
        writer.writerow([sample_id, *(repr(float(columns[name][row])) for name in names)])
    return buffer.getvalue()


def samples_file(
    path: Path, sample_ids: Sequence[str], columns: Mapping[str, np.ndarray], unit: str,
    auxiliary: Mapping[str, np.ndarray] | None = None, statistics: Mapping[str, str] | None = None,
) -> tuple[str, SamplesInfo]:
    """The file's text and the record's description of it, before anything is written: a stage writes its
    outputs only once every run in it has succeeded. `auxiliary` columns (not scores: what `statistics`, metric
    → `harness.probes.resampled` name, are recomputed from) go in the same file, named in the record apart."""
    auxiliary = dict(auxiliary or {})
    text = samples_csv(sample_ids, {**columns, **auxiliary})
    return text, SamplesInfo(path=str(path), sha256=sha256_bytes(text.encode()), count=len(sample_ids), unit=unit,
                             columns=sorted(columns), auxiliary=sorted(auxiliary), statistics=dict(statistics or {}))


def write_samples(
    path: Path, sample_ids: Sequence[str], columns: Mapping[str, np.ndarray], unit: str
) -> SamplesInfo:
    text, info = samples_file(path, sample_ids, columns, unit)
    write_text_atomic(path, text)
    return info


def read_samples(info: SamplesInfo, root: Path = Path(".")) -> tuple[list[str], dict[str, np.ndarray]]:
    path = root / info.path
    if sha256_file(path) != info.sha256:
        raise SamplesError(f"{path} does not match the SHA-256 its record carries")
    return parse_samples(path.read_text(encoding="utf-8"))


def parse_samples(text: str) -> tuple[list[str], dict[str, np.ndarray]]:
    """A samples file's text (`samples_csv`) as its ids and columns."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    header, body = rows[0], rows[1:]
    ids = [row[0] for row in body]
    columns = {name: np.array([float(row[i]) for row in body]) for i, name in enumerate(header) if i > 0}
    return ids, columns
