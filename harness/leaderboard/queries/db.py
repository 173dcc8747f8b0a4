"""The record corpus as DuckDB tables, and every grouping, pivot and ranking the site needs, as SQL.

`connect_corpus` flattens records into three in-memory tables:

- `records`: one row per run (nested blocks as canonical JSON text, so equal values compare equal;
  `k_shot` and `curve_key` set for few-shot runs);
- `metrics`: one row per (run, metric), with the metric's direction and `verify` tolerance;
- `backbones`: one row per distinct (backbone name, identity), with its weights, architecture and
  preprocessing blocks as canonical JSON text;

and defines the view `board_rows`: every ok full-split run placed on its board (rank, normalised rank).
Few-shot runs are on no board: a backbone has one per seed, and ranking replicates against each other
would be meaningless. `queries.fewshot` aggregates them into learning curves instead. A seed sweep's replicates
(`comparability.is_seed_replicate`) go to a table of their own, `replicates` (their metrics to `replicate_metrics`),
which `queries.replicates` reads for each
board row's seed-to-seed spread.
`load_samples_table` (from `queries.samples`) adds the runs' per-sample scores as the table `samples`; the
per-level, per-task and per-backbone summaries are in `queries.summaries`.

The query functions return plain lists of dicts in a fixed order, so a page rendered from them is a
pure function of the corpus.
"""

from __future__ import annotations

import itertools
from typing import Any

import duckdb

from harness.core.hashing import canonical_json
from harness.core.run_key import CONTROL_SUFFIX
from harness.leaderboard.queries.comparability import (
    ComparabilityError,
    comparability_key,
    curve_key,
    is_seed_replicate,
)
from harness.leaderboard.queries.samples import load_samples_table as load_samples_table  # the per-sample tables
from harness.runs.records import Record

_SCHEMA = """
CREATE TABLE records (
    run_id VARCHAR PRIMARY KEY,
    backbone_name VARCHAR NOT NULL,
    backbone_identity VARCHAR,
    control BOOLEAN NOT NULL,
    task VARCHAR NOT NULL,
    level VARCHAR NOT NULL,
    protocol VARCHAR NOT NULL,
    protocol_params VARCHAR NOT NULL,
    dataset_name VARCHAR,
    dataset_identity VARCHAR,
    split VARCHAR,
    dataset_size BIGINT,
    dataset_params VARCHAR,
    pooling_requested VARCHAR NOT NULL,
    pooling_resolved VARCHAR,
    feature_mode VARCHAR NOT NULL,
    layers VARCHAR NOT NULL,
    precision VARCHAR NOT NULL,
    image_size INTEGER,
    seed BIGINT NOT NULL,
    status VARCHAR NOT NULL,
    failure_phase VARCHAR,
    failure_type VARCHAR,
    failure_message VARCHAR,
    headline_metric VARCHAR NOT NULL,
    headline_value DOUBLE,
    duration_s DOUBLE NOT NULL,
    comparability_key VARCHAR NOT NULL,
    k_shot INTEGER,
    curve_key VARCHAR,
    weights_kind VARCHAR,
    weights_sha VARCHAR,
    git_commit VARCHAR,
    warnings INTEGER NOT NULL,  -- how many warnings an ok run carries (Record.warnings; on its run page)
    images_per_s DOUBLE,  -- the extraction forward's timed speed (Record.throughput), on throughput_device
    throughput_device VARCHAR
);
CREATE TABLE metrics (
    run_id VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    value DOUBLE NOT NULL,
    higher_is_better BOOLEAN,
    tolerance DOUBLE,
    PRIMARY KEY (run_id, metric)
);
-- what a board's rows must beat to be ranked (`floors`): filled by `set_floors` once the per-sample ids its chance
-- rows need are loaded; empty, every row with a headline is ranked
CREATE TABLE board_floors (
    comparability_key VARCHAR PRIMARY KEY,
    floor DOUBLE NOT NULL,
    source VARCHAR NOT NULL
);
CREATE TABLE backbones (
    backbone_name VARCHAR NOT NULL,
    identity VARCHAR NOT NULL,
    control BOOLEAN NOT NULL,
    weights VARCHAR NOT NULL,
    architecture VARCHAR NOT NULL,
    preprocess VARCHAR NOT NULL,
    PRIMARY KEY (backbone_name, identity)
);
"""

