"""Every stage of the pipeline as a spec (harness.pipeline.stage_model), built here once from params.yaml, the
registries and the structure `harness.pipeline.topology` derives; the generator serialises these, and nothing
else makes a stage.

Every stage lists exactly what it reads:
- code: its role's fingerprint, one file naming the SHA-256 of every file its entry module and the module
  defining what it runs import (`harness.pipeline.fingerprints`), rewritten by the `codedeps` stage;
- data: the dataset folder (prepare), the prepared dataset and the features (extract, probe);
- params: the values it reads (a probe's block, the layers and pooling of the tasks reading a feature set,
  the split names of the tasks reading a dataset); structure (which tasks read what, which module defines a
  backbone) is on its command line, so a structural edit changes the command and DVC re-runs it.

Stage names: `prepare-DATASET`, `extract-GRID-DATASET@BACKBONE`, `GRID-TASK@BACKBONE` (the run id of its
record), `collect`, `site`; unique across the files (harness.core.dvcfiles says which file holds which).
"""

from __future__ import annotations

from pathlib import Path

from harness.core import dvcfiles, paths
from harness.core.config import PARAMS_FILE, Params, probe_block
from harness.core.contents import CONTENTS_NAME, contents_path
from harness.core.run_key import BackboneRef
from harness.datasets.kinds import data_paths
from harness.pipeline import fingerprints
from harness.pipeline.stage_model import Out, RowKey, StageSpec
from harness.pipeline.topology import (
    backbone_code,
    backbone_reads,
    dataset_code,
    dataset_tasks,
    feature_reads,
    probe_code,
)

# frozen releases (harness.leaderboard.queries.releases), read by the site stage
RELEASES_FOLDER = Path("docs/releases")
BENCHMARK_RESULTS = Path("benchmarks/results")  # what task pages quote (harness.leaderboard.sources.references)
SETTINGS_READ_BY_EXTRACT = ("settings.precision", "settings.batch_size", "settings.seed")


def _kept(path: str) -> Out:
    """A git-tracked output DVC never deletes before a run (why: at each use)."""
    return Out(path, cache=False, persist=True)


def _param_keys(params: Params, grid: str, task: str, keys: list[str] | None = None) -> list[str]:
    """The params.yaml keys holding `task`'s parameters `keys` (all when None) as `grid` runs it: its
    probes.<task> block's, and the grid's override of them where it has one (DVC params must exist)."""
    base = params.probes.get(task, {})
    override = params.grids[grid].probes.get(task, {})
    if keys is None:
        return [f"probes.{task}", *([f"grids.{grid}.probes.{task}"] if override else [])]
    found = [f"probes.{task}.{key}" for key in keys if key in base]
    return found + [f"grids.{grid}.probes.{task}.{key}" for key in keys if key in override]


def _probe_params(params: Params, task: str, grid: str) -> list[str]:
    reads = _param_keys(params, grid, task)
    if params.grids[grid].fewshot is not None:
        return [*reads, f"grids.{grid}.fewshot"]  # each (k, seed) run's seed comes from here, not settings.seed
    return [*reads, "settings.seed"]


def _prepare_stage(params: Params, dataset: str) -> StageSpec:
    tasks = dataset_tasks(params, dataset)
    code = dataset_code(params, dataset)
    split_params: list[str] = []
    for entry in tasks:
        grid, _, task = entry.partition(":")
        keys = [k for k in probe_block(params, grid, task) if k.endswith(("_split", "_splits"))]
        split_params += [key for key in _param_keys(params, grid, task, keys) if key not in split_params]
    return StageSpec(
        paths.prepare_stage_name(dataset), dvcfiles.ROOT_FILE,
        f"python -m harness.stages.prepare {dataset} --code {code} --tasks {','.join(tasks)}",
        deps=(*data_paths(params.datasets[dataset]), fingerprints.role_file("prepare", code)),
        params=(f"datasets.{dataset}", *split_params),
        outs=(Out(paths.dataset_dir(dataset).as_posix()),))


def _extract_stage(params: Params, grid: str, dataset: str, backbone: str) -> StageSpec:
    code = backbone_code(backbone)
    read_params: list[str] = []
    for read in feature_reads(params, grid, dataset):
        keys = ["layers", "pooling"] if read.mode == "pooled" else ["layers"]
        read_params += [key for key in _param_keys(params, read.grid, read.task, keys) if key not in read_params]
    reads = ",".join(r.spell() for r in backbone_reads(params, grid, dataset, backbone))
    row = RowKey(grid, BackboneRef.parse(backbone).spelled, dataset)
    return StageSpec(
        f"{row.group}@{row.backbone}", row.file,
        f"python -m harness.stages.extract {grid} {row.backbone} {dataset} --code {code} --reads {reads}",
        # a backbone named by spec reads its pin from backbones.lock: a re-pin re-runs its extraction
        deps=(contents_path(paths.dataset_dir(dataset)).as_posix(), fingerprints.role_file("extract", code),
              *(["backbones.lock"] if code.endswith("/by_name.py") else [])),
        # the weights file this backbone reads, its own entry only: a changed path re-runs its extraction, and
        # another backbone's entry (your weights for one) leaves it up to date; a file changed in place needs
        # force=true
        params=(*SETTINGS_READ_BY_EXTRACT, *_checkpoint_keys(params, backbone), *read_params),
        params_file=dvcfiles.grid_params_file(grid).as_posix(),
        # persist: DVC would delete the folder before a retry, so an extraction killed at 9,000 of 10,000 images
        # would start again from 0; the stage itself keeps only the entries it verifies and removes the rest
        # (harness.runs.extract), so a persisted folder never holds a stale or corrupt entry
        outs=(Out(f"features/{grid}/{row.backbone}/{dataset}", persist=True),),
        row=row)


