"""The statistics behind the site, computed once per render from the boards and the per-sample files.

- per run and per-sample column: a bootstrap interval (`Analysis.intervals`);
- per board: paired tests between its ranked rows, Holm-adjusted, and the tie groups they imply;
  whether its metrics order the backbones differently;
- across boards: the cross-task table (normalised rank of each backbone and layer set on each board) with
  its aggregate, and rank agreement between boards.

Every seed is derived from what is measured (see `statistics.derived_seed`): an interval's and a paired test's from
the board and the per-sample files' contents, never a run's name, so the numbers do not depend on which page asks
first, on the order of the records, or on what a run is called.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from harness.leaderboard import db, db_crosstask, db_samples
from harness.leaderboard.statistics import (
    ALPHA,
    MIN_CORRELATION_N,
    RESAMPLES,
    Correlation,
    Interval,
    PairedTest,
    PairingError,
    bootstrap_cis,
    derived_seed,
    group_label,
    holm,
    interval_seed,
    kendall_tau_b,
    paired_bootstrap,
    paired_seed,
    paired_statistic_bootstrap,
    rank_correlation,
    statistic_ci,
    tie_groups,
)
from harness.probes import resampled
from harness.runs.records import Record

# Fields that tell apart boards sharing a task and dataset, in the order a label names them.
_LABEL_FIELDS = (
    ("split", "{} split"), ("protocol", "{}"), ("pooling_requested", "pooling {}"), ("feature_mode", "{}"),
    ("precision", "{}"),
)
# A board's title always names these (split and protocol), then whatever else tells it apart.
_TITLE_EXTRAS = ("pooling_requested", "feature_mode", "precision")
CODE_DIGITS = 4  # hex digits of the comparability key in a board code, more only where two would clash


@dataclass(frozen=True)
class RunSamples:
    ids: list[str]
    columns: dict[str, np.ndarray]  # score columns: each averages to its metric
    unit: str
    auxiliary: dict[str, np.ndarray] = field(default_factory=dict)  # rows resampled statistics are computed from
    statistics: dict[str, str] = field(default_factory=dict)  # metric -> `harness.probes.resampled` statistic
    sha256: str = ""  # the per-sample file's hash: what seeds its bootstraps (`interval_seed`, `paired_seed`)

    def resamplable(self, metric: str) -> bool:
        """Whether a bootstrap can resample this metric: a score column, or a statistic of auxiliary columns."""
        return metric in self.columns or metric in self.statistics

    def statistic(self, metric: str, order: np.ndarray | None = None):
        """The metric as a function of row weights, over the rows in `order` (default: file order)."""
        rows = {**self.columns, **self.auxiliary}
        if order is not None:
            rows = {name: column[order] for name, column in rows.items()}
        if metric in self.columns:
            column = rows[metric]
            return lambda weights: (weights @ column) / weights.sum(axis=1)
        name = self.statistics[metric]
        return lambda weights: resampled.evaluate(name, rows, weights)


@dataclass
class BoardStats:
    code: str  # "B-3031": from the comparability key, see `board_codes`
    label: str  # "classification (cifar10)", plus what tells it apart from boards of the same task and dataset
    title: str  # "classification on cifar10 (val), linear-probe-adamw/v2", plus the same
    tested: list[str] = field(default_factory=list)  # ranked run ids with headline samples, rank order
    pairs: dict[tuple[str, str], PairedTest] = field(default_factory=dict)  # (upper, lower) run ids
    adjusted: dict[tuple[str, str], float] = field(default_factory=dict)  # Holm over all pairs
    groups: dict[str, str] = field(default_factory=dict)  # run id -> tie group letter
    without_samples: list[str] = field(default_factory=list)  # backbone names of rows lacking them
    disagreements: list[tuple[str, float, int]] = field(default_factory=list)  # (metric, tau, n)
    sample_count: int | None = None  # samples per run, from the first tested row
    unit: str | None = None  # what one sample is

    @property
    def adjacent(self) -> list[tuple[str, str]]:
        return list(itertools.pairwise(self.tested))

    @property
    def p_floor(self) -> float:
        """The smallest Holm-adjusted p-value these pairs can reach with `RESAMPLES` resamples."""
        return min(1.0, len(self.pairs) * 2.0 / (RESAMPLES + 1))


@dataclass(frozen=True)
class CrossTaskRow:
    backbone_name: str
    layers: str  # canonical JSON of the layer set ("null": the default, last layer)
    label: str  # "name", or "name · layers 3" for a backbone recorded with several layer sets
    control: bool
    aggregate: float | None  # mean normalised rank over the columns it has a cell on; None for a control
    missing: list[str]  # comparability keys of columns without a cell
    baseline: bool = False  # a fixed-filter control (sobel): a reference to beat, not a random init


@dataclass
class Analysis:
    boards: list[dict[str, Any]]
    stats: dict[str, BoardStats]  # by comparability key
    intervals: dict[tuple[str, str], Interval]  # (run id, metric) for every per-sample column
    columns: list[dict[str, Any]]  # the cross-task table's boards: tasks' (not diagnostics') with a ranked row
    cells: dict[tuple[str, str, str], dict[str, Any]]  # (backbone name, layers, comparability key) -> cell
    rows: list[CrossTaskRow]
    agreement: dict[tuple[str, str], Correlation]  # (key, key) for columns i <= j in column order
    samples: dict[str, RunSamples]  # per run id with per-sample scores

    def board(self, key: str) -> dict[str, Any]:
        return next(b for b in self.boards if b["comparability_key"] == key)

    def sample_ids(self, board: dict[str, Any]) -> list[str] | None:
        """The per-sample ids a board's runs share (paired tests hold them equal), or None without samples."""
        return next((self.samples[row["run_id"]].ids for row in board["rows"]
                     if row["run_id"] in self.samples and self.samples[row["run_id"]].ids), None)

    @property
    def agreement_columns(self) -> list[dict[str, Any]]:
        """The columns that share at least MIN_CORRELATION_N pretrained rows with another column: the only
        ones an agreement interval can be given for, so the only ones worth a place in the matrix."""
        keys = {key for pair, correlation in self.agreement.items() if pair[0] != pair[1]
                and correlation.n >= MIN_CORRELATION_N for key in pair}
        return [b for b in self.columns if b["comparability_key"] in keys]


