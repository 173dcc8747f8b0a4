"""Where everything on the site lives: every page's and figure's path (relative to docs/) and every anchor, in one
place. Pages link with these, the site build writes to them, and figures and data files are named by them, so a
path changes here or nowhere."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SAFE_STEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
DATA_DIR = "plots/data"  # the data behind figures (CSV), for DVC's plots and for readers
PROXY_DATA = f"{DATA_DIR}/proxy_validity.csv"
BOARD_FIGURES, PR_FIGURES, COST_FIGURES, PROXY_FIGURES = "plots/boards", "plots/pr", "plots/costs", "plots/proxy"


def page_stem(name: str) -> str:
    """File stem for a task, backbone or run page: the name as is, with "@" spelled "-at-"."""
    stem = name.replace("@", "-at-")
    if not _SAFE_STEM.fullmatch(stem):
        raise ValueError(f"cannot make a page file name from {name!r}: use letters, digits and ._+-@")
    return stem


# -- pages -------------------------------------------------------------------------------------------------------


def task_page(task: str) -> str:
    return f"tasks/{page_stem(task)}.md"


def backbone_page(name: str) -> str:
    return f"backbones/{page_stem(name)}.md"


def level_page(level: str) -> str:
    return f"levels/{level}.md"


def run_path(run: Mapping[str, Any]) -> str:
    """Where a run's provenance page lives, relative to docs/: `runs/<task>/<run>.md`; a few-shot run one folder
    deeper, `runs/<task>/few-shot-<dataset>-<split>/`, so the navigation lists a task's full-split runs and
    folds each learning curve's many (k, seed) runs into one entry. `run` needs run_id, task and k_shot,
    and for a few-shot run dataset_name and split (None before the dataset was read)."""
    stem, task = page_stem(run["run_id"]), page_stem(run["task"])
    if run.get("k_shot") is None:
        return f"runs/{task}/{stem}.md"
    folder = "few-shot" if run.get("dataset_name") is None else \
        f"few-shot-{page_stem(run['dataset_name'])}-{page_stem(str(run['split']))}"
    return f"runs/{task}/{folder}/{stem}.md"


# -- anchors -----------------------------------------------------------------------------------------------------


def protocol_anchor(protocol: str) -> str:
    """The explicit heading id docs/protocols.md gives a protocol: "linear-probe-adamw/v1" → "linear-probe-adamw-v1"."""
    return re.sub(r"[^a-z0-9]+", "-", protocol.lower()).strip("-")


def board_anchor(comparability_key: str) -> str:
    return f"board-{comparability_key}"


def curve_anchor(curve_key: str) -> str:
    return f"curve-{curve_key}"


# -- figures and the data behind them ----------------------------------------------------------------------------


def board_figure_path(key: str) -> str:
    """A board's chart."""
    return f"{BOARD_FIGURES}/{key}.svg"


def pr_figure_path(key: str) -> str:
    """A board's precision–recall figure."""
    return f"{PR_FIGURES}/{key}.svg"


def level_cost_figure_path(level: str) -> str:
    """A level's score-against-cost chart."""
    return f"{COST_FIGURES}/{level}.svg"


def proxy_figure_path(code: str) -> str:
    return f"{PROXY_FIGURES}/{code}.svg"


def curve_plot_path(curve: Mapping[str, Any]) -> str:
    """A learning curve's figure."""
    return f"plots/curve-{page_stem(curve['task'])}-{curve['curve_key']}.svg"


def curve_data_path(curve: Mapping[str, Any]) -> str:
    return f"{DATA_DIR}/curves/{page_stem(curve['task'])}-{curve['curve_key']}.csv"


def board_distribution_path(code: str) -> str:
    """A board's score distribution (CSV)."""
    return f"{DATA_DIR}/boards/{code}.csv"
