"""The data behind the site's plots as CSV files, for `dvc plots` and for download: a table per learning
curve and a score distribution per board, under docs/plots/data/ (a folder the site stage owns whole: CSV
has no room for the generated-file header, so every file there is generated).

Both are long tables with a `series` column (a board row: backbone and layer set, "(control)" for a
random-init control), so one DVC plot definition per folder draws every file with the templates in
`dvc_templates/`, whatever the backbones: `dvc_plots()` is that definition, for dvc.yaml.

- curves/<task>-<curve key>.csv: series, k, mean, low, high, n: the headline over the subset seeds (`queries.fewshot`).
- boards/<board code>.csv: series, quantile, score: the quantile function (0, 0.05, …, 1) of each row's
  per-sample headline scores; boards whose runs have no per-sample scores have none.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import duckdb

from harness.leaderboard.queries.db import fetch
from harness.leaderboard.sitemap import DATA_DIR, board_distribution_path, curve_data_path

TEMPLATES = "harness/leaderboard/figures/dvc_templates"  # relative to the project root, where dvc runs
QUANTILE_STEPS = 20  # quantiles 0, 1/20, …, 1

# Per board row with per-sample headline scores: its quantiles, in board order. The label gets the run id
# where two runs of one backbone and layer set share a board (two grids), so no two series merge.
_DISTRIBUTIONS_SQL = f"""
WITH headline_scores AS (
    SELECT b.comparability_key, b.run_id,
           quantile_cont(s.value, [q / {QUANTILE_STEPS} FOR q IN range({QUANTILE_STEPS} + 1)]) AS scores
    FROM board_rows b
    JOIN records r USING (run_id)
    JOIN samples s ON s.run_id = b.run_id AND s.metric = r.headline_metric
    GROUP BY b.comparability_key, b.run_id
),
labelled AS (
    SELECT b.*, CASE WHEN count(*) OVER (PARTITION BY b.comparability_key, b.row_label) > 1
                     THEN b.row_label || ' (' || b.run_id || ')' ELSE b.row_label END
                || CASE WHEN b.control THEN ' (control)' ELSE '' END AS series
    FROM board_rows b
)
SELECT l.comparability_key, l.series,
       unnest([q / {QUANTILE_STEPS} FOR q IN range({QUANTILE_STEPS} + 1)]) AS quantile, unnest(h.scores) AS score
FROM headline_scores h JOIN labelled l USING (comparability_key, run_id)
ORDER BY l.comparability_key, l.control, l.headline_value IS NULL, l.sort_value, l.series, quantile
"""


def csv_text(header: list[str], rows: list[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    # repr: the shortest text that reads back as the same float, so the files are exact and stable
    writer.writerows([[repr(v) if isinstance(v, float) else v for v in row] for row in rows])
    return buffer.getvalue()


def board_distributions(con: duckdb.DuckDBPyConnection, codes: dict[str, str]) -> dict[str, str]:
    """{path relative to docs/: CSV} per board with per-sample scores; `con` holds `queries.samples`' tables."""
    by_board: dict[str, list[list[Any]]] = {}
    for row in fetch(con, _DISTRIBUTIONS_SQL):
        by_board.setdefault(row["comparability_key"], []).append([row["series"], row["quantile"], row["score"]])
    return {board_distribution_path(codes[key]): csv_text(["series", "quantile", "score"], rows)
            for key, rows in by_board.items()}


def curve_data(curves: list[dict[str, Any]]) -> dict[str, str]:
    """{path relative to docs/: CSV} per learning curve: one row per line and k, as the figure draws them."""
    files = {}
    for curve in curves:
        rows = [[line["row_label"] + (" (control)" if line["control"] else ""), p["k_shot"], p["mean"], p["low"],
                 p["high"], p["n"]] for line in curve["lines"] for p in line["points"]]
        files[curve_data_path(curve)] = csv_text(["series", "k", "mean", "low", "high", "n"], rows)
    return files


def dvc_plots(docs_dir: str = "docs") -> list[dict[str, Any]]:
    """The `plots:` entries of dvc.yaml for these files: a folder each, every file in it one plot."""
    return [
        {f"{docs_dir}/{DATA_DIR}/curves": {
            "template": f"{TEMPLATES}/curve.json", "x": "k", "y": "mean",
            "x_label": "k: training items (per class or in all, see the task page), log2 scale",
            "y_label": "headline metric, mean over subset seeds",
        }},
        {f"{docs_dir}/{DATA_DIR}/boards": {
            "template": f"{TEMPLATES}/distribution.json", "x": "quantile", "y": "score",
            "x_label": "quantile of the run's per-sample scores",
            "y_label": "per-sample headline score",
        }},
    ]
