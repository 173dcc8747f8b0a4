"""The statistics behind the site, computed once per render from the boards and the per-sample files.

- per run and per-sample column: a bootstrap interval (`Analysis.intervals`);
- per board: its floor (`floors`: rows that do not beat chance or an image-blind baseline are not ranked); paired
  tests between its ranked rows, Holm-adjusted, and the verdicts and tie groups they imply (a difference is
  "better" only when the test clears it and it exceeds the rows' cross-CPU tolerance and, where a seed sweep
  measured one, the board's seed-to-seed margin); the smallest difference the
  board resolves; which device kinds computed it; whether its metrics order the backbones differently;
- across boards: the cross-task table (normalised rank of each backbone and layer set on each board) with
  its aggregate, each row's overall standing with a bootstrap interval over boards (`standing`), and rank
  agreement between boards.

Every seed is derived from what is measured (see `statistics.derived_seed`): an interval's and a paired test's from
the board and the per-sample files' contents, never a run's name, so the numbers do not depend on which page asks
first, on the order of the records, or on what a run is called.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import statistics as stats_lib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from harness.leaderboard.queries import crosstask, db, replicates
from harness.leaderboard.queries import samples as sample_tables
from harness.leaderboard.statistics.bootstrap import (
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
from harness.leaderboard.statistics.floors import Floor, board_floor
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

# A pair's verdict (`BoardStats.verdicts`): one row better, tied by the paired test (under the board's resolvable
# difference), or the test resolves it but the difference is within the larger of the two rows' cross-CPU
# tolerances on the headline (records' `tolerances`): the same run on another CPU could move it that far.
BETTER, TIED, TIED_TOLERANCE = "better", "tied", "tied within the cross-CPU tolerance"
# Or the test resolves it but the difference is within the board's seed margin: each row's head was trained from one
# probe seed, so two rows' difference moves by √2 × the seed-to-seed standard deviation a sweep measured
# (`queries.replicates`) when both heads are re-drawn; a difference inside 1.96 × that could be the heads' seeds alone.
TIED_SEED = "tied within the seed-to-seed spread"
SEED_MARGIN = 1.96 * math.sqrt(2.0)
# `Environment.device` is "cpu:MODEL:FLAGS:Nthreads" (or "cuda:MODEL:…"): what computed a run, but for the thread
# count, which changes no kernel's arithmetic, so boards compare the rest
_THREADS = re.compile(r":\d+threads$")


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
    floor: Floor | None = None  # what a row must beat to be ranked (`floors`)
    gated: list[str] = field(default_factory=list)  # row labels of pretrained rows that do not beat it
    tolerances: dict[str, float] = field(default_factory=dict)  # run id -> its record's headline tolerance
    verdicts: dict[tuple[str, str], str] = field(default_factory=dict)  # (upper, lower) -> BETTER, TIED, ...
    resolvable: float | None = None  # median half-width of the paired differences' 95% intervals
    devices: list[str] = field(default_factory=list)  # device kinds (`device_kind`) of the board's runs
    trains_head: bool = False  # its protocol trains a head from a seeded start: another seed, another head
    seed_spread: replicates.SeedSpread | None = None  # measured by a seed sweep, where one ran on this board

    @property
    def adjacent(self) -> list[tuple[str, str]]:
        return list(itertools.pairwise(self.tested))

    ranked: int = 0  # ranked pretrained rows (gated ones are not)

    @property
    def ranked_none(self) -> bool:
        """Whether the board has pretrained rows and a floor none of them beats."""
        return bool(self.gated) and self.ranked == 0

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


@dataclass(frozen=True)
class Standing:
    """A pretrained row's overall standing: its mean normalised rank with a bootstrap interval over boards."""

    row: CrossTaskRow
    covered: int  # boards it has a cell on
    interval: Interval | None  # 95% percentile interval of the mean over board resamples
    first: float  # share of resamples in which its mean is the best (or tied best) of its tier
    tier: tuple[str, ...]  # the boards it lacks: rows with the same tier are compared over the same boards


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
    standings: list[Standing] = field(default_factory=list)  # pretrained rows with a mean, in `rows`' order

    def board(self, key: str) -> dict[str, Any]:
        return next(b for b in self.boards if b["comparability_key"] == key)

    def sample_ids(self, board: dict[str, Any]) -> list[str] | None:
        """The per-sample ids a board's runs share (paired tests hold them equal), or None without samples."""
        return _sample_ids(board, self.samples)

    @property
    def agreement_columns(self) -> list[dict[str, Any]]:
        """The columns that share at least MIN_CORRELATION_N pretrained rows with another column: the only
        ones an agreement interval can be given for, so the only ones worth a place in the matrix."""
        keys = {key for pair, correlation in self.agreement.items() if pair[0] != pair[1]
                and correlation.n >= MIN_CORRELATION_N for key in pair}
        return [b for b in self.columns if b["comparability_key"] in keys]