# Task levels read high → mid → low on every page, not alphabetically.
LEVEL_ORDER = "CASE level WHEN 'high' THEN 0 WHEN 'mid' THEN 1 WHEN 'low' THEN 2 END"


def connect_corpus(records: list[Record], attempts: list[Record] = ()) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the corpus loaded; a run_id that appears twice is refused.

    `attempts` are failed attempts kept apart from the corpus (leaderboard/failures.jsonl): they go to their
    own table, counted and listed as failures, never on a board, and may share a run id with an ok record.
    """
    ordered = sorted(records, key=lambda r: r.run_id)
    duplicates = sorted({a.run_id for a, b in itertools.pairwise(ordered) if a.run_id == b.run_id})
    if duplicates:
        raise ValueError(f"corpus has more than one record for run_id {', '.join(duplicates)}")

    replicates = [r for r in ordered if is_seed_replicate(r)]
    ordered = [r for r in ordered if not is_seed_replicate(r)]
    con = duckdb.connect(":memory:")
    con.execute(_SCHEMA)
    _insert(con, "records", [_record_row(r) for r in ordered])
    # a seed sweep's runs: beside their board rows, never on a board (queries.replicates reads their spread)
    con.execute("CREATE TABLE replicates AS SELECT * FROM records LIMIT 0")
    _insert(con, "replicates", [_record_row(r) for r in replicates])
    con.execute("CREATE TABLE attempts AS SELECT * FROM records LIMIT 0")
    _insert(con, "attempts", [_record_row(r) for r in sorted(attempts, key=lambda r: r.run_id)])
    con.execute("CREATE VIEW runs_and_attempts AS "
                "SELECT *, true AS in_corpus FROM records UNION ALL SELECT *, false AS in_corpus FROM attempts")
    metric_rows = [
        (r.run_id, name, value, r.higher_is_better.get(name), r.tolerances.get(name))
        for r in ordered
        for name, value in sorted(r.metrics.items())
    ]
    _insert(con, "metrics", metric_rows)
    # the replicates' metrics, apart like their records: what their per-sample files are checked against
    # (queries.samples)
    con.execute("CREATE TABLE replicate_metrics AS SELECT * FROM metrics LIMIT 0")
    _insert(con, "replicate_metrics", [(r.run_id, name, value, r.higher_is_better.get(name), r.tolerances.get(name))
                                       for r in replicates for name, value in sorted(r.metrics.items())])
    # Identical (name, identity) pairs carry identical blocks, since the identity hashes them.
    backbone_rows = {
        (b.name, b.identity): (
            b.name, b.identity, b.control,
            canonical_json(b.weights), canonical_json(b.architecture), canonical_json(b.preprocess),
        )
        for r in ordered
        if (b := r.backbone) is not None
    }
    _insert(con, "backbones", list(backbone_rows.values()))
    con.execute(_LAYER_SET_MACRO)
    con.execute(_BOARD_ROWS_VIEW)
    return con


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple[Any, ...]]) -> None:
    """Insert rows as one list parameter per column, unnested side by side.

    `executemany` costs a round trip per row (seconds for a few thousand records), and the bulk paths
    DuckDB offers go through pandas or pyarrow, which this package does not depend on.
    """
    if not rows:
        return
    types = [t for (t,) in con.execute(
        "SELECT data_type FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index", [table]
    ).fetchall()]
    columns = [list(column) for column in zip(*rows, strict=True)]
    if len(columns) != len(types):
        raise ValueError(f"{table}: {len(columns)} values per row for {len(types)} columns")
    unnested = ", ".join(f"unnest(?::{t}[])" for t in types)
    con.execute(f"INSERT INTO {table} SELECT {unnested}", columns)


def _record_row(record: Record) -> tuple[Any, ...]:
    backbone, dataset, failure = record.backbone, record.dataset, record.failure
    weights = backbone.weights if backbone else {}
    return (
        record.run_id,
        record.backbone_name,
        backbone.identity if backbone else None,
        # A backbone that failed to build has no block; its name still says whether it was a control.
        backbone.control if backbone else record.backbone_name.endswith(CONTROL_SUFFIX),
        record.task,
        record.level,
        record.protocol,
        canonical_json(record.protocol_params),
        dataset.name if dataset else None,
        dataset.identity if dataset else None,
        dataset.split if dataset else None,
        dataset.size if dataset else None,
        canonical_json(dataset.params) if dataset else None,
        record.pooling_requested,
        record.pooling_resolved,
        record.feature_mode,
        canonical_json(record.layers),
        record.precision,
        record.image_size,
        record.seed,
        record.status,
        failure.phase if failure else None,
        failure.error_type if failure else None,
        failure.message if failure else None,
        record.headline_metric,
        record.headline,
        record.duration_s,
        comparability_key(record),
        record.k_shot,
        None if record.k_shot is None else curve_key(record),
        weights.get("kind"),
        weights.get("file_sha256") or weights.get("state_sha256"),
        record.environment.git_commit,
        len(record.warnings),
        record.throughput.images_per_s if record.throughput else None,
        record.throughput.device if record.throughput else None,
    )


def fetch(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    result = con.execute(sql, params or [])
    columns = [d[0] for d in result.description]
    return [dict(zip(columns, row, strict=True)) for row in result.fetchall()]


# -- boards ------------------------------------------------------------------------------------------

# A layer set as a reader says it: "last layer" (layers null, the default), "layers 3", "layers 1,2,3".
# Layer sets sort by their layer numbers, the default (NULL here) first: ORDER BY layer_order(layers) NULLS FIRST.
CHECKPOINT_LABEL = "own checkpoint, not the published weights"
_LAYER_SET_MACRO = f"""
CREATE MACRO CHECKPOINT_LABEL() AS '{CHECKPOINT_LABEL}';
CREATE MACRO layer_set(layers) AS
    CASE WHEN layers = 'null' THEN 'last layer' ELSE 'layers ' || trim(layers, '[]') END;