def load_samples(con: duckdb.DuckDBPyConnection, records: list[Record], root: Path) -> dict[str, RunSamples]:
    """Per-sample scores of every ok run that has them, loaded into `con` (`db_samples`) and checked
    against the records' metrics there; each column in its file's row order, which the bootstrap
    intervals resample."""
    db_samples.load_samples_table(con, [r for r in records if r.status == "ok"], root)
    ids: dict[str, list[str]] = {}
    columns: dict[str, dict[str, np.ndarray]] = {}
    auxiliary: dict[str, dict[str, np.ndarray]] = {}
    units: dict[str, str] = {}
    for row in db_samples.run_columns(con):
        run_id = row["run_id"]
        units[run_id] = row["unit"]
        run_columns = columns.setdefault(run_id, {})
        run_auxiliary = auxiliary.setdefault(run_id, {})
        if row["metric"] is not None:
            ids.setdefault(run_id, row["ids"])  # the same rows, hence the same ids, in every column
            (run_auxiliary if row["auxiliary"] else run_columns)[row["metric"]] = np.array(row["scores"],
                                                                                         dtype=np.float64)
    statistics = {r.run_id: dict(r.samples.statistics) for r in records if r.samples is not None}
    digests = {r.run_id: r.samples.sha256 for r in records if r.samples is not None}
    return {run_id: RunSamples(ids.get(run_id, []), columns[run_id], unit, auxiliary[run_id],
                               statistics.get(run_id, {}), digests.get(run_id, ""))
            for run_id, unit in units.items()}