def load_samples(con: duckdb.DuckDBPyConnection, records: list[Record], root: Path) -> dict[str, RunSamples]:
    """Per-sample scores of every ok run that has them, loaded into `con` (`queries.samples`) and checked
    against the records' metrics there; each column in its file's row order, which the bootstrap
    intervals resample."""
    sample_tables.load_samples_table(con, [r for r in records if r.status == "ok"], root)
    ids: dict[str, list[str]] = {}
    columns: dict[str, dict[str, np.ndarray]] = {}
    auxiliary: dict[str, dict[str, np.ndarray]] = {}
    units: dict[str, str] = {}
    for row in sample_tables.run_columns(con):
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


def _sample_ids(board: dict[str, Any], samples: dict[str, RunSamples]) -> list[str] | None:
    return next((samples[row["run_id"]].ids for row in board["rows"]
                 if row["run_id"] in samples and samples[row["run_id"]].ids), None)


def analyse(con: duckdb.DuckDBPyConnection, records: list[Record], root: Path) -> Analysis:
    samples = load_samples(con, records, root)
    # Floors need the boards (their labels, fields, runs' recorded baselines) and rank them in turn: the boards are
    # read once to find the floors, which `board_rows` then ranks by, and again ranked.
    warnings = {r.run_id: r.warnings for r in records}
    floors = {board["comparability_key"]: floor for board in db.boards(con)
              if (floor := board_floor(board, _sample_ids(board, samples), warnings)) is not None}
    db.set_floors(con, {key: (floor.value, floor.source) for key, floor in floors.items()})
    boards = db.boards(con)
    by_run = {r.run_id: r for r in records}
    keys = [(run_id, name) for run_id, run in samples.items() for name in sorted(run.columns)]
    jobs = [(samples[run_id].columns[name], interval_seed(samples[run_id].sha256, name)) for run_id, name in keys]
    intervals = dict(zip(keys, bootstrap_cis(jobs, workers=_cores()), strict=True))
    # metrics that are not means (macro-F1, ODS): recomputed per resample, with the seed a mean's interval has
    intervals |= {(run_id, name): statistic_ci(run.statistic(name), len(run.ids), interval_seed(run.sha256, name))
                  for run_id, run in samples.items() for name in sorted(run.statistics) if run.ids}
    names = board_names(boards)
    codes = board_codes([b["comparability_key"] for b in boards])
    spreads = replicates.seed_spreads(con)
    stats = {
        key: _board_stats(board, codes[key], *names[key], samples, floors.get(key), by_run, spreads.get(key))
        for board in boards
        for key in [board["comparability_key"]]
    }
    # the boards' order, filtered by queries.crosstask's rule (tasks' boards with a ranked row; no diagnostics)
    task_columns = set(crosstask.column_keys(con))
    columns = [b for b in boards if b["comparability_key"] in task_columns]
    cells = {(c["backbone_name"], c["layers"], c["comparability_key"]): c for c in crosstask.board_cells(con)}
    rows = _rows(con)
    return Analysis(boards, stats, intervals, columns, cells, rows, _agreement(columns, cells), samples,
                    standing(rows, [b["comparability_key"] for b in columns], cells))


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
    sharing both, then as few of the protocol or dataset parameters that differ as tell boards alike in those
    fields apart ("thresholds_px=[8.0, 16.0, 32.0]"), then the key if still needed; the title says what the board
    is: "task on dataset (split), protocol", plus pooling, features or precision where they tell it apart from the
    task's other boards, and every differing parameter where titles would still read alike."""
    by_name: dict[tuple[str, str], list[dict[str, Any]]] = {}
    by_task: dict[str, list[dict[str, Any]]] = {}
    by_key = {b["comparability_key"]: b for b in boards}
    for board in boards:
        by_name.setdefault((board["task"], str(board["dataset_name"])), []).append(board)
        by_task.setdefault(board["task"], []).append(board)
    labels: dict[str, str] = {}
    for (_task, dataset), group in by_name.items():
        varying = [(name, form) for name, form in _LABEL_FIELDS if len({str(b[name]) for b in group}) > 1]
        labels |= _told_apart({b["comparability_key"]: ", ".join([dataset, *(form.format(b[n]) for n, form in varying)])
                               for b in group}, by_key, fewest=True)
    titles: dict[str, str] = {}
    for task, group in by_task.items():
        texts = {}
        for board in group:
            extras = [form.format(board[name]) for name, form in _LABEL_FIELDS
                      if name in _TITLE_EXTRAS and len({str(b[name]) for b in group}) > 1]
            texts[board["comparability_key"]] = ", ".join(
                [f"{task} on {board['dataset_name']} ({board['split']})", board["protocol"], *extras])
        titles |= _told_apart(texts, by_key)
    return {key: (f"{by_key[key]['task']} ({labels[key]})", titles[key]) for key in by_key}