CREATE MACRO layer_order(layers) AS from_json(layers, '["BIGINT"]');
"""

# One board per comparability key over ok runs. A row is a run: a backbone with the layer set its
# features were read from (`layers` is not in the key), labelled "name · layers 3" where the board holds
# more than one layer set of that backbone, else by the name alone. The board's direction is the headline metric's
# `higher_is_better`; RANK() gives tied values the same rank and skips the next (1, 1, 3). Controls
# are ranked in their own partition and never receive a rank, so a random-init control can neither
# take nor push down a pretrained backbone's place.
#
# A fixed-filter row (weights kind `fixed-filter`, e.g. `sobel`) is a control like a random init, never ranked,
# but a *baseline*: a reference a pretrained row should beat, listed among the pretrained rows at its value
# (`baseline`), where random-init controls come after them.
#
# A pretrained row that does not beat its board's floor (`board_floors`: a chance row or an image-blind baseline,
# harness.leaderboard.statistics.floors) is `gated`: shown at its value but not ranked, as a control is, so noise
# below chance never orders backbones. For the cross-task table it is placed last (normalised rank 1), so scoring at
# chance never leaves a row better placed than scoring just above it would.
#
# Normalised rank puts boards of different sizes on one scale: with m ranked pretrained rows,
# (number of pretrained rows strictly better) / (m - 1), so 0 is best and 1 worst; a lone pretrained
# row gets 0. For a pretrained row the count is rank - 1. A control gets the position it would take
# among the pretrained rows, capped at 1 (worse than all of them reads as 1), so it can be shown
# beside them without being ranked.
_BOARD_ROWS_VIEW = """
CREATE VIEW board_rows AS
WITH ok AS (
    SELECT r.*, m.higher_is_better AS headline_higher_is_better
    FROM records r
    LEFT JOIN metrics m ON m.run_id = r.run_id AND m.metric = r.headline_metric
    WHERE r.status = 'ok' AND r.k_shot IS NULL
),
board AS (
    SELECT comparability_key, bool_and(headline_higher_is_better) AS higher_is_better
    FROM ok GROUP BY comparability_key
),
scored AS (
    SELECT ok.*,
           CASE WHEN board.higher_is_better THEN -ok.headline_value ELSE ok.headline_value END AS sort_value,
           coalesce(NOT ok.control AND ok.headline_value IS NOT NULL AND f.floor IS NOT NULL AND NOT (
               CASE WHEN board.higher_is_better THEN ok.headline_value > f.floor ELSE ok.headline_value < f.floor END
           ), false) AS gated
    FROM ok JOIN board USING (comparability_key) LEFT JOIN board_floors f USING (comparability_key)
),
ranked AS (
    SELECT s.*,
           RANK() OVER (
               PARTITION BY s.comparability_key, s.control OR s.gated, s.headline_value IS NULL ORDER BY s.sort_value
           ) AS partition_rank,
           count(*) FILTER (WHERE NOT s.control AND NOT s.gated AND s.headline_value IS NOT NULL)
               OVER (PARTITION BY s.comparability_key) AS ranked_count,
           (SELECT count(*) FROM scored p
            WHERE p.comparability_key = s.comparability_key AND NOT p.control AND NOT p.gated
              AND p.headline_value IS NOT NULL AND p.sort_value < s.sort_value) AS better_count
    FROM scored s
)
SELECT comparability_key, run_id, backbone_name, backbone_identity, control, gated, layers, warnings,
       coalesce(weights_kind = 'fixed-filter', false) AS baseline,
       layer_set(layers) AS layer_set,
       CASE WHEN count(DISTINCT layers) OVER (PARTITION BY comparability_key, backbone_name) > 1
            THEN backbone_name || ' · ' || layer_set(layers) ELSE backbone_name END
       -- a weights file that is not the published pin (harness.backbones.weights): said wherever the row shows
       || CASE WHEN weights_kind = 'checkpoint' THEN ' · ' || CHECKPOINT_LABEL() ELSE '' END AS row_label,
       headline_value, sort_value,
       CASE WHEN NOT control AND NOT gated AND headline_value IS NOT NULL THEN partition_rank END AS rank,
       ranked_count,
       CASE WHEN headline_value IS NOT NULL AND ranked_count > 0
            THEN least(better_count::DOUBLE / greatest(ranked_count - 1, 1), 1.0) END AS normalised_rank
