"""The leaderboard's data for download: the corpus, its metrics and every per-sample score, each as CSV,
Parquet and JSON, written by DuckDB's COPY from the tables `db` and `queries.samples` load, plus the validated
records themselves (corpus.jsonl) and their SHA-256s (SHA256SUMS, `sha256sum -c` format).

They live in docs/downloads/, a folder the site stage owns whole (CSV, Parquet and JSON have no room for
the generated-file header), so the built site serves them and the drift test compares them byte for byte.

Byte-identical on every regeneration, checked in tests/test_leaderboard.py: every query ends in an ORDER BY
over a key; DuckDB writes with one thread (so Parquet row groups and output order cannot depend on the
machine's cores); the large files are compressed by DuckDB itself (gzip with a zero timestamp, Parquet with
zstd), never by the system's zlib. The bytes depend on the DuckDB version, which requirements.lock pins, and
a Parquet footer names it ("created_by").
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import duckdb

from harness.leaderboard.queries.db import fetch
from harness.runs.records import Record, dump_record

DOWNLOADS_DIR = "downloads"  # relative to docs/
SUMS = "SHA256SUMS"

# name → (what one row is, the query). Per-sample scores are long: one row per run, sample and metric.
TABLES = {
    "corpus": ("run (what was run, on what, its headline and its comparability key)",
               "SELECT * FROM records ORDER BY run_id"),
    "metrics": ("metric of a run, with its direction and verify tolerance",
                "SELECT * FROM metrics ORDER BY run_id, metric"),
    # scores only: the auxiliary columns (labels, predictions, BSDS counts) stay in each run's per-sample file,
    # linked from its run page; long, they would be most of the download (99 thresholds × 4 counts per image)
    "samples": ("per-sample score (run, the sample's row in its file, its id, the metric, the value)",
                "SELECT s.run_id, s.row_index, s.sample_id, s.metric, s.value FROM samples s "
                "JOIN sample_columns c ON c.run_id = s.run_id AND c.metric = s.metric WHERE NOT c.auxiliary "
                "ORDER BY s.run_id, s.metric, s.row_index"),
}
# (format, file suffix, COPY options); gzip where a table is large enough to matter in git.
FORMATS = {
    "corpus": [("CSV", ".csv", "FORMAT csv, HEADER"), ("Parquet", ".parquet", "FORMAT parquet, COMPRESSION zstd"),
               ("JSON", ".json", "FORMAT json, ARRAY true")],
    "metrics": [("CSV", ".csv", "FORMAT csv, HEADER"), ("Parquet", ".parquet", "FORMAT parquet, COMPRESSION zstd"),
                ("JSON", ".json", "FORMAT json, ARRAY true")],
    "samples": [("CSV, gzip", ".csv.gz", "FORMAT csv, HEADER, COMPRESSION gzip"),
                ("Parquet", ".parquet", "FORMAT parquet, COMPRESSION zstd"),
                ("JSON, gzip", ".json.gz", "FORMAT json, ARRAY true, COMPRESSION gzip")],
}
RECORDS_FILE = "corpus.jsonl"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sums_text(files: dict[str, bytes]) -> str:
    """SHA256SUMS in `sha256sum` format, by file name."""
    return "".join(f"{sha256(data)}  {name}\n" for name, data in sorted(files.items()))


def parse_sums(text: str) -> dict[str, str]:
    """{file name: SHA-256} from a SHA256SUMS text."""
    sums = {}
    for line in text.splitlines():
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name:
            raise ValueError(f"not a SHA256SUMS line: {line!r}")
        sums[name] = digest
    return sums


def download_files(con: duckdb.DuckDBPyConnection, records: list[Record]) -> dict[str, bytes]:
    """{file name: bytes} of every download, SHA256SUMS included; `con` holds the corpus and samples tables."""
    files = {RECORDS_FILE: "".join(dump_record(r) + "\n" for r in sorted(records, key=lambda r: r.run_id)).encode()}
    (threads,) = con.execute("SELECT current_setting('threads')").fetchone()
    con.execute("SET threads = 1")
    try:
        with tempfile.TemporaryDirectory(prefix="visbench-downloads-") as scratch:
            for table, (_, query) in TABLES.items():
                for _, suffix, options in FORMATS[table]:
                    target = Path(scratch) / f"{table}{suffix}"
                    con.execute(f"COPY ({query}) TO '{_sql_string(target)}' ({options})")
                    files[target.name] = target.read_bytes()
    finally:
        con.execute(f"SET threads = {int(threads)}")
    return {**files, SUMS: sums_text(files).encode()}


def table_facts(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, object]]:
    """Per table: rows and columns (name and DuckDB type), for the downloads page."""
    facts = {}
    for table, (_, query) in TABLES.items():
        columns = fetch(con, f"DESCRIBE {query}")
        (rows,) = con.execute(f"SELECT count(*) FROM ({query})").fetchone()
        facts[table] = {"rows": rows, "columns": [(c["column_name"], c["column_type"]) for c in columns]}
    return facts


def _sql_string(path: Path) -> str:
    return str(path).replace("'", "''")
