"""Few-shot runs as learning curves: SQL over db's `records` table.

A curve is every ok few-shot run sharing a `curve_key` (the comparability fields less k and the
subset): one line per backbone and layer set (a board row's identity, see `comparability`), one point per
k, summarising that line's runs over the subset seeds. Few-shot runs never reach `board_rows` (db), so
they take no rank and no place in the cross-task table.

Each point's values are gathered into a list in seed order first and summarised from that list, so the
floating-point sums run in one fixed order whatever order the engine scanned the rows in.
"""

from __future__ import annotations

from typing import Any

import duckdb

from harness.leaderboard.queries.db import LEVEL_ORDER, fetch

# One row per curve: what it holds fixed (as a board does), its unit and the k values it has.
_CURVES_SQL = f"""
SELECT r.curve_key, min(r.level) AS level, min(r.task) AS task, min(r.protocol) AS protocol,
       min(r.dataset_name) AS dataset_name, min(r.dataset_identity) AS dataset_identity, min(r.split) AS split,
       min(r.pooling_requested) AS pooling_requested, min(r.feature_mode) AS feature_mode,
       min(r.precision) AS precision,
       min(r.headline_metric) AS headline_metric, count(DISTINCT r.headline_metric) AS headline_metrics,
       bool_and(m.higher_is_better) AS higher_is_better, count(DISTINCT m.higher_is_better) AS directions,
       min(json_extract_string(r.protocol_params, '$.k_shot_unit')) AS unit,
       list(DISTINCT r.k_shot ORDER BY r.k_shot) AS k_shots,
       list(DISTINCT r.seed ORDER BY r.seed) AS seeds,
       count(*) AS runs
FROM records r
LEFT JOIN metrics m ON m.run_id = r.run_id AND m.metric = r.headline_metric
WHERE r.status = 'ok' AND r.k_shot IS NOT NULL
GROUP BY r.curve_key
ORDER BY min({LEVEL_ORDER}), task, dataset_name, split, protocol, unit, r.curve_key
"""

# One row per (curve, backbone, layer set, k): mean, sample standard deviation, min and max of the
# headline over the seeds. Pretrained backbones first, then controls, each by name. A line is labelled
# with its layer set only where the curve holds more than one for that backbone, as a board row is.
_POINTS_SQL = """
WITH seeds AS (
    SELECT curve_key, backbone_name, layers, control, k_shot,
           list(headline_value ORDER BY seed, run_id) AS headline_values,
           list(seed ORDER BY seed, run_id) AS seeds,
           list(run_id ORDER BY seed, run_id) AS run_ids
    FROM records
    WHERE status = 'ok' AND k_shot IS NOT NULL AND headline_value IS NOT NULL
    GROUP BY curve_key, backbone_name, layers, control, k_shot
)
SELECT curve_key, backbone_name, layers,
       CASE WHEN count(DISTINCT layers) OVER (PARTITION BY curve_key, backbone_name) > 1
            THEN backbone_name || ' · ' || layer_set(layers) ELSE backbone_name END AS row_label,
       control, k_shot, seeds, run_ids, len(headline_values) AS n,
       list_avg(headline_values) AS mean, list_aggregate(headline_values, 'stddev_samp') AS sd,
       list_min(headline_values) AS low, list_max(headline_values) AS high
FROM seeds
ORDER BY curve_key, control, backbone_name, layer_order(layers) NULLS FIRST, k_shot
"""


class CurveError(ValueError):
    """Few-shot runs that share a curve but disagree on what it plots."""


def curves(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """One dict per learning curve, with its fixed fields, `k_shots`, `seeds`, `unit` and `lines`: per
    backbone and layer set (pretrained first, then controls, by name) its `backbone_name`, `row_label`,
    `control` and `points`, one per k with n, mean, sd (None for a single seed), low, high, seeds and
    run_ids."""
    curve_list = fetch(con, _CURVES_SQL)
    lines: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    for point in fetch(con, _POINTS_SQL):
        key, name, layers, label = (point.pop(f) for f in ("curve_key", "backbone_name", "layers", "row_label"))
        line = lines.setdefault(key, {}).setdefault((name, layers), {
            "backbone_name": name, "row_label": label, "control": point["control"], "points": []})
        line["points"].append(point)
    for curve in curve_list:
        where = f"learning curve {curve['curve_key']} ({curve['task']}, {curve['dataset_name']})"
        # The same key means the same protocol, so these disagree only if records were edited by hand.
        if curve.pop("headline_metrics") != 1 or curve.pop("directions") > 1:
            raise CurveError(f"cannot draw {where}: its runs disagree on the headline metric or its direction")
        curve["lines"] = list(lines.get(curve["curve_key"], {}).values())
    return curve_list
