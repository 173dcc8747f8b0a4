"""A board's floor: the score a row must beat to be ranked, the best of its chance rows and image-blind baselines.

A backbone whose probe scores no better than a predictor that never looks at the image has shown nothing about
its features, so ranking it above another such row would order noise: it is shown on its board but not ranked
(`db`'s `board_rows` leaves it out of the ranking and places it last in the cross-task table), and a board
where no row clears its floor says so at its top. The floor is the most demanding of:

- the board's chance rows (`harness.leaderboard.statistics.chance`: analytic, from the board's labels and fields);
- image-blind baselines its runs record themselves, which depend on the targets alone so every run of the board
  records the same value:
  - a binary segmentation's all-background prediction (`baseline_iou`, the per-image column the dense metrics
    write beside `iou`);
  - surface normals' training-split mean normal predicted everywhere: the run scores it and, when the head does not
    beat it, says its value in the near-chance warning (`harness.probes.dense.normals`; the warning is the one
    place the record carries it, so it is read from there, to the warning's three decimals).

A row *clears* the floor when its headline is strictly better, in the board's direction. Runs that disagree on an
image-blind value (they cannot, unless records were edited) give no floor from it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.leaderboard.statistics.chance import chance_rows

# metric -> (image-blind metric every run of the board records, what it is)
RECORDED_BASELINES = {"iou": ("baseline_iou", "the all-background prediction")}
# harness.probes.dense.normals._near_chance's wording (tests/test_floors.py checks the two agree)
NORMALS_PRIOR = re.compile(r"^near chance: (?P<metric>\S+) \S+ against (?P<value>[0-9.]+) for the image-blind prior")
NORMALS_PROTOCOL = "probe3d-surface-normal"
_AGREE = 1e-9  # runs of one board recording one image-blind value agree to rounding


@dataclass(frozen=True)
class Floor:
    value: float
    source: str  # what scores it: "chance (uniform guess)", "the all-background prediction", ...


def image_blind(board: dict[str, Any], warnings: Mapping[str, Sequence[str]]) -> list[Floor]:
    """The image-blind baselines the board's runs record for its headline (see the module's docstring); `warnings`:
    each run's warnings (`Record.warnings`), by run id."""
    headline = board["headline_metric"]
    rows = board.get("rows", [])
    floors = []
    if headline in RECORDED_BASELINES:
        name, what = RECORDED_BASELINES[headline]
        values = [row["metrics"].get(name) for row in rows]
        if values and None not in values and max(values) - min(values) <= _AGREE * max(1.0, abs(values[0])):
            floors.append(Floor(values[0], what))
    if board["protocol"].split("/")[0] == NORMALS_PROTOCOL:
        found = {float(match["value"]) for row in rows for warning in warnings.get(row["run_id"], ())
                 if (match := NORMALS_PRIOR.match(warning)) and match["metric"] == headline}
        if len(found) == 1:
            floors.append(Floor(found.pop(), "the image-blind prior (the training split's mean normal everywhere)"))
    return floors


def board_floor(board: dict[str, Any], sample_ids: list[str] | None, warnings: Mapping[str, Sequence[str]]
                ) -> Floor | None:
    """The most demanding of the board's chance rows and image-blind baselines on its headline; None without
    either, or for a board without a direction."""
    higher = board.get("higher_is_better")
    if higher is None:
        return None
    headline = board["headline_metric"]
    candidates = [Floor(row.metrics[headline], f"chance ({row.predictor})") for row in chance_rows(board, sample_ids)]
    candidates += image_blind(board, warnings)
    if not candidates:
        return None
    # the most demanding; on equal values the first named (chance before a recorded baseline) says what it is
    return max(candidates, key=lambda floor: floor.value if higher else -floor.value)


def clears(value: float | None, floor: Floor | None, higher_is_better: bool) -> bool:
    """Whether a headline value is strictly better than the floor (True without a floor)."""
    if floor is None:
        return True
    if value is None:
        return False
    return value > floor.value if higher_is_better else value < floor.value