FROM ranked
"""

_BOARD_ROWS_SQL = """
WITH run_metrics AS (
    SELECT run_id, list({'metric': metric, 'value': value} ORDER BY metric) AS metrics
    FROM metrics GROUP BY run_id
)
SELECT b.comparability_key, b.run_id, b.backbone_name, b.backbone_identity, b.control, b.baseline, b.gated, b.layers,
       b.layer_set, b.row_label, b.headline_value, b.rank, b.ranked_count, b.normalised_rank, b.warnings,
       run_metrics.metrics
FROM board_rows b LEFT JOIN run_metrics USING (run_id)
ORDER BY b.comparability_key, b.control AND NOT b.baseline, b.headline_value IS NULL, b.sort_value, b.backbone_name,
         layer_order(b.layers) NULLS FIRST, b.run_id
"""

_BOARDS_SQL = f"""
SELECT comparability_key,
       min(level) AS level, min(task) AS task, min(protocol) AS protocol,
       min(protocol_params) AS protocol_params,
       min(dataset_name) AS dataset_name, min(dataset_identity) AS dataset_identity, min(split) AS split,
       min(dataset_params) AS dataset_params, min(pooling_requested) AS pooling_requested,
       min(feature_mode) AS feature_mode,
       min(precision) AS precision,
       -- not in the key: each backbone's own input size, and the layer sets its rows were read from
       list(DISTINCT image_size ORDER BY image_size) FILTER (WHERE image_size IS NOT NULL) AS image_sizes,
       (SELECT list(layer_set(l) ORDER BY layer_order(l) NULLS FIRST) FROM (
            SELECT DISTINCT layers AS l FROM records s
            WHERE s.comparability_key = records.comparability_key AND s.status = 'ok' AND s.k_shot IS NULL)
       ) AS layer_sets,
       min(headline_metric) AS headline_metric,
       count(DISTINCT headline_metric) AS headline_metrics