def _told_apart(texts: dict[str, str], boards: dict[str, dict[str, Any]], fewest: bool = False) -> dict[str, str]:
    """`texts` by comparability key, where two read alike each followed by the parameters that differ between
    them (`fewest`: only as many as tell them apart, those every board has first, so a short label still says what
    each board is), and the key only where even those are equal."""
    alike: dict[str, list[str]] = {}
    for key, text in texts.items():
        alike.setdefault(text, []).append(key)
    told = dict(texts)
    for keys in alike.values():
        if len(keys) > 1:
            differing = _differing_parameters([boards[key] for key in keys])
            if fewest:
                differing = _fewest(differing)
            told |= {key: ", ".join([texts[key], *(f"{name}={value}" for name, value in differing[key])])
                     for key in keys}
    clashing = {text for text in told.values() if list(told.values()).count(text) > 1}
    return {key: f"{text}, {key}" if text in clashing else text for key, text in told.items()}


def _fewest(differing: dict[str, list[tuple[str, str]]]) -> dict[str, list[tuple[str, str]]]:
    """The first parameters, in order (those every board has, then by name), that tell the boards apart."""
    names = list(dict.fromkeys(name for pairs in differing.values() for name, _ in pairs))
    everywhere = [n for n in names if all(n in dict(pairs) for pairs in differing.values())]
    chosen: list[str] = []
    for name in [*everywhere, *(n for n in names if n not in everywhere)]:
        chosen.append(name)
        shown = [tuple((n, dict(pairs).get(n)) for n in chosen) for pairs in differing.values()]
        if len(set(shown)) == len(shown):
            break
    return {key: [(n, v) for n, v in pairs if n in chosen] for key, pairs in differing.items()}


def _differing_parameters(boards: list[dict[str, Any]]) -> dict[str, list[tuple[str, str]]]:
    """Per board, (name, value) for each protocol parameter (then dataset parameter, "dataset name") whose value is
    not the same on all of `boards`, sorted by name; a parameter one board lacks is named on those with it."""
    parameters = {}
    for board in boards:
        protocol = json.loads(board["protocol_params"] or "{}")
        dataset = json.loads(board.get("dataset_params") or "{}")
        parameters[board["comparability_key"]] = {
            **{name: value for name, value in protocol.items()},
            **{f"dataset {name}": value for name, value in dataset.items()},
        }
    names = sorted({name for values in parameters.values() for name in values})
    differing = [name for name in names
                 if len({json.dumps(values.get(name), sort_keys=True) for values in parameters.values()}) > 1]
    return {key: [(name, _shown(values[name])) for name in differing if name in values]
            for key, values in parameters.items()}


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(", ", ": "))


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def device_kind(device: str) -> str:
    """What computed a run, from its record's `environment.device`, without the thread count."""
    return _THREADS.sub("", device)


def trains_head(protocol_params: str) -> bool:
    """Whether a protocol trains its head by gradient descent from a seeded start (its parameters name `epochs`):
    another probe seed gives another head, a spread no record measures yet."""
    return "epochs" in json.loads(protocol_params)


def verdict(test: PairedTest, adjusted: float, tolerance: float, seed_margin: float = 0.0) -> str:
    """BETTER only when the Holm-adjusted test resolves the pair, |difference| exceeds `tolerance` (the larger of the
    two rows' cross-CPU tolerances on the headline) and `seed_margin` (`seed_margin`: 0 where no sweep measured the
    board's seed spread); else TIED, TIED_TOLERANCE or TIED_SEED."""
    if adjusted >= ALPHA:
        return TIED
    if abs(test.difference) <= tolerance:
        return TIED_TOLERANCE
    if abs(test.difference) <= seed_margin:
        return TIED_SEED
    return BETTER


def seed_margin(spread: replicates.SeedSpread | None) -> float:
    """The difference two rows' heads could show from their probe seeds alone: SEED_MARGIN × the board's measured
    seed-to-seed standard deviation; 0 where no sweep ran on the board (its page says the spread is unmeasured)."""
    return SEED_MARGIN * spread.sd if spread is not None else 0.0


def resolvable_difference(tests: list[PairedTest]) -> float | None:
    """The median, over a board's tested pairs, of the half-width of the paired difference's 95% interval: about
    the smallest difference the board's samples resolve."""
    return stats_lib.median((t.high - t.low) / 2.0 for t in tests) if tests else None


