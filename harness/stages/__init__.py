"""The thin entry points that `dvc.yaml` stages call, one module each, so a stage imports only its own code:

    python -m harness.stages.prepare DATASET --code KIND_MODULE --tasks T,…
    python -m harness.stages.extract GRID BACKBONE DATASET --code FAMILY_MODULE --reads TASK=MODE/FIT,…
    python -m harness.stages.probe GRID TASK BACKBONE --code PROBE_MODULE --dataset D --features GRID
    python -m harness.stages.collect
    python -m harness.stages.site

Structure (which grid, dataset, task, code module) comes on the command line from the generated dvc.yaml
(`harness.pipeline.topology`); values come from params.yaml, declared as the stage's DVC params. A failed stage
keeps what it had (an ok record is never replaced), writes its failed attempt under `failures/`, and
exits 1, so DVC never locks a failure as up to date and the next run retries it.
"""