FROM records WHERE status = 'ok' AND k_shot IS NULL
GROUP BY comparability_key
ORDER BY min({LEVEL_ORDER}), task, dataset_name, split, protocol, pooling_requested, feature_mode,
         precision, comparability_key
"""

# Every metric seen on a board, headline first, then by name, with the direction runs agree on.
_BOARD_METRICS_SQL = """
SELECT r.comparability_key, m.metric,
       bool_and(m.higher_is_better) AS higher_is_better,
       count(DISTINCT m.higher_is_better) AS directions,
       count(*) FILTER (WHERE m.higher_is_better IS NULL) AS undirected
FROM records r JOIN metrics m USING (run_id)
WHERE r.status = 'ok' AND r.k_shot IS NULL
GROUP BY r.comparability_key, m.metric
ORDER BY r.comparability_key, m.metric = min(r.headline_metric) DESC, m.metric
"""


def set_floors(con: duckdb.DuckDBPyConnection, floors: dict[str, tuple[float, str]]) -> None:
    """Replace the boards' floors ({comparability key: (value, what scores it)}): `board_rows` ranks by them."""
    con.execute("DELETE FROM board_floors")
    _insert(con, "board_floors", [(key, value, source) for key, (value, source) in sorted(floors.items())])


def boards(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """One dict per board: its comparability fields, `metrics` (columns) and ranked `rows`.

    Each row has run_id, backbone_name, backbone_identity, control, gated (a pretrained row that does not beat
    the board's floor), headline_value, rank (None for a control, a gated row or a run without a headline
    value), ranked_count (ranked pretrained rows on the board), normalised_rank (see `_BOARD_ROWS_VIEW`) and
    `metrics` ({name: value}).
    """
    board_list = fetch(con, _BOARDS_SQL)
    columns: dict[str, list[dict[str, Any]]] = {}
    for metric in fetch(con, _BOARD_METRICS_SQL):
        columns.setdefault(metric["comparability_key"], []).append(metric)
    rows: dict[str, list[dict[str, Any]]] = {}
    for row in fetch(con, _BOARD_ROWS_SQL):
        row["metrics"] = {m["metric"]: m["value"] for m in row["metrics"] or []}
        rows.setdefault(row.pop("comparability_key"), []).append(row)

    for board in board_list:
        key = board["comparability_key"]
        where = f"board {key} ({board['task']}, {board['dataset_name']})"
        # Same key means same protocol, so these can only disagree if records were edited by hand.
        if board.pop("headline_metrics") != 1:
            raise ComparabilityError(f"cannot rank {where}: its runs name different headline metrics")
        board["metrics"] = []
        for metric in columns.get(key, []):
            if metric["directions"] > 1:
                raise ComparabilityError(f"cannot rank {where}: runs disagree whether higher "
                                         f"{metric['metric']} is better")
            if metric["metric"] == board["headline_metric"] and metric["undirected"]:
                raise ComparabilityError(f"cannot rank {where}: headline metric {metric['metric']} has "
                                         "no higher_is_better in some runs")
            board["metrics"].append(
                {"metric": metric["metric"], "higher_is_better": metric["higher_is_better"]}
            )
        board["higher_is_better"] = next(
            (m["higher_is_better"] for m in board["metrics"] if m["metric"] == board["headline_metric"]), None
        )
        board["rows"] = rows.get(key, [])
    return board_list
