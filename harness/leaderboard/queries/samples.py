"""The per-sample score files as DuckDB tables, read by DuckDB's CSV reader, and the SQL over them.

`load_samples_table` checks each file's SHA-256 against its record (in Python, before DuckDB sees the
file), then loads the files into tables beside `db`'s corpus tables:

- `sample_files`: one row per run with per-sample scores: run_id, path (as read), unit;
- `sample_columns`: one row per (run, per-sample column): the metric named by the file's header, the
  positional field (`c1`, `c2`, …) DuckDB reads that column as, and whether the column is auxiliary (not a
  score: rows a resampled statistic is computed from, which average to nothing);
- `samples`: the long table, one row per (run, sample, metric): run_id, row_index (the sample's 0-based
  row in its file), sample_id, metric, value.

Columns are read positionally with declared types (sample_id VARCHAR, every metric DOUBLE) and a fixed
dialect, so nothing is sniffed: an id such as "a,b" or "" stays a string, and an empty or malformed score
is an error rather than a NULL. `harness.runs.samples` writes every score as Python's shortest round-trip
repr, which DuckDB's DOUBLE parser reads back to the same bits.

Row order matters: a bootstrap interval resamples a run's scores in file order. DuckDB preserves
insertion order through the CSV reader and CREATE TABLE AS (`preserve_insertion_order`, on by default),
so a staging table's rowid is the file's row order; `row_index` records it.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import duckdb

from harness.core.hashing import sha256_bytes
from harness.runs.records import Record
from harness.runs.samples import SamplesError

# |mean of a per-sample column - the record's metric| above this (times the metric's magnitude, for
# metrics above 1) means the file is not the run's.
MEAN_TOLERANCE = 1e-12

_SCHEMA = """
CREATE OR REPLACE TABLE sample_files (
    run_id VARCHAR PRIMARY KEY,
    path VARCHAR NOT NULL,
    unit VARCHAR NOT NULL
);
CREATE OR REPLACE TABLE sample_columns (
    run_id VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    field VARCHAR NOT NULL,
    auxiliary BOOLEAN NOT NULL,
    PRIMARY KEY (run_id, metric)
);
CREATE OR REPLACE TABLE samples (
    run_id VARCHAR NOT NULL,
    row_index BIGINT NOT NULL,
    sample_id VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    value DOUBLE NOT NULL
);
"""

# The dialect `harness.runs.samples.samples_csv` writes (Python's csv module, "\n" line ends), spelled out:
# no sniffing, a wrong number of fields is an error, and no value is read as NULL.
_READ_CSV = """
CREATE OR REPLACE TEMP TABLE sample_rows AS
SELECT * FROM read_csv(
    $paths, columns = $columns, header = true, auto_detect = false, delim = ',', quote = '"', escape = '"',
    new_line = '\\n', strict_mode = true, null_padding = false, ignore_errors = false,
    force_not_null = $fields, filename = true
)
"""

# Wide rows to long, each file's rows numbered in file order, fields mapped back to metric names.
_INSERT_LONG = """
INSERT INTO samples
WITH numbered AS (
    SELECT filename, rowid - min(rowid) OVER (PARTITION BY filename) AS row_index, sample_id, {fields}
    FROM sample_rows
)
SELECT f.run_id, u.row_index, u.sample_id, c.metric, u.value
FROM numbered UNPIVOT INCLUDE NULLS (value FOR field IN ({fields})) u
JOIN sample_files f ON f.path = u.filename
JOIN sample_columns c ON c.run_id = f.run_id AND c.field = u.field
"""

# Every per-sample column against the metric its record carries. favg (Kahan summation) rather than
# avg: the plain sum drifts by ~1e-13 over a few thousand pixel errors, too close to the tolerance.
_MEAN_MISMATCHES = """
WITH means AS (SELECT run_id, metric, favg(value) AS mean FROM samples GROUP BY run_id, metric)
SELECT c.run_id, c.metric, f.path, m.value AS recorded, means.mean
FROM sample_columns c
JOIN sample_files f USING (run_id)
LEFT JOIN means USING (run_id, metric)
LEFT JOIN (SELECT * FROM metrics UNION ALL SELECT * FROM replicate_metrics) m USING (run_id, metric)
WHERE NOT c.auxiliary AND (m.value IS NULL OR means.mean IS NULL
   OR NOT abs(means.mean - m.value) <= $tolerance * greatest(1.0, abs(m.value)))
