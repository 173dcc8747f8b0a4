"""`visbench-harness help TASK`: what a task measures and what it needs, from its probe's own declarations.

The probe's spec (level, protocol, feature mode, headline and direction, few-shot unit, resampled statistics), its
parameter schema (each key's type and default beside the value params.yaml gives it), the data it reads (the
folder layout a user's own `data=DIR` must have, or the grids and datasets that run it), the metrics its committed
records report, and where its protocol is defined. Nothing here is typed per task.
"""

from __future__ import annotations

import inspect
import sys

from harness.core import paths
from harness.core.config import PARAMS_FILE, load_params
from harness.leaderboard.sitemap import protocol_anchor
from harness.probes import PROBES, get_probe
from harness.runs.own_data import LAYOUTS
from harness.runs.records import read_records


def task_help(task: str) -> str:
    spec = get_probe(task)  # an unknown task: one line naming the valid ones
    params = load_params() if PARAMS_FILE.is_file() else None
    lines = [f"{task}: {spec.level}-level probe, protocol {spec.protocol} "
             f"(docs/protocols.md#{protocol_anchor(spec.protocol)})"]
    doc = inspect.getdoc(sys.modules[PROBES.module_of(task)]) or ""  # the module that registered the probe
    if doc:
        lines += ["", doc.split("\n\n")[0]]
    direction = "lower" if spec.headline in spec.lower_is_better else "higher"
    lines += ["", f"headline: {spec.headline} ({direction} is better)"
              + (f"; or the `{spec.headline_param}` parameter's choice" if spec.headline_param else ""),
              f"features: {spec.feature_mode}" + (f", images fit by {spec.fit}" if spec.feature_mode == "dense" else "")
              + ("; computes on the run's device" if spec.uses_device else "; computes on the CPU")]
    if spec.fewshot_unit:
        lines.append(f"few-shot: k counts {spec.fewshot_unit.replace('_', ' ')}")
    if spec.statistics:
        lines.append("resampled from per-sample rows (intervals without a per-sample score): "
                     + ", ".join(sorted(spec.statistics)))
    given = dict(params.probes.get(task, {})) if params else {}
    lines += ["", f"parameters (probes.{task} in params.yaml):"]
    for name, field in spec.params.model_fields.items():
        default = "required" if field.is_required() else f"default {field.default!r}"
        value = f"params.yaml: {given[name]!r}" if name in given else "not set in params.yaml"
        lines.append(f"  {name:<18} {default}; {value}")
    lines += ["", "data:"]
    if spec.folder_layout:
        lines.append(f"  your own (data=DIR): {LAYOUTS[spec.folder_layout]}")
    else:
        lines.append("  a dataset made for it (name one from params.yaml; not a folder of your own)")
    if params:
        for grid, grid_spec in params.grids.items():
            if task in grid_spec.tasks:
                lines.append(f"  grid {grid}: dataset {grid_spec.tasks[task]}, "
                             f"backbones {', '.join(grid_spec.backbones)}")
    corpus = paths.CORPUS
    records = [r for r in read_records(corpus) if r.task == task] if corpus.is_file() else []
    if records:
        names = sorted({m for r in records for m in r.metrics})
        lines += ["", f"metrics in its {len(records)} committed record(s): {', '.join(names)}"]
    return "\n".join(lines)
