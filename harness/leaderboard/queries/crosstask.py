"""Queries across boards, over db's `board_rows` view: the cross-task table's cells and each row's coverage.

A row of the cross-task table is what a board row is: a backbone with a layer set (see `comparability`).
Kept apart from `db` (loading, boards, summaries) only to keep modules small; the same rules hold: SQL
does the grouping and ordering, results come back as plain dicts in a fixed order.
"""

from __future__ import annotations

from typing import Any

import duckdb

from harness.leaderboard.queries.db import fetch

# Protocol families that diagnose features rather than measure a task (neighbourhood overlap of classes or of a
# continuous target, a sweep of heads over one task's data): their boards are on their task pages but in no
# cross-task column, or the datasets they re-read would weigh several times in a row's mean.
DIAGNOSTIC_FAMILIES = ("knn-class-overlap", "knn-target-overlap", "head-family-sweep")
_TASK_BOARDS = ("comparability_key NOT IN (SELECT comparability_key FROM records WHERE split_part(protocol, '/', 1) "
                f"IN ({', '.join(repr(f) for f in DIAGNOSTIC_FAMILIES)}))")

# The table's columns: boards of tasks with at least one ranked pretrained row. A board of controls alone, or one
# where no pretrained row beats its floor (chance or an image-blind baseline, db's `gated`), has no pretrained
# scale to place anything on.
_COLUMNS_CTE = f"SELECT DISTINCT comparability_key FROM board_rows WHERE ranked_count > 0 AND {_TASK_BOARDS}"

# One cell per (board, backbone, layer set): that row's best-placed run there. Two grids can run the same
# backbone with the same layers on the same board; picking one (best normalised rank, then run id) keeps
# a cell one number.
CELLS_CTE = f"""
SELECT comparability_key, backbone_name, layers, control, baseline, gated, run_id, rank, ranked_count,
       headline_value, normalised_rank
FROM (
    SELECT *, row_number() OVER (PARTITION BY comparability_key, backbone_name, layers
                                 ORDER BY normalised_rank, run_id) AS nth
    FROM board_rows
    WHERE ranked_count > 0 AND normalised_rank IS NOT NULL AND {_TASK_BOARDS}
)
WHERE nth = 1
"""

# Every (backbone, layer set) a full-split run was recorded with, labelled by its layer set only where the
# backbone has more than one, as board rows are.
ROWS_CTE = """
SELECT backbone_name, layers, bool_or(control) AS control,
       bool_or(coalesce(weights_kind = 'fixed-filter', false)) AS baseline,
       CASE WHEN count(*) OVER (PARTITION BY backbone_name) > 1
            THEN backbone_name || ' · ' || layer_set(layers) ELSE backbone_name END AS row_label
FROM records WHERE k_shot IS NULL
GROUP BY backbone_name, layers
"""


def column_keys(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The cross-task table's boards (comparability keys, in key order): the one place that says which boards are
    columns, so the table's cells, its rows' coverage and the site's column list agree."""
    return [row["comparability_key"] for row in fetch(con, f"{_COLUMNS_CTE} ORDER BY comparability_key")]


def board_cells(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every (board, backbone, layer set) cell, with its run, rank, headline and normalised rank."""
    return fetch(con, f"{CELLS_CTE} ORDER BY comparability_key, backbone_name, layer_order(layers) NULLS FIRST")


def row_coverage(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per (backbone, layer set): its label, normalised ranks on the table's boards and the boards it has no
    cell on (comparability keys, in key order).

    The mean is left to the caller (math.fsum over `ranks`) so it is exact whatever the engine's
    summation order; a row with any `missing` board gets no aggregate at all.
    """
    rows = fetch(con, f"""
        WITH columns AS ({_COLUMNS_CTE}),
        cells AS ({CELLS_CTE}),
        -- few-shot runs are on no board: a backbone with nothing else has no row to show
        names AS ({ROWS_CTE})
        SELECT n.backbone_name, n.layers, n.row_label, n.control, n.baseline,
               list(c.normalised_rank ORDER BY col.comparability_key)
                   FILTER (WHERE c.comparability_key IS NOT NULL) AS ranks,
               list(col.comparability_key ORDER BY col.comparability_key)
                   FILTER (WHERE c.comparability_key IS NULL) AS missing
        FROM names n
        LEFT JOIN columns col ON TRUE
        LEFT JOIN cells c ON c.backbone_name = n.backbone_name AND c.layers = n.layers
                         AND c.comparability_key = col.comparability_key
        GROUP BY n.backbone_name, n.layers, n.row_label, n.control, n.baseline
        ORDER BY n.backbone_name, layer_order(n.layers) NULLS FIRST
    """)
    for row in rows:
        row["ranks"] = row["ranks"] or []  # a list aggregate over no rows is NULL
        row["missing"] = row["missing"] or []
    return rows
