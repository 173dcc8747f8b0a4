"""Your backbone beside a committed board: `visbench-harness score backbone=NAME board=B-1550` (or `harness.score`).

The board's own task, dataset (a params.yaml dataset: the same contents, so the same dataset identity), split,
protocol parameters and pooling come from its committed records; the run goes through `harness.run` into the user
workspace (user/), never into the corpus. The board is then ranked again with your row in it, by the
leaderboard's own code (intervals from per-sample scores, paired bootstrap tests, tie groups), and printed; the
user site (user/docs) shows every board your user runs land on with the committed rows beside them.

Your rows are named `NAME@yours` and their run ids start `yours_`, so a backbone already on the board shows twice,
once as committed and once as yours. `promote run=RUN_ID` remains the way onto the leaderboard itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from harness.api import DEFAULT_WORKSPACE
from harness.core import paths
from harness.core.config import ConfigError
from harness.core.hashing import canonical_json
from harness.leaderboard.queries.comparability import comparability_fields, comparability_key
from harness.leaderboard.sitemap import page_stem
from harness.leaderboard.statistics.analysis import board_codes, board_names
from harness.runs.records import Record, read_records
from harness.user.answer import Headline, headline_table, headlines

log = logging.getLogger("visbench")
YOURS = "@yours"  # appended to your rows' backbone names when they stand beside committed ones
RUN_PREFIX = "yours_"


@dataclass(frozen=True)
class Board:
    key: str  # comparability key
    records: list[Record]  # its committed full-split records
    code: str = ""  # "B-1550": the site's code (`board_codes`: more digits only where two would clash)
    title: str = ""  # the site's title (`board_names`): what the board is, told apart from its neighbours

    @property
    def first(self) -> Record:
        return self.records[0]

    def describe(self) -> str:
        return f"{self.code} {self.title}"


def _board_fields(key: str, record: Record) -> dict[str, object]:
    """What `board_names` reads of a board, from one of its records (the columns `harness.leaderboard.queries.db`
    keeps)."""
    return {"comparability_key": key, "task": record.task, "dataset_name": record.dataset.name,
            "split": record.dataset.split, "protocol": record.protocol,
            "protocol_params": canonical_json(record.protocol_params),
            "dataset_params": canonical_json(record.dataset.params), "pooling_requested": record.pooling_requested,
            "feature_mode": record.feature_mode, "precision": record.precision}


def committed_boards(corpus: list[Record] | None = None) -> dict[str, Board]:
    """Every board of the committed corpus by comparability key (full-split ok runs; few-shot runs are on none),
    with the code and title the site gives it."""
    if corpus is None:  # a project that has never collected a run has no boards
        corpus = read_records(paths.CORPUS) if paths.CORPUS.is_file() else []
    grouped: dict[str, list[Record]] = {}
    for record in corpus:
        if record.status == "ok" and record.k_shot is None and record.dataset is not None:
            grouped.setdefault(comparability_key(record), []).append(record)
    codes = board_codes(sorted(grouped))
    names = board_names([_board_fields(key, records[0]) for key, records in sorted(grouped.items())])
    return {key: Board(key, records, codes[key], names[key][1]) for key, records in sorted(grouped.items())}


def boards_table(boards: dict[str, Board]) -> str:
    """`board=?`: one line per board (code, runs, title), aligned, by task then title."""
    if not boards:
        return "no boards: the committed corpus (leaderboard/corpus.jsonl) has no full-split run yet"
    rows = [("Board", "Runs", "What it ranks")] + [
        (board.code, str(len(board.records)), board.title)
        for board in sorted(boards.values(), key=lambda b: (b.first.task, b.title))]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(f"{row[0].ljust(widths[0])}  {row[1].rjust(widths[1])}  {row[2]}" for row in rows)


def find_board(spec: str, corpus: list[Record] | None = None) -> Board:
    """A board by its code (`B-1550`) or a prefix of its comparability key; a one-line error otherwise, naming the
    closest codes and `board=?` (which lists them all)."""
    boards = committed_boards(corpus)
    prefix = spec.removeprefix("B-").removeprefix("b-").lower()
    found = [board for key, board in boards.items() if prefix and key.startswith(prefix)]
    if len(found) == 1:
        return found[0]
    if not boards:
        raise ConfigError(f"board={spec}: the committed corpus has no board yet (leaderboard/corpus.jsonl)")
    if found:
        listed = "; ".join(board.describe() for board in found)
        raise ConfigError(f"board={spec} matches several boards: {listed}; give more digits of the code")
    raise ConfigError(f"board={spec} is no board of the committed corpus; `board=?` lists the {len(boards)} boards "
                      "with their codes and titles")


@dataclass(frozen=True)
class ScoreResult:
    """What `score` answers: your record on the board, the board ranked again with your row in it (its table as
    the site renders it), and your headline with its 95% interval and the paired verdict against the board's best
    committed row (or its control). `print(result)` shows what the CLI prints."""

    record: Record  # yours, as written under the workspace (its own run id)
    board: Board
    table: list[str]  # the board's Markdown table lines, your row named NAME@yours
    headline: Headline

    def __str__(self) -> str:
        return "\n".join([f"{self.board.describe()}, with {self.record.backbone_name}{YOURS} ranked beside its "
                          "committed rows:", *self.table, "", headline_table([self.headline])])


def score(backbone: str, board: str, *, layers: object = None, device: str | None = None,
          workspace: str | Path = DEFAULT_WORKSPACE) -> ScoreResult:
    """Run `backbone` on the board's task, dataset and protocol into `workspace`, and rank it there. A run that
    lands on another board (your copy of the dataset differs, say) is refused, naming what differs."""
    from harness.api import run
    from harness.leaderboard.site.build import rendered_pages

    target = find_board(board)
    record = target.first
    options: dict[str, object] = {**record.protocol_params, "layers": layers}
    if record.feature_mode == "pooled":
        options["pooling"] = record.pooling_requested
    log.info("score: %s on %s", backbone, target.describe())
    result = run(backbone, record.task, record.dataset.name, workspace=workspace, device=device, **options)
    mine = result.record
    if comparability_key(mine) != target.key:
        theirs, ours = comparability_fields(record), comparability_fields(mine)
        differ = ", ".join(f"{name} ({theirs.get(name)!r} on the board, {ours.get(name)!r} here)"
                           for name in sorted(set(theirs) | set(ours)) if theirs.get(name) != ours.get(name))
        raise ConfigError(f"{backbone} ran, but not on {target.code}: {differ}; the run is in {result.record_path}")
    beside = beside_boards([mine])
    (headline,) = headlines(beside, 1)
    return ScoreResult(mine, target, board_table(rendered_pages(beside), target), headline)


def beside_boards(user: list[Record], corpus: list[Record] | None = None) -> list[Record]:
    """What the user site renders: your records, renamed so they never collide with a committed run, with every
    committed record of each board they land on (per-sample paths are project-relative on both sides)."""
    boards = committed_boards(corpus)
    mine, theirs = [], []
    for record in user:
        key = comparability_key(record)
        if key in boards:
            theirs += [r for r in boards[key].records if r not in theirs]
            named = record.backbone_name + YOURS
            backbone = record.backbone.model_copy(update={"name": named}) if record.backbone else None
            record = record.model_copy(update={"run_id": RUN_PREFIX + record.run_id, "backbone_name": named,
                                               "backbone": backbone})
        mine.append(record)
    return [*theirs, *mine]


def board_table(pages: dict[str, str | bytes], board: Board) -> list[str]:
    """The board's table as the site renders it (rank, row, headline with its interval, tie group, …)."""
    page = pages[f"tasks/{page_stem(board.first.task)}.md"]
    assert isinstance(page, str)
    section = page.split(f"{{ #board-{board.key} }}", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("|")]
