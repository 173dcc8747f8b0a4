"""Failed runs and the per-level, per-task and per-backbone summaries, as SQL over `db`'s tables.

Kept apart from `db` (loading, boards) only to keep modules small; the same rules hold: SQL does the
grouping and ordering, results come back as plain dicts in a fixed order.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from harness.leaderboard.queries.db import LEVEL_ORDER, fetch

# -- failures and summaries --------------------------------------------------------------------------


def failed_runs(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    return fetch(con, f"""
        SELECT run_id, backbone_name, task, level, dataset_name, split,
               failure_phase, failure_type, failure_message, k_shot, seed, in_corpus
        FROM runs_and_attempts WHERE status = 'failed'
        ORDER BY {LEVEL_ORDER}, task, backbone_name, run_id
    """)


def task_summary(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per task: level, number of boards, ok runs and failed runs; of the ok runs, how many are few-shot
    runs (on no board) and on how many learning curves they lie."""
    return fetch(con, f"""
        SELECT level, task,
               count(DISTINCT comparability_key) FILTER (WHERE status = 'ok' AND k_shot IS NULL) AS boards,
               count(*) FILTER (WHERE status = 'ok') AS ok_runs,
               count(*) FILTER (WHERE status = 'failed') AS failed_runs,
               count(*) FILTER (WHERE status = 'ok' AND k_shot IS NOT NULL) AS fewshot_runs,
               count(DISTINCT curve_key) FILTER (WHERE status = 'ok') AS curves
        FROM runs_and_attempts
        GROUP BY level, task
        ORDER BY {LEVEL_ORDER}, task
    """)


def backbone_summary(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per backbone name: control or not, its identities (one per precision/pin), run counts."""
    summary = fetch(con, """
        SELECT backbone_name, bool_or(control) AS control,
               list(DISTINCT backbone_identity ORDER BY backbone_identity)
                   FILTER (WHERE backbone_identity IS NOT NULL) AS identities,
               count(DISTINCT task) AS tasks,
               count(*) FILTER (WHERE status = 'ok') AS ok_runs,
               count(*) FILTER (WHERE status = 'failed') AS failed_runs
        FROM runs_and_attempts
        GROUP BY backbone_name
        ORDER BY backbone_name
    """)
    for row in summary:
        row["identities"] = row["identities"] or []  # a list aggregate over no rows is NULL
    return summary


def backbone_identities(con: duckdb.DuckDBPyConnection, backbone_name: str) -> list[dict[str, Any]]:
    """The identity blocks recorded for one backbone name, with weights/architecture/preprocess decoded."""
    rows = fetch(con, """
        SELECT identity, control, weights, architecture, preprocess
        FROM backbones WHERE backbone_name = ? ORDER BY identity
    """, [backbone_name])
    for row in rows:
        for block in ("weights", "architecture", "preprocess"):
            row[block] = json.loads(row[block])
    return rows


def backbone_runs(con: duckdb.DuckDBPyConnection, backbone_name: str) -> list[dict[str, Any]]:
    """The backbone's full-split runs; its few-shot runs are summarised per curve by `backbone_curves`."""
    return fetch(con, f"""
        SELECT run_id, task, level, dataset_name, split, layer_set(layers) AS layer_set, precision, status,
               headline_metric, headline_value, k_shot, seed
        FROM records WHERE backbone_name = ? AND k_shot IS NULL
        ORDER BY {LEVEL_ORDER}, task, dataset_name NULLS LAST, split NULLS LAST,
                 layer_order(layers) NULLS FIRST, precision, run_id
    """, [backbone_name])


def backbone_curves(con: duckdb.DuckDBPyConnection, backbone_name: str) -> list[dict[str, Any]]:
    """The backbone's few-shot runs, one row per learning curve and layer set: the k values and seeds run,
    how many runs succeeded and failed. A failed run before its dataset was read has no curve key; those
    are counted on a row of their own per task."""
    return fetch(con, f"""
        SELECT task, min(level) AS level, curve_key, min(dataset_name) AS dataset_name, min(split) AS split,
               layer_set(layers) AS layer_set, list(DISTINCT k_shot ORDER BY k_shot) AS k_shots,
               list(DISTINCT seed ORDER BY seed) AS seeds,
               count(*) FILTER (WHERE status = 'ok') AS ok_runs,
               count(*) FILTER (WHERE status = 'failed') AS failed_runs
        FROM records WHERE backbone_name = ? AND k_shot IS NOT NULL
        GROUP BY task, curve_key, layers
        ORDER BY min({LEVEL_ORDER}), task, dataset_name NULLS LAST, split NULLS LAST, curve_key NULLS LAST,
                 layer_order(layers) NULLS FIRST
    """, [backbone_name])


def level_summary(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per level: number of tasks, boards, ok runs and failed runs."""
    return fetch(con, f"""
        SELECT level, count(DISTINCT task) AS tasks,
               count(DISTINCT comparability_key) FILTER (WHERE status = 'ok' AND k_shot IS NULL) AS boards,
               count(*) FILTER (WHERE status = 'ok') AS ok_runs,
               count(*) FILTER (WHERE status = 'failed') AS failed_runs
        FROM runs_and_attempts
        GROUP BY level
        ORDER BY {LEVEL_ORDER}
    """)
