"""Seed-to-seed spread: a seed sweep's replicates (db's `replicates` table) beside their board rows.

A swept row is a board row (comparability key, backbone, layer set) with runs at more than one probe seed: its
seed-0 run on the board and the sweep's replicates. Its spread is the sample standard deviation of the headline
over those seeds. A board's seed spread is the largest of its swept rows' (the sweep covers a few backbones per
protocol, and the worst one measured stands for the rest); None where no row of the board was swept.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from harness.leaderboard.queries.db import fetch

_SWEPT_SQL = """
WITH runs AS (
    SELECT comparability_key, backbone_name, layers, seed, run_id, headline_value FROM records
    WHERE status = 'ok' AND k_shot IS NULL AND headline_value IS NOT NULL
    UNION ALL
    SELECT comparability_key, backbone_name, layers, seed, run_id, headline_value FROM replicates
    WHERE status = 'ok' AND headline_value IS NOT NULL
)
SELECT comparability_key, backbone_name, layers,
       list(seed ORDER BY seed, run_id) AS seeds,
       list(headline_value ORDER BY seed, run_id) AS values,
       stddev_samp(headline_value) AS sd
FROM runs
GROUP BY comparability_key, backbone_name, layers
HAVING count(DISTINCT seed) > 1
ORDER BY comparability_key, backbone_name, layers
"""


@dataclass(frozen=True)
class SweptRow:
    backbone_name: str
    layers: str
    seeds: list[int]
    values: list[float]
    sd: float


@dataclass(frozen=True)
class SeedSpread:
    """A board's measured seed-to-seed spread: the largest standard deviation among its swept rows."""

    sd: float
    rows: list[SweptRow]


def seed_spreads(con: duckdb.DuckDBPyConnection) -> dict[str, SeedSpread]:
    """comparability key → its board's seed spread, for the boards with at least one swept row."""
    swept: dict[str, list[SweptRow]] = {}
    for row in fetch(con, _SWEPT_SQL):
        swept.setdefault(row["comparability_key"], []).append(
            SweptRow(row["backbone_name"], row["layers"], list(row["seeds"]), list(row["values"]), float(row["sd"])))
    return {key: SeedSpread(max(r.sd for r in rows), rows) for key, rows in swept.items()}
