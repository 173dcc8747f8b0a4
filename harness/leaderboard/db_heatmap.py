"""Queries across boards, over db's `board_rows` view: the heatmap's cells and each backbone's coverage.

Kept apart from `db` (loading, boards, summaries) only to keep modules small; the same rules hold:
SQL does the grouping and ordering, results come back as plain dicts in a fixed order.
"""

from __future__ import annotations

from typing import Any

import duckdb

from harness.leaderboard.db import fetch

# The heatmap's columns: boards with at least one ranked pretrained row. A board of controls alone has
# no pretrained scale to place anything on.
_COLUMNS_CTE = "SELECT DISTINCT comparability_key FROM board_rows WHERE ranked_count > 0"

# One cell per (board, backbone name): the backbone's best-placed run there. Two grids can run the same
# backbone on the same board; picking one (best normalised rank, then run id) keeps a cell one number.
_CELLS_CTE = """
SELECT comparability_key, backbone_name, control, run_id, rank, headline_value, normalised_rank
FROM (
    SELECT *, row_number() OVER (PARTITION BY comparability_key, backbone_name
                                 ORDER BY normalised_rank, run_id) AS nth
    FROM board_rows
    WHERE ranked_count > 0 AND normalised_rank IS NOT NULL
)
WHERE nth = 1
"""


def board_cells(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every (board, backbone) cell of the heatmap, with its run, rank, headline and normalised rank."""
    return fetch(con, f"{_CELLS_CTE} ORDER BY comparability_key, backbone_name")


def backbone_coverage(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per backbone name: its normalised ranks on the heatmap's boards and the boards it has no cell on.

    The mean is left to the caller (math.fsum over `ranks`) so it is exact whatever the engine's
    summation order; a backbone with any `missing` board gets no aggregate at all.
    """
    rows = fetch(con, f"""
        WITH columns AS ({_COLUMNS_CTE}),
        cells AS ({_CELLS_CTE}),
        -- few-shot runs are on no board: a backbone with nothing else has no row to show
        names AS (SELECT backbone_name, bool_or(control) AS control FROM records WHERE k_shot IS NULL
                  GROUP BY backbone_name)
        SELECT n.backbone_name, n.control,
               list(c.normalised_rank ORDER BY col.comparability_key)
                   FILTER (WHERE c.comparability_key IS NOT NULL) AS ranks,
               list(col.comparability_key ORDER BY col.comparability_key)
                   FILTER (WHERE c.comparability_key IS NULL) AS missing
        FROM names n
        LEFT JOIN columns col ON TRUE
        LEFT JOIN cells c ON c.backbone_name = n.backbone_name AND c.comparability_key = col.comparability_key
        GROUP BY n.backbone_name, n.control
        ORDER BY n.backbone_name
    """)
    for row in rows:
        row["ranks"] = row["ranks"] or []  # a list aggregate over no rows is NULL
        row["missing"] = row["missing"] or []
    return rows