def analyse(con: duckdb.DuckDBPyConnection, records: list[Record], root: Path) -> Analysis:
    boards = db.boards(con)
    samples = load_samples(con, records, root)
    keys = [(run_id, name) for run_id, run in samples.items() for name in sorted(run.columns)]
    jobs = [(samples[run_id].columns[name], interval_seed(samples[run_id].sha256, name)) for run_id, name in keys]
    intervals = dict(zip(keys, bootstrap_cis(jobs, workers=_cores()), strict=True))
    # metrics that are not means (macro-F1, ODS): recomputed per resample, with the seed a mean's interval has
    intervals |= {(run_id, name): statistic_ci(run.statistic(name), len(run.ids), interval_seed(run.sha256, name))
                  for run_id, run in samples.items() for name in sorted(run.statistics) if run.ids}
    names = board_names(boards)
    codes = board_codes([b["comparability_key"] for b in boards])
    stats = {
        key: _board_stats(board, codes[key], *names[key], samples)
        for board in boards
        for key in [board["comparability_key"]]
    }
    # the boards' order, filtered by db_crosstask's rule (tasks' boards with a ranked row; no diagnostics)
    task_columns = set(db_crosstask.column_keys(con))
    columns = [b for b in boards if b["comparability_key"] in task_columns]
    cells = {(c["backbone_name"], c["layers"], c["comparability_key"]): c for c in db_crosstask.board_cells(con)}
    return Analysis(boards, stats, intervals, columns, cells, _rows(con), _agreement(columns, cells), samples)


def board_codes(keys: list[str]) -> dict[str, str]:
    """A short code per board, derived from its comparability key alone: "B-" and the key's first
    CODE_DIGITS hex digits, so adding or removing a board never renumbers another.

    Only boards whose prefixes clash get more digits (until they differ), so a clash is the one way a
    new board can lengthen an existing code: with four hex digits, about one chance in 65,536 per pair.
    """
    codes = {}
    for key in keys:
        digits = CODE_DIGITS
        while any(other != key and other[:digits] == key[:digits] for other in keys):
            digits += 1
        codes[key] = f"B-{key[:digits]}"
    return codes