def _board_stats(board: dict[str, Any], code: str, label: str, title: str, samples: dict[str, RunSamples],
                 floor: Floor | None = None, records: dict[str, Record] | None = None,
                 spread: replicates.SeedSpread | None = None) -> BoardStats:
    stats = BoardStats(code, label, title, floor=floor, seed_spread=spread)
    headline = board["headline_metric"]
    records = records or {}
    stats.gated = [row["row_label"] for row in board["rows"] if row.get("gated")]
    stats.ranked = sum(1 for row in board["rows"] if row["rank"] is not None)
    stats.tolerances = {row["run_id"]: records[row["run_id"]].tolerances.get(headline, 0.0)
                        for row in board["rows"] if row["run_id"] in records}
    stats.devices = sorted({device_kind(records[row["run_id"]].environment.device)
                            for row in board["rows"] if row["run_id"] in records})
    stats.trains_head = trains_head(board["protocol_params"])
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
        tolerance = max(stats.tolerances.get(pair[0], 0.0), stats.tolerances.get(pair[1], 0.0))
        stats.verdicts[pair] = verdict(stats.pairs[pair], adjusted, tolerance, seed_margin(spread))
    stats.resolvable = resolvable_difference(list(stats.pairs.values()))
    if stats.tested:
        # a row starts a new group only where the pair above it is BETTER: tie_groups reads p ≥ ALPHA as tied
        groups = tie_groups([ALPHA if stats.verdicts[pair] != BETTER else 0.0 for pair in stats.adjacent], ALPHA)
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
    for coverage in crosstask.row_coverage(con):
        ranks, missing = coverage["ranks"], coverage["missing"]
        aggregate = None
        if not coverage["control"] and ranks:
            aggregate = math.fsum(ranks) / len(ranks)  # fsum: exact, whatever order the values came in
        rows.append(CrossTaskRow(coverage["backbone_name"], coverage["layers"], coverage["row_label"],
                                 coverage["control"], aggregate, missing, coverage["baseline"]))
    # rows missing the same boards are adjacent: their means are over the same boards
    return sorted(rows, key=lambda r: (r.control, len(r.missing), sorted(r.missing), r.aggregate is None,
                                       r.aggregate or 0.0, r.label))


def standing(rows: list[CrossTaskRow], keys: list[str], cells: dict[tuple[str, str, str], dict[str, Any]],
             resamples: int = RESAMPLES) -> list[Standing]:
    """Each pretrained row's mean normalised rank with a 95% percentile interval from resampling the table's boards
    with replacement (`resamples` draws of as many boards as there are, seeded from the board keys alone); a
    resample that draws none of a row's boards leaves it out of that row's interval.

    Rows are compared only within a *tier*, the rows lacking the same boards (so their means are over the same
    boards): `first` is the share of resamples in which a row's mean is the best of its tier, ties included, on
    the same draws for every row. Rows keep `rows`' order (fullest coverage first)."""
    pretrained = [r for r in rows if not r.control and r.aggregate is not None]
    if not keys or not pretrained:
        return []
    keys = sorted(keys)  # the draws index boards in key order: the same boards give the same draws in any order
    rng = np.random.default_rng(derived_seed("standing", *keys))
    draws = rng.integers(0, len(keys), size=(resamples, len(keys)))
    weights = np.stack([np.bincount(d, minlength=len(keys)) for d in draws]).astype(np.float64)  # (B, boards)
    means = []  # per row of `pretrained`: its mean on each resample (NaN where none of its boards was drawn)
    for row in pretrained:
        ranks = np.array([cells[(row.backbone_name, row.layers, key)]["normalised_rank"]
                          if (row.backbone_name, row.layers, key) in cells else np.nan for key in keys])
        present = ~np.isnan(ranks)
        drawn = weights[:, present].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            means.append(np.where(drawn > 0, weights[:, present] @ ranks[present] / drawn, np.nan))
    tiers: dict[tuple[str, ...], list[int]] = {}
    for index, row in enumerate(pretrained):
        tiers.setdefault(tuple(sorted(row.missing)), []).append(index)
    # fmin: NaN only where every row of the tier is (the same draws miss the same boards), without a warning
    best = {tier: np.fmin.reduce(np.stack([means[i] for i in members]), axis=0) for tier, members in tiers.items()}
    out = []
    for index, row in enumerate(pretrained):
        tier = tuple(sorted(row.missing))
        mean = means[index]
        defined = np.isfinite(mean)
        low, high = (float(v) for v in np.percentile(mean[defined], [2.5, 97.5])) if defined.any() else (None, None)
        interval = None if low is None else Interval(float(row.aggregate), low, high)
        # exact equality counts as tied best: means over the same draws of the same boards can coincide
        first = float(np.mean(mean[defined] <= best[tier][defined])) if defined.any() else 0.0
        out.append(Standing(row, len(keys) - len(row.missing), interval, first, tier))
    return out


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