def _checkpoint_keys(params: Params, backbone: str) -> list[str]:
    """The `checkpoints.ARCH` params key the backbone's extraction reads (a random control reads none)."""
    ref = BackboneRef.parse(backbone)
    return [f"checkpoints.{ref.arch}"] if ref.checkpoint(params.checkpoints) is not None else []


def _probe_stage(params: Params, grid: str, task: str, backbone: str) -> StageSpec:
    spec = params.grids[grid]
    dataset = spec.tasks[task]
    feature_grid = spec.feature_grid(grid, dataset)
    code = probe_code(task)
    row = RowKey(grid, BackboneRef.parse(backbone).spelled, dataset, task)
    base = f"results/{grid}/{task}/{row.backbone}"
    # kept: a failed re-run must not delete the committed record
    outs = [_kept(base)] if spec.fewshot is not None else [_kept(f"{base}.json"), _kept(f"{base}.samples.csv")]
    if spec.fewshot is None and _saves_head(task):  # the trained head beside its record (harness.heads)
        outs.append(_kept(f"{base}.head.safetensors"))
    # a plain out here: the row file's top-level `metrics` names the ones that exist (`metrics_files`)
    outs.append(_kept(f"{base}.metrics.json"))
    return StageSpec(
        f"{row.group}@{row.backbone}", row.file,
        f"python -m harness.stages.probe {grid} {task} {row.backbone} --code {code} --dataset {dataset} "
        f"--features {feature_grid}",
        # each folder's contents file, not the folder: DVC checks a folder file by file for every stage that
        # depends on it, and the file once as its writer's output (harness.core.contents)
        deps=(f"features/{feature_grid}/{row.backbone}/{dataset}/{CONTENTS_NAME}",
              contents_path(paths.dataset_dir(dataset)).as_posix(), fingerprints.role_file("probe", code)),
        params=tuple(_probe_params(params, task, grid)),
        params_file=dvcfiles.grid_params_file(grid).as_posix(),
        outs=tuple(outs), row=row)


def _saves_head(task: str) -> bool:
    from harness.probes import get_probe

    return get_probe(task).score_head is not None


def _codedeps_stage(params: Params) -> StageSpec:
    """The stage that rewrites every role's code fingerprint from the harness package and the plugins, and each
    grid's params file from params.yaml: plain `dvc repro` after an edit runs it first, and the stages whose
    fingerprint or values changed after it."""
    grid_values = [dvcfiles.grid_params_file(grid).as_posix() for grid in params.grids]
    return StageSpec(
        fingerprints.STAGE, dvcfiles.ROOT_FILE, "python -m harness.pipeline.generate inputs",
        deps=("harness", *params.plugins, PARAMS_FILE.as_posix()),
        # kept: a failed run of it (no torch on PATH's python, say) must not leave every stage without its file
        outs=tuple(_kept(file) for file in [*fingerprints.roles(params), *grid_values]))


def _collect_and_site() -> list[StageSpec]:
    from harness.leaderboard.site.build import SITE_OUTPUTS

    return [
        StageSpec("collect", dvcfiles.ROOT_FILE, "python -m harness.stages.collect",
                  deps=("results", paths.FAILURES.as_posix(), fingerprints.role_file("collect")),
                  params=("grids",),
                  outs=(_kept(paths.CORPUS.as_posix()), _kept(paths.FAILED_CORPUS.as_posix()))),
        StageSpec("site", dvcfiles.ROOT_FILE, "python -m harness.stages.site",
                  # per-sample scores: bootstrap intervals, paired tests and tie groups are computed from them
                  deps=(paths.CORPUS.as_posix(), paths.FAILED_CORPUS.as_posix(), "results",
                        RELEASES_FOLDER.as_posix(), BENCHMARK_RESULTS.as_posix(), fingerprints.role_file("site")),
                  outs=tuple(_kept(f"docs/{name}") for name in SITE_OUTPUTS)),  # what the renderer declares
    ]


def stage_specs(params: Params) -> list[StageSpec]:
    """Every stage of the pipeline, in an order DVC can run them one by one: codedeps, the prepare stages, each
    grid's rows in the grid's order of backbones (a row's extract stages, then its probe stages), collect, site."""
    specs = [_codedeps_stage(params)]
    used = list(dict.fromkeys(d for spec in params.grids.values() for d in spec.datasets))
    specs += [_prepare_stage(params, dataset) for dataset in used]
    for grid, spec in params.grids.items():
        for backbone in spec.backbones:
            specs += [_extract_stage(params, grid, dataset, backbone) for dataset in spec.datasets
                      if spec.feature_grid(grid, dataset) == grid]
            specs += [_probe_stage(params, grid, task, backbone) for task in spec.tasks]
    return [*specs, *_collect_and_site()]