ORDER BY c.run_id, c.metric
"""

# Per run and column: sample ids and values in file order, and whether the column is auxiliary. A run whose
# file has no columns comes back once, with metric NULL.
_RUN_COLUMNS = """
WITH columns AS (
    SELECT run_id, metric,
           list(sample_id ORDER BY row_index) AS ids, list(value ORDER BY row_index) AS scores
    FROM samples GROUP BY run_id, metric
)
SELECT f.run_id, f.unit, c.metric, c.ids, c.scores, coalesce(k.auxiliary, false) AS auxiliary
FROM sample_files f LEFT JOIN columns c USING (run_id)
LEFT JOIN sample_columns k ON k.run_id = f.run_id AND k.metric = c.metric
ORDER BY f.run_id, c.metric
"""


def load_samples_table(con: duckdb.DuckDBPyConnection, records: list[Record], root: Path) -> None:
    """Load the per-sample files of `records` (those with `samples`) into `con`, which holds `db`'s
    corpus tables; SamplesError for a missing, swapped or malformed file, or a column that does not
    average to its record's metric.

    Paths are relative to `root`. Loading again replaces the tables.
    """
    con.execute(_SCHEMA)
    files, columns, by_width = [], [], {}
    for record in sorted((r for r in records if r.samples is not None), key=lambda r: r.run_id):
        path, header = _checked_header(record, Path(root))
        files.append((record.run_id, str(path), record.samples.unit))
        auxiliary = set(record.samples.auxiliary)
        columns.extend((record.run_id, metric, f"c{i}", metric in auxiliary)
                       for i, metric in enumerate(header, start=1))
        if header:
            by_width.setdefault(len(header), {})[str(path)] = None  # two records may share a file
    _insert(con, "sample_files", files)
    _insert(con, "sample_columns", columns)
    for width, paths in sorted(by_width.items()):
        fields = [f"c{i}" for i in range(1, width + 1)]
        try:
            con.execute(_READ_CSV, {
                "paths": list(paths), "fields": ["sample_id", *fields],
                "columns": {"sample_id": "VARCHAR", **dict.fromkeys(fields, "DOUBLE")},
            })
        except duckdb.Error as error:  # DuckDB's message names the file, line and field (c1, c2, …)
            where = next(iter(paths)) if len(paths) == 1 else f"one of {len(paths)} files"
            raise SamplesError(f"cannot read per-sample scores ({where}): {error}") from None
        con.execute(_INSERT_LONG.format(fields=", ".join(fields)))
        con.execute("DROP TABLE sample_rows")
    check_sample_means(con)


def _checked_header(record: Record, root: Path) -> tuple[Path, list[str]]:
    """The file's path, after its SHA-256 is checked, and the metric names its header lists."""
    info = record.samples
    assert info is not None
    path = root / info.path
    if not path.is_file():
        raise SamplesError(f"{path}: the per-sample scores of {record.run_id} are missing; "
                           "the site needs them beside the corpus")
    data = path.read_bytes()
    if sha256_bytes(data) != info.sha256:
        raise SamplesError(f"{path} does not match the SHA-256 its record carries")
    if any(char in str(path) for char in "*?["):
        raise SamplesError(f"{path}: DuckDB would read this path as a glob pattern; rename the file")
    try:
        header = next(csv.reader(io.StringIO(data.decode("utf-8"), newline="")), [])
    except (UnicodeDecodeError, csv.Error) as error:
        raise SamplesError(f"{path}: not a per-sample CSV file ({error})") from None
    if header[:1] != ["sample_id"] or len(set(header)) != len(header) or "" in header:
        raise SamplesError(f"{path}: the header must be sample_id and distinct, non-empty column names, "
                           f"not {header!r}")
    return path, header[1:]


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple[Any, ...]]) -> None:
    if rows:
        columns = [list(column) for column in zip(*rows, strict=True)]
        unnested = ", ".join("unnest(?::VARCHAR[])" for _ in columns)
        con.execute(f"INSERT INTO {table} SELECT {unnested}", columns)


def check_sample_means(con: duckdb.DuckDBPyConnection, tolerance: float = MEAN_TOLERANCE) -> None:
    """SamplesError listing every per-sample column whose mean is not its record's metric."""
    mismatches = con.execute(_MEAN_MISMATCHES, {"tolerance": tolerance}).fetchall()
    if mismatches:
        raise SamplesError("; ".join(
            f"{path}: column {metric!r} does not average to the metric {run_id} records ({recorded!r}; "
            f"its mean is {mean!r})"
            for run_id, metric, path, recorded, mean in mismatches
        ))


def run_columns(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per loaded run and per-sample column, by run id then metric: run_id, unit, metric (None for a
    file without columns), ids and scores (lists, in the file's row order), auxiliary (not a score)."""
    result = con.execute(_RUN_COLUMNS)
    names = [d[0] for d in result.description]
    return [dict(zip(names, row, strict=True)) for row in result.fetchall()]
