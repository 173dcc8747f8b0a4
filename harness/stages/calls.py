"""Run a pipeline stage from Python exactly as the generated dvc.yaml runs it: the stage's structure (code
module, reading tasks, dataset, feature grid) derived from params.yaml by `harness.pipeline.topology`.

For `verify`, the Python API and tests; DVC stages never import this module (it reaches every registry).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.config import Params
from harness.datasets.manifest import Manifest
from harness.pipeline import topology
from harness.runs.fewshot import stage_run_ids, stage_shots
from harness.runs.probe_run import job_from_params
from harness.runs.records import Record
from harness.stages import collect as collect_stage
from harness.stages import extract as extract_stage
from harness.stages import prepare as prepare_stage
from harness.stages import probe as probe_stage
from harness.stages import site as site_stage
from harness.stages.probe import fewshot_metrics

if TYPE_CHECKING:
    from harness.heads.file import SavedHead

__all__ = ["collect", "extract", "fewshot_metrics", "prepare", "probe", "site", "stage_run_ids", "stage_shots"]


def prepare(dataset: str, params: Params) -> Manifest:
    return prepare_stage.run(dataset, params, topology.dataset_code(params, dataset),
                             topology.dataset_tasks(params, dataset))


def extract(grid: str, backbone: str, dataset: str, params: Params, prune: bool = True) -> dict:
    reads = [r.spell() for r in topology.backbone_reads(params, grid, dataset, backbone)]
    return extract_stage.run(grid, backbone, dataset, params, topology.backbone_code(backbone), reads, prune)


def probe(grid: str, task: str, backbone: str, params: Params, saved_head: SavedHead | None = None) -> list[Record]:
    return probe_stage.run(job_from_params(params, grid, task, backbone), params, topology.probe_code(task),
                           saved_head)


def collect(params: Params) -> list[Record]:
    return collect_stage.run(params)


def site() -> list[Path]:
    return site_stage.run()
