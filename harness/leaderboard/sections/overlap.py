"""What the class-overlap protocol (`knn-class-overlap/v1`) adds to the site: on its boards, where neighbourhood
overlap and a linear probe's accuracy order the same rows differently; on its run pages, the overlap per class
and the class pairs whose neighbourhoods mix most.

The linear probe compared with is the classification board (`linear-probe-adamw/*`) of the same dataset identity,
split, pooling and precision, rows matched by backbone identity and layer set: the same features, one read
without training, one through a trained hyperplane.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.leaderboard.markdown import backbone_link, board_link, cell, number, table
from harness.leaderboard.statistics.analysis import Analysis, RunSamples
from harness.leaderboard.statistics.bootstrap import average_ranks, kendall_tau_b
from harness.leaderboard.statistics.chance import sample_class
from harness.probes.class_overlap import NEIGHBOURS, pairwise, per_class
from harness.probes.statistics.classification import LABEL

OVERLAP_FAMILY = "knn-class-overlap"
LINEAR_FAMILY = "linear-probe-adamw"
RANK_GAP = 2  # positions between a row's two ranks that the board calls a disagreement
TOP_PAIRS = 5  # class pairs shown on a run page


def _family(board: dict[str, Any]) -> str:
    return board["protocol"].split("/")[0]


def linear_board(board: dict[str, Any], analysis: Analysis) -> dict[str, Any] | None:
    """The classification board over the same features as an overlap board, if the corpus has one."""
    same = ("dataset_identity", "split", "pooling_requested", "precision")
    return next((b for b in analysis.boards if _family(b) == LINEAR_FAMILY
                 and all(b[name] == board[name] for name in same)), None)


def overlap_versus_linear(board: dict[str, Any], analysis: Analysis) -> list[str]:
    """The board's paragraph and table on overlap against linear top-1 (empty for other protocols or without a
    classification board of the same features)."""
    if _family(board) != OVERLAP_FAMILY:
        return []
    linear = linear_board(board, analysis)
    if linear is None:
        return ["No classification board reads the same features, so overlap is not compared with a linear "
                "probe here.", ""]
    by_row = {(r["backbone_identity"], r["layers"]): r for r in linear["rows"]}
    pairs = [(row, by_row[row["backbone_identity"], row["layers"]]) for row in board["rows"]
             if (row["backbone_identity"], row["layers"]) in by_row]
    pairs = [(o, li) for o, li in pairs if o["metrics"].get("overlap") is not None
             and li["metrics"].get("top1") is not None]
    if len(pairs) < 3:
        return []
    overlap = np.array([o["metrics"]["overlap"] for o, _ in pairs])
    top1 = np.array([li["metrics"]["top1"] for _, li in pairs])
    # rank 1 = least overlap, and rank 1 = best top-1; tied values share their mean rank
    overlap_rank, linear_rank = average_ranks(overlap), average_ranks(-top1)
    tau = float(kendall_tau_b(-overlap, top1))
    code = analysis.stats[linear["comparability_key"]].code
    where = board_link(code, linear["task"], linear["comparability_key"], "../")
    rows = []
    for (row, _), value, accuracy, by_overlap, by_linear in zip(pairs, overlap, top1, overlap_rank, linear_rank,
                                                                strict=True):
        gap = by_linear - by_overlap
        reading = ("neighbourhoods separate its classes better than a hyperplane does" if gap >= RANK_GAP else
                   "a hyperplane finds what its neighbourhoods mix" if gap <= -RANK_GAP else "agree")
        rows.append([backbone_link(row["backbone_name"], "../", row["row_label"]), number(value), _rank(by_overlap),
                     number(accuracy), _rank(by_linear), reading])
    return [f"Overlap against the linear probe on the same features (board {where}, top-1): Kendall τ-b "
            f"{tau:.2f} over {len(pairs)} rows, least overlap and best top-1 ranked first. A row whose ranks differ "
            f"by {RANK_GAP} or more is named: classes that neighbourhoods keep apart but a linear head does not "
            "separate (structure a linear head cannot use), or the reverse.", "",
            *table(["Backbone", "Overlap", "Overlap rank", "Linear top-1", "Linear rank", "Reading"], rows), ""]


def _rank(value: float) -> str:
    return f"{value:g}"


def class_names(samples: RunSamples) -> dict[int, str]:
    """Class index → name, from the per-sample ids (`<class>/<image>`, the layout every class-folder dataset
    writes); the index where an id has no folder."""
    labels = samples.auxiliary[LABEL].astype(np.int64)
    names = {}
    for sample_id, label in zip(samples.ids, labels, strict=True):
        names.setdefault(int(label), sample_class(sample_id) or str(label))
    return names


def overlap_detail(run_id: str, analysis: Analysis) -> list[str]:
    """A class-overlap run page's section: overlap per class and the most mixed class pairs."""
    samples = analysis.samples.get(run_id)
    if samples is None or LABEL not in samples.auxiliary or not any(
            name.startswith(NEIGHBOURS) for name in samples.auxiliary):
        return []
    columns = {**samples.columns, **samples.auxiliary}
    names, labels = class_names(samples), samples.auxiliary[LABEL].astype(np.int64)
    shares = pairwise(columns)
    classes = sorted(per_class(columns).items(), key=lambda item: (-item[1], item[0]))
    mixed = sorted(((shares[a, b] + shares[b, a]) / 2, a, b) for a in names for b in names if a < b)[::-1]
    return ["## Class overlap", "",
            "Per class: the mean share of its images' neighbours that are of another class. Per pair: the share of "
            "each class's neighbours that are of the other, averaged over the two; the most mixed pairs first.", "",
            *table(["Class", "Images", "Overlap"],
                   [[cell(names[c]), str(int((labels == c).sum())), number(value)] for c, value in classes]), "",
            *table(["Class", "Class", "Pairwise overlap"],
                   [[cell(names[a]), cell(names[b]), number(value)] for value, a, b in mixed[:TOP_PAIRS]]), ""]
