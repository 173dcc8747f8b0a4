"""The extraction speeds the corpus's records measured (`Record.throughput`), one row per timed extraction."""

from __future__ import annotations

import duckdb

from harness.leaderboard.queries.db import fetch


def measured_rates(con: duckdb.DuckDBPyConnection) -> list[dict]:
    """(backbone_name, device, images_per_s) of each extraction the ok runs timed (board and few-shot runs and seed
    replicates), once: every record that reads one features folder carries that folder's one timing, so a backbone
    whose features twenty tasks read counts once, not twenty times. In a fixed order."""
    return fetch(con, """
        SELECT DISTINCT backbone_name, throughput_device AS device, images_per_s FROM (
            SELECT backbone_name, throughput_device, images_per_s, run_id, status FROM records
            UNION ALL
            SELECT backbone_name, throughput_device, images_per_s, run_id, status FROM replicates)
        WHERE status = 'ok' AND images_per_s IS NOT NULL
        ORDER BY backbone_name, device, images_per_s""")
