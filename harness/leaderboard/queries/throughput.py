"""The extraction speeds the corpus's records measured (`Record.throughput`), one row per ok run that carries one."""

from __future__ import annotations

import duckdb

from harness.leaderboard.queries.db import fetch


def measured_rates(con: duckdb.DuckDBPyConnection) -> list[dict]:
    """(backbone_name, device, images_per_s) of every ok board or few-shot run with a timed extraction, and of the
    seed replicates (their features are the same extraction's), in a fixed order."""
    return fetch(con, """
        SELECT backbone_name, throughput_device AS device, images_per_s FROM (
            SELECT backbone_name, throughput_device, images_per_s, run_id, status FROM records
            UNION ALL
            SELECT backbone_name, throughput_device, images_per_s, run_id, status FROM replicates)
        WHERE status = 'ok' AND images_per_s IS NOT NULL
        ORDER BY backbone_name, throughput_device, run_id""")
