"""`devices=0,1,…`: the selected backbones' feature extraction in parallel, one process per device.

DVC runs one command per workspace and one stage at a time, so several GPUs would sit idle behind it. Here:

1. `dvc repro` of the selected runs' prepare stages (the datasets every device reads);
2. the backbones whose extract stages `dvc status` reports as not up to date are dealt round-robin to the
   devices, largest groups first; one process per device runs its backbones' extract stages one after
   another, each with exactly the command dvc.yaml gives it and `VISBENCH_DEVICE` set to its device;
3. `dvc commit` of the extract stages that succeeded: DVC hashes their dependencies and outputs into dvc.lock
   as `dvc repro` would have (DVC's documented way to lock a stage whose command ran outside it);
4. one `dvc repro` of everything selected, then collect and site, on the first device: it finds the features
   up to date and runs the probes (those that read changed features, as always). A stage that failed in step
   2 left its failure file and no lock, so this `dvc repro` tries it once more and reports it as usual.

Probes stay in the one `dvc repro`: they are a small share of a grid's time (a pooled probe is seconds of
NumPy), and a dense probe's head trains on the first device.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from harness.core.devices import DEVICE_ENV, EXPLICIT_DEVICE_ENV, device_kind, hand_on_device

if TYPE_CHECKING:
    from harness.pipeline.plan import Run

log = logging.getLogger("visbench")


def deal(backbones: dict[str, list[str]], devices: list[str]) -> list[tuple[str, list[str]]]:
    """Backbone → its stages, dealt to one slot per device (a device may be listed twice: two processes on it):
    the backbones with the most stages first, each to the slot with the fewest stages so far (ties: the
    earlier slot). Returns (device, stages in run order) per slot."""
    slots: list[tuple[str, list[str]]] = [(device, []) for device in devices]
    for backbone in sorted(backbones, key=lambda b: (-len(backbones[b]), b)):
        _, stages = min(slots, key=lambda slot: len(slot[1]))  # min keeps the first of equals
        stages += backbones[backbone]
    return slots


def _run_stages(device: str, stages: list[str], commands: dict[str, str], threads: int | None) -> list[str]:
    """Run `stages` one after another on `device` (`threads`: the CPU's share of a CPU device); the stages that
    succeeded."""
    # each process's device is an explicit choice (`devices=`): it beats settings.device (harness.core.devices)
    env = {**os.environ, DEVICE_ENV: device, EXPLICIT_DEVICE_ENV: "1",
           **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    succeeded = []
    for stage in stages:
        started = time.monotonic()
        log.info("[%s] %s", device, stage)
        code = subprocess.run(shlex.split(commands[stage]), env=env, check=False).returncode
        log.info("[%s] %s %s in %.0fs", device, stage, "ok" if code == 0 else f"failed (exit {code})",
                 time.monotonic() - started)
        if code == 0:
            succeeded.append(stage)
    return succeeded


def run_in_parallel(runs: list[Run], targets: list[str], devices: list[str]) -> tuple[int, bool]:
    """Bring `targets` up to date with extraction spread over `devices`; (DVC's exit code, True: collect and
    site ran), as the local executor returns."""
    from harness.pipeline.dvc_runner import repro_with_progress, run_dvc, stale_stages
    from harness.pipeline.stage_model import addresses, load_stages
    from harness.pipeline.targets import stage_commands

    prepares = list(dict.fromkeys(run.prepare_stage for run in runs))
    if repro_with_progress(prepares):
        log.error("a dataset's prepare stage failed; the runs reading it are reported below")
    extracts = list(dict.fromkeys(run.extract_stage for run in runs))
    stale = stale_stages(extracts)
    stale = set(extracts) if stale is None else stale
    by_backbone: dict[str, list[str]] = {}
    for run in runs:
        if run.extract_stage in stale and run.extract_stage not in by_backbone.get(run.backbone, []):
            by_backbone.setdefault(run.backbone, []).append(run.extract_stage)
    commands = stage_commands(load_stages())
    dealt = [(device, stages) for device, stages in deal(by_backbone, devices) if stages]
    if dealt:
        log.info("extracting %d stages in %d parallel processes: %s", sum(len(s) for _, s in dealt), len(dealt),
                 "; ".join(f"{device}: {len(stages)}" for device, stages in dealt))
        # CPU devices share the cores (each process would otherwise start a thread per core)
        cpus = sum(device_kind(device) == "cpu" for device, _ in dealt)
        threads = max(1, len(os.sched_getaffinity(0)) // cpus) if cpus else None

        def run_slot(slot: tuple[str, list[str]]) -> list[str]:
            device, stages = slot
            return _run_stages(device, stages, commands, threads if device_kind(device) == "cpu" else None)

        with ThreadPoolExecutor(max_workers=len(dealt)) as pool:
            done = [stage for stages in pool.map(run_slot, dealt) for stage in stages]
        if done and run_dvc(["commit", "--force", *addresses(done)]):
            log.error("dvc commit of the extracted stages failed; dvc repro extracts them again")
    hand_on_device(devices[0])
    return repro_with_progress([*targets, "collect", "site"]), True
