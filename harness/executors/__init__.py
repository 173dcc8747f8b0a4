"""Where the selected stages run: `executor=local` (one `dvc repro` in this workspace, the default) or
`executor=slurm` (one SLURM job per backbone, each in its own checkout, results brought back through DVC).

Either way the coordinator's workspace ends with the same dvc.lock entries, records and failure files, and
`run_grid` then collects, builds the site and reports failures exactly as for a local run (docs/cluster.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.core.config import ConfigError
from harness.core.registry import unknown_name_message

if TYPE_CHECKING:
    from harness.pipeline.plan import Run

EXECUTORS = ["local", "slurm"]
DEFAULT = "local"


def check_executor(overrides: dict) -> str:
    """The `executor=` value, validated before anything runs (a bad value exits 2 like any bad key)."""
    executor = overrides.get("executor", DEFAULT)
    if executor not in EXECUTORS:
        raise ConfigError(unknown_name_message("executor", executor, EXECUTORS))
    if overrides.get("force", False) and (executor != DEFAULT or "devices" in overrides or "probes" in overrides):
        # the forced `dvc repro` runs in this workspace, one process (harness.pipeline.dvc_runner)
        raise ConfigError("force=true re-runs stages here, in one process: drop executor=, devices= and probes.*")
    if executor != DEFAULT and "probes" in overrides:
        # a probe override is a `dvc exp run` in this workspace; the cluster runs the committed pipeline only
        raise ConfigError("probes.* overrides run as a local DVC experiment; drop executor= to run them")
    return executor


def run_stages(executor: str, runs: list[Run], targets: list[str], devices: list[str] | None = None,
               force: bool = False) -> tuple[int, bool]:
    """Bring `targets` (the stages of `runs`, upstream first) up to date: (exit code, 0 when all are; whether
    collect and site ran too, as the local executor's single `dvc repro` does). Several `devices`: extraction
    runs in one process per device (`harness.executors.parallel`). `force`: the runs' own stages run even when
    DVC finds them up to date (a record or file to re-derive; upstream stages still run only when stale)."""
    if devices and len(devices) > 1:
        from harness.executors.parallel import run_in_parallel

        return run_in_parallel(runs, targets, devices)
    if executor == "slurm":
        from harness.executors.slurm import run_on_slurm

        return run_on_slurm(runs), False
    from harness.pipeline.dvc_runner import repro_with_progress

    forced = [run.stage for run in runs] if force else []
    return repro_with_progress([*targets, "collect", "site"], force=forced), True
