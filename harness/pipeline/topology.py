"""The pipeline's structure, derived from params.yaml and the registries: which stages exist and what each
one is told on its command line (the specs themselves are built from it in `harness.pipeline.stage_specs`).

A stage reads *values* from params.yaml (declared as DVC params, so `dvc exp run -S` works) and gets its
*structure* on the command line from the generated dvc.yaml: which grid, task, dataset and backbone it is,
which code module defines what it runs, which tasks read its output. The generator (`harness.pipeline.generate`),
the CLI and `verify` all derive that structure here, so a stage run from Python is the stage DVC runs.
"""

from __future__ import annotations

from harness.core.config import Params
from harness.core.registry import module_path
from harness.core.run_key import BackboneRef
from harness.runs.feature_reads import FeatureRead


def feature_readers(params: Params, grid: str, dataset: str) -> list[tuple[str, str]]:
    """(grid, task) pairs that read the features `grid` extracts from `dataset` (its own tasks, and those of
    grids that take them through `features_from`), in params.yaml order."""
    readers = []
    for name, spec in params.grids.items():
        if spec.feature_grid(name, dataset) != grid:
            continue
        readers += [(name, task) for task, d in spec.tasks.items() if d == dataset]
    return readers


def feature_reads(params: Params, grid: str, dataset: str) -> list[FeatureRead]:
    from harness.probes import get_probe

    reads = []
    for reader, task in feature_readers(params, grid, dataset):
        spec = get_probe(task)
        reads.append(FeatureRead(reader, task, spec.feature_mode, spec.fit))
    return sorted(reads, key=lambda r: (r.grid, r.task))


def backbone_reads(params: Params, grid: str, dataset: str, backbone: str) -> list[FeatureRead]:
    """The reads one backbone's extraction serves. Only the grids that list the backbone read its features:
    another grid's layer set (scenes_layers' stride16) is not asked of a backbone that grid never probes (a ViT
    has no stride-16 layer)."""
    spelled = BackboneRef.parse(backbone).spelled
    return [r for r in feature_reads(params, grid, dataset)
            if r.grid == grid or spelled in {BackboneRef.parse(b).spelled for b in params.grids[r.grid].backbones}]


def extract_jobs(params: Params) -> list[tuple[str, str, str]]:
    """(grid, dataset, backbone) of every extract stage: each grid extracts the datasets its own tasks read
    (unless it takes them from another grid) for each of its backbones."""
    jobs = []
    for grid, spec in params.grids.items():
        for dataset in spec.datasets:
            if spec.feature_grid(grid, dataset) == grid:
                jobs += [(grid, dataset, backbone) for backbone in spec.backbones]
    return jobs


def dataset_tasks(params: Params, dataset: str) -> list[str]:
    """Every `grid:task` that reads `dataset` (their split parameters are what prepare checks)."""
    return sorted({f"{grid}:{task}" for grid, spec in params.grids.items() for task, d in spec.tasks.items()
                   if d == dataset})


def backbone_code(backbone: str) -> str:
    """Project-relative path of the module that registers a backbone (its family module or plugin)."""
    from harness.backbones import BACKBONES

    return module_path(BACKBONES.module_of(BackboneRef.parse(backbone).arch)).as_posix()


def probe_code(task: str) -> str:
    from harness.probes import PROBES

    return module_path(PROBES.module_of(task)).as_posix()


def dataset_code(params: Params, dataset: str) -> str:
    from harness.datasets.kinds import DATASET_KINDS

    return module_path(DATASET_KINDS.module_of(params.datasets[dataset]["kind"])).as_posix()

