"""Every pair of rows that share a board, with their headline values and the paired difference of their
per-sample headline scores, as SQL over `board_rows` and `queries.samples`' `samples` table: the compare page.

A row here is what a cross-task row is: a backbone with a layer set, labelled the same way on every board
(`queries.crosstask.ROWS_CTE`), so a pair reads the same wherever the two meet; where two grids ran the same row
on one board, its best-placed run stands for it, as in the cross-task table.
"""

from __future__ import annotations

from typing import Any

import duckdb

from harness.leaderboard.queries.crosstask import ROWS_CTE
from harness.leaderboard.queries.db import fetch

# Pairs (a, b) with a's label before b's. `paired_n` counts the samples both runs scored (joined by sample id)
# and `difference` is the mean of a − b over them; they are NULL where either run has no per-sample
# headline column. `samples_a`/`samples_b` count each run's own samples: a pair with paired_n below either
# was scored on different samples and cannot be tested (statistics.PairingError says so).
_PAIRS_SQL = f"""
WITH labels AS ({ROWS_CTE}),
best AS (
    SELECT * FROM (
        SELECT b.*, row_number() OVER (PARTITION BY b.comparability_key, b.backbone_name, b.layers
                                       ORDER BY b.normalised_rank NULLS LAST, b.run_id) AS nth
        FROM board_rows b WHERE b.headline_value IS NOT NULL
    ) WHERE nth = 1
),
rows AS (
    SELECT best.*, labels.row_label AS label, r.headline_metric
    FROM best JOIN labels USING (backbone_name, layers) JOIN records r USING (run_id)
),
headline_samples AS (
    SELECT s.run_id, s.sample_id, s.value FROM samples s JOIN records r USING (run_id)
    WHERE s.metric = r.headline_metric
),
sample_counts AS (SELECT run_id, count(*) AS n FROM headline_samples GROUP BY run_id),
pairs AS (
    SELECT a.comparability_key, a.label AS label_a, b.label AS label_b, a.backbone_name AS backbone_a,
           b.backbone_name AS backbone_b, a.run_id AS run_a, b.run_id AS run_b, a.control AS control_a,
           b.control AS control_b, a.rank AS rank_a, b.rank AS rank_b, a.headline_value AS value_a,
           b.headline_value AS value_b
    FROM rows a JOIN rows b ON a.comparability_key = b.comparability_key AND a.label < b.label
),
paired AS (
    SELECT p.run_a, p.run_b, count(*) AS paired_n, favg(sa.value - sb.value) AS difference
    FROM pairs p
    JOIN headline_samples sa ON sa.run_id = p.run_a
    JOIN headline_samples sb ON sb.run_id = p.run_b AND sb.sample_id = sa.sample_id
    GROUP BY p.run_a, p.run_b
)
SELECT p.*, paired.paired_n, paired.difference, ca.n AS samples_a, cb.n AS samples_b
FROM pairs p
LEFT JOIN paired USING (run_a, run_b)
LEFT JOIN sample_counts ca ON ca.run_id = p.run_a
LEFT JOIN sample_counts cb ON cb.run_id = p.run_b
ORDER BY p.comparability_key, p.label_a, p.label_b
"""


def board_pairs(con: duckdb.DuckDBPyConnection) -> dict[str, list[dict[str, Any]]]:
    """Per comparability key, its pairs in label order (see `_PAIRS_SQL` for the fields)."""
    pairs: dict[str, list[dict[str, Any]]] = {}
    for pair in fetch(con, _PAIRS_SQL):
        pairs.setdefault(pair.pop("comparability_key"), []).append(pair)
    return pairs