def board_names(boards: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """(label, title) per board. The label is "task (dataset)", plus whichever fields differ among boards
    sharing both, then the key if still needed; the title says what the board is: "task on dataset (split),
    protocol", plus pooling, features or precision where they tell it apart from the task's other boards."""
    by_name: dict[tuple[str, str], list[dict[str, Any]]] = {}
    by_task: dict[str, list[dict[str, Any]]] = {}
    for board in boards:
        by_name.setdefault((board["task"], str(board["dataset_name"])), []).append(board)
        by_task.setdefault(board["task"], []).append(board)
    names = {}
    for (task, dataset), group in by_name.items():
        varying = [(name, form) for name, form in _LABEL_FIELDS if len({str(b[name]) for b in group}) > 1]
        texts = {b["comparability_key"]: ", ".join([dataset, *(form.format(b[n]) for n, form in varying)])
                 for b in group}
        clash = len(set(texts.values())) < len(texts)
        for board in group:
            key = board["comparability_key"]
            label = f"{task} ({texts[key]}, {key})" if clash else f"{task} ({texts[key]})"
            extras = [form.format(board[name]) for name, form in _LABEL_FIELDS
                      if name in _TITLE_EXTRAS and len({str(b[name]) for b in by_task[task]}) > 1]
            title = ", ".join([f"{task} on {dataset} ({board['split']})", board["protocol"], *extras])
            names[key] = (label, f"{title}, {key}" if clash else title)
    return names


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _board_stats(board: dict[str, Any], code: str, label: str, title: str, samples: dict[str, RunSamples]
                 ) -> BoardStats:
    stats = BoardStats(code, label, title)
    headline = board["headline_metric"]
    for row in board["rows"]:
        run = samples.get(row["run_id"])
        if run is None or not run.resamplable(headline) or not run.ids:
            stats.without_samples.append(row["row_label"])
        elif row["rank"] is not None:
            stats.tested.append(row["run_id"])
            if stats.sample_count is None:
                stats.sample_count, stats.unit = len(run.ids), run.unit
    for upper, lower in itertools.combinations(stats.tested, 2):
        a, b = samples[upper], samples[lower]
        seed = paired_seed(board["comparability_key"], a.sha256, b.sha256, headline)
        try:
            if headline in a.columns and headline in b.columns:
                stats.pairs[upper, lower] = paired_bootstrap(a.ids, a.columns[headline], b.ids, b.columns[headline],
                                                             seed)
            else:  # a statistic recomputed on the same resamples of both runs
                stats.pairs[upper, lower] = paired_statistic_bootstrap(
                    a.ids, lambda order, run=a: run.statistic(headline, order), b.ids,
                    lambda order, run=b: run.statistic(headline, order), seed)
        except PairingError as error:
            raise PairingError(f"board {board['comparability_key']} ({label}): {upper} vs {lower}: {error}") from None
    for pair, adjusted in zip(stats.pairs, holm([t.p_value for t in stats.pairs.values()]), strict=True):
        stats.adjusted[pair] = adjusted
    if stats.tested:
        groups = tie_groups([stats.adjusted[pair] for pair in stats.adjacent], ALPHA)
        stats.groups = {run_id: group_label(g) for run_id, g in zip(stats.tested, groups, strict=True)}
    stats.disagreements = metric_disagreements(board)
    return stats


def metric_disagreements(board: dict[str, Any]) -> list[tuple[str, float, int]]:
    """Metrics whose order of the ranked backbones differs from the headline's: Kendall τ-b < 1.

    Each metric is oriented by its direction first, so τ = 1 means "the same order". Only ranked rows
    with both values count; a metric that is constant over them orders nothing and is not reported.
    """
    headline = board["headline_metric"]
    ranked = [row for row in board["rows"] if row["rank"] is not None]
    found = []
    for metric in board["metrics"]:
        name, higher = metric["metric"], metric["higher_is_better"]
        if name == headline or higher is None:
            continue
        rows = [r for r in ranked if name in r["metrics"] and headline in r["metrics"]]
        if len(rows) < 2:
            continue
        sign = 1.0 if board["higher_is_better"] else -1.0
        x = np.array([sign * r["metrics"][headline] for r in rows])
        y = np.array([(1.0 if higher else -1.0) * r["metrics"][name] for r in rows])
        tau = float(kendall_tau_b(x, y))
        if not math.isnan(tau) and tau < 1.0 - 1e-12:
            found.append((name, tau, len(rows)))
    return found


def _rows(con: duckdb.DuckDBPyConnection) -> list[CrossTaskRow]:
    """Rows in display order: pretrained rows by how many boards their mean covers (most first), rows with the
    same boards together, then by that mean (best first); controls last. A mean compares rows only over the
    same boards, so the table says how many boards each mean covers."""
    rows = []
    for coverage in db_crosstask.row_coverage(con):
        ranks, missing = coverage["ranks"], coverage["missing"]
        aggregate = None
        if not coverage["control"] and ranks:
            aggregate = math.fsum(ranks) / len(ranks)  # fsum: exact, whatever order the values came in
        rows.append(CrossTaskRow(coverage["backbone_name"], coverage["layers"], coverage["row_label"],
                                 coverage["control"], aggregate, missing, coverage["baseline"]))
    # rows missing the same boards are adjacent: their means are over the same boards
    return sorted(rows, key=lambda r: (r.control, len(r.missing), sorted(r.missing), r.aggregate is None,
                                       r.aggregate or 0.0, r.label))


def oriented_columns(columns: list[dict[str, Any]], cells: dict[tuple[str, str, str], dict[str, Any]]
                     ) -> dict[str, dict[tuple[str, str], float]]:
    """Per board key: {(backbone name, layers): headline value, sign-flipped where lower is better}, pretrained
    rows only: what rank agreement and proxy validity compare."""
    oriented = {}
    for board in columns:
        sign = 1.0 if board["higher_is_better"] else -1.0
        key = board["comparability_key"]
        oriented[key] = {(name, layers): sign * cell["headline_value"]
                         for (name, layers, cell_key), cell in cells.items()
                         if cell_key == key and not cell["control"] and cell["headline_value"] is not None}
    return oriented


def _agreement(
    columns: list[dict[str, Any]], cells: dict[tuple[str, str, str], dict[str, Any]]
) -> dict[tuple[str, str], Correlation]:
    """Spearman/Kendall between every pair of table columns over the pretrained rows (backbone and layer set)
    in both.

    Headline values are oriented so that higher is better on both sides: a positive correlation means
    the boards agree. Controls are left out: being bad everywhere, they would inflate agreement.
    """
    oriented = oriented_columns(columns, cells)
    agreement = {}
    for i, first in enumerate(columns):
        for second in columns[i:]:
            a, b = oriented[first["comparability_key"]], oriented[second["comparability_key"]]
            common = sorted(a.keys() & b.keys())
            seed = derived_seed("agreement", *sorted((first["comparability_key"], second["comparability_key"])))
            agreement[first["comparability_key"], second["comparability_key"]] = rank_correlation(
                [a[name] for name in common], [b[name] for name in common], seed
            )
    return agreement
