"""What `executor=slurm` submits, and what each job asks the cluster for.

One job per backbone holds that backbone's extract stages and every selected probe stage reading them: the
features are read by the probes in the checkout that made them (they cross the DVC remote once, on their
way back), and one job per backbone is one resource request sized for that backbone. A dataset whose
prepare stage is out of date gets its own job first; the backbone jobs reading it wait for it (afterok).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from harness.pipeline.plan import Run


@dataclass(frozen=True)
class Resources:
    cpus: int
    mem_gb: int
    minutes_per_stage: int  # the time limit is a fixed setup allowance plus this per stage in the job
    gpu: bool  # asks for one GPU (--gres=gpu:1) when the partition has any


# By the module that registers the backbone (its family, see `harness.pipeline.topology.backbone_code`). Sized from
# what extraction of a few thousand images took on the project's 2-core CPU machine, with headroom; a GPU
# shortens the per-stage time a lot, the limit stays generous because a killed job wastes more than a
# long limit costs in queue priority.
FAMILY_RESOURCES: dict[str, Resources] = {
    "classical": Resources(cpus=1, mem_gb=2, minutes_per_stage=10, gpu=False),  # fixed filters, no weights
    "cifar_resnet": Resources(cpus=1, mem_gb=2, minutes_per_stage=10, gpu=False),  # 0.3-0.9M-weight CNNs
    "efficientnet_lite": Resources(cpus=2, mem_gb=6, minutes_per_stage=20, gpu=True),
    "timm_models": Resources(cpus=4, mem_gb=16, minutes_per_stage=30, gpu=True),
    "openclip_models": Resources(cpus=4, mem_gb=16, minutes_per_stage=30, gpu=True),
}
PLUGIN_RESOURCES = Resources(cpus=4, mem_gb=16, minutes_per_stage=30, gpu=True)  # unknown size: ask for a lot
PREPARE_RESOURCES = Resources(cpus=1, mem_gb=4, minutes_per_stage=30, gpu=False)
SETUP_MINUTES = 10  # checkout, `dvc pull` of upstream outputs, `dvc push` of the results


@dataclass
class Job:
    key: str  # folder name under the run's scratch folder; the SLURM job name is "visbench-<key>"
    stages: list[str]  # the `dvc repro` targets, upstream first
    runs: list[Run]  # the selected runs it brings up to date (none for a prepare job)
    resources: Resources
    after: list[str] = field(default_factory=list)  # keys of the prepare jobs it waits for
    stale: list[str] = field(default_factory=list)  # its stages DVC reported as not up to date when planned

    @property
    def name(self) -> str:
        return f"visbench-{self.key}"

    @property
    def probe_stages(self) -> list[str]:
        return [run.stage for run in self.runs]

    @property
    def extract_stages(self) -> list[str]:
        return list(dict.fromkeys(run.extract_stage for run in self.runs))

    @property
    def returned_stages(self) -> list[str]:
        """Stages whose outputs come back as files, installed and `dvc commit`ed by the coordinator: the probe
        stages, and the extract stages (only where the job ran one: `worker.write_returned`). Both have `persist`
        outputs (a record must survive a failed re-run; an interrupted extraction keeps its finished entries),
        which DVC's run-cache never stores."""
        return [stage for stage in self.stages if stage in self.extract_stages or stage in self.probe_stages]

    @property
    def always_returned(self) -> list[str]:
        """Of `returned_stages`, those whose outputs a job returns even where it did not change their lock entry:
        the probe stages, and the extract stages stale here (their features missing here, say, but in the remote)."""
        return [stage for stage in self.returned_stages if stage in self.probe_stages or stage in self.stale]

    @property
    def upstream_stages(self) -> list[str]:
        """Stages restored from the run-cache entry the job pushed (prepare: DVC-cached outputs, none persist)."""
        return [stage for stage in self.stages if stage not in self.extract_stages and stage not in self.probe_stages]

    def time_limit_minutes(self) -> int:
        return SETUP_MINUTES + self.resources.minutes_per_stage * len(self.stages)


def backbone_resources(backbone: str) -> Resources:
    from harness.pipeline.topology import backbone_code

    family = Path(backbone_code(backbone)).stem
    return FAMILY_RESOURCES.get(family, PLUGIN_RESOURCES)


def plan_jobs(runs: list[Run], stale: set[str]) -> list[Job]:
    """The jobs that bring `runs` up to date, given the stages DVC reports as not up to date here. A backbone
    with nothing stale gets no job; a stale prepare stage also re-runs the backbones that read its dataset
    (DVC in their job then skips whatever the re-prepared data did not change)."""
    prepare_jobs: dict[str, Job] = {}
    for run in runs:
        if run.prepare_stage in stale and run.dataset not in prepare_jobs:
            prepare_jobs[run.dataset] = Job(f"prepare-{run.dataset}", [run.prepare_stage], [], PREPARE_RESOURCES,
                                            stale=[run.prepare_stage])
    by_backbone: dict[str, list[Run]] = {}
    for run in runs:
        by_backbone.setdefault(run.backbone, []).append(run)
    jobs = list(prepare_jobs.values())
    for backbone, group in by_backbone.items():
        extract = list(dict.fromkeys(run.extract_stage for run in group))
        probes = list(dict.fromkeys(run.stage for run in group))
        prepares = list(dict.fromkeys(run.prepare_stage for run in group))
        if not stale & {*prepares, *extract, *probes}:
            continue
        after = [prepare_jobs[run.dataset].key for run in group if run.dataset in prepare_jobs]
        # a probe is stale when it, its extract or its prepare stage is: DVC re-runs it if that changes its inputs
        stale_probes = [run.stage for run in group if stale & {run.prepare_stage, run.extract_stage, run.stage}]
        jobs.append(Job(backbone, [*extract, *probes], group, backbone_resources(backbone),
                        list(dict.fromkeys(after)), [s for s in extract if s in stale] + stale_probes))
    return jobs


@dataclass(frozen=True)
class Partition:
    """What the partition's largest node offers (from `sinfo`): requests are capped to it, so a request
    sized for a big GPU node still runs on a small CPU-only cluster instead of pending forever."""

    name: str | None
    cpus: int
    mem_mb: int
    gpus: bool


def sbatch_options(job: Job, partition: Partition) -> list[str]:
    """`#SBATCH` options of a job: name, resources capped to the partition, time limit, GPU if any."""
    res = job.resources
    cpus = max(1, min(res.cpus, partition.cpus))
    mem_mb = min(res.mem_gb * 1024, partition.mem_mb) if partition.mem_mb > 1 else None
    minutes = job.time_limit_minutes()
    options = [f"--job-name={job.name}", f"--cpus-per-task={cpus}", f"--time={minutes // 60}:{minutes % 60:02d}:00"]
    if mem_mb is not None:  # a node without RealMemory reports 1 MB: then any --mem would be refused
        options.append(f"--mem={math.floor(mem_mb)}M")
    if res.gpu and partition.gpus:
        options.append("--gres=gpu:1")
    if partition.name:
        options.append(f"--partition={partition.name}")
    return options
