"""Probe-parameter overrides (`probes.classification.lr=0.01` on the command line) run as DVC experiments.

An override is a question about a different protocol, so its numbers never enter the committed corpus: the
selected stages run with `dvc exp run --temp -S …` in a temporary copy of the workspace (the committed
records, dvc.lock and site are untouched), the experiment is kept as a git ref, and `dvc exp show` /
`dvc exp diff` compare it with the committed numbers. To adopt the change, edit params.yaml and run the
grid; the records then carry the new protocol_params (and land on their own board).
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
from typing import Any

import yaml

from harness.config import ConfigError, Params
from harness.plan import Run

log = logging.getLogger("visbench")


def validated_overrides(params: Params, runs: list[Run], overrides: dict[str, Any]) -> list[str]:
    """`-S` arguments (`probes.T.P=V`), each checked against the probe's schema with the value applied."""
    from harness.probes import validate_probe_params

    selected_tasks = {run.task for run in runs}
    settings = []
    for dotted, value in sorted(overrides.items()):
        task, _, key = dotted.partition(".")
        if task not in params.probes:
            raise ConfigError(f"probes.{dotted}: no probes.{task} block in params.yaml")
        if task not in selected_tasks:
            raise ConfigError(f"probes.{dotted}: no selected run is a {task} run; add task={task}")
        if key not in params.probes[task]:
            valid = ", ".join(params.probes[task])
            raise ConfigError(f"probes.{dotted}: probes.{task} has no key {key!r}; valid keys: {valid}")
        try:
            validate_probe_params(task, {**params.probes[task], key: value})
        except ValueError as error:
            raise ConfigError(str(error)) from None
        spelled = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
        settings.append(f"probes.{dotted}={spelled}")
    return settings


def experiment_name(settings: list[str]) -> str:
    return "override-" + hashlib.sha256("\n".join(settings).encode()).hexdigest()[:10]


def run_experiment(runs: list[Run], settings: list[str], dry_run: bool = False) -> int:
    """`settings` from `validated_overrides`, as `-S` settings for `dvc exp run`."""
    from harness.dvc_runner import run_dvc

    name = experiment_name(settings)
    stages = list(dict.fromkeys(run.stage for run in runs))
    log.info("override %s: a DVC experiment %r over %d stages; the committed corpus is not touched",
             ", ".join(settings), name, len(stages))
    if dry_run:
        return 0
    ref = experiment_ref(name)
    if ref and _exists(ref):
        # the same override on this commit before: drop that experiment instead of passing `--force`, which makes
        # `dvc exp run` reproduce every stage upstream of the probes too (a prepare and an extraction re-ran for a
        # 0.1 s probe: 35 s against 22 s on the default grid, and hours for a large grid's extractions)
        _git(["update-ref", "-d", ref])
        log.info("experiment %s was run on this commit before; running it again replaces it", name)
    args = ["exp", "run", "--temp", "--name", name]
    for setting in settings:
        args += ["-S", setting]
    code = run_dvc([*args, *stages])
    if code:
        log.error("experiment %s failed (see DVC's output above); nothing committed changed", name)
        return 1
    print(compare_with_committed(name, runs))
    log.info("the experiment is kept as a git ref: dvc exp show, dvc exp diff HEAD %s; drop it: dvc exp remove %s",
             name, name)
    return 0


def _git(args: list[str]) -> str | None:
    out = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    return out.stdout if out.returncode == 0 else None


def _git_show(ref: str, path: str) -> str | None:
    return _git(["show", f"{ref}:{path}"])


def experiment_ref(name: str) -> str | None:
    """The git ref DVC keeps experiment `name` under for the commit HEAD is at: refs/exps/AB/CDEF…/NAME. The same
    override run on another commit has the same name under that commit's prefix, and is not this one."""
    head = (_git(["rev-parse", "HEAD"]) or "").strip()
    return f"refs/exps/{head[:2]}/{head[2:]}/{name}" if head else None


def _exists(ref: str) -> bool:
    return _git(["show-ref", "--verify", "--quiet", ref]) is not None


def compare_with_committed(name: str, runs: list[Run]) -> str:
    """Every metric of each selected run: the committed record (HEAD) beside the experiment's."""
    from harness import paths
    from harness.records import parse_record

    ref = experiment_ref(name)
    if ref is None or not _exists(ref):
        return f"experiment {name}: no git ref found (dvc exp show lists what exists)"
    lines = [f"{'run':<44} {'metric':<20} {'committed':>10} {name:>20}"]
    for run in runs:
        path = paths.record_path(run.grid, run.task, run.backbone).as_posix()
        texts = [_git_show("HEAD", path), _git_show(ref, path)]
        committed, experiment = (parse_record(t.strip(), path) if t else None for t in texts)
        if experiment is None:
            lines.append(f"{run.stage:<44} (no record in the experiment)")
            continue
        old = committed.metrics if committed else {}
        for metric in sorted(set(old) | set(experiment.metrics)):
            before = f"{old[metric]:.4f}" if metric in old else "-"
            after = f"{experiment.metrics[metric]:.4f}" if metric in experiment.metrics else "-"
            lines.append(f"{run.stage:<44} {metric:<20} {before:>10} {after:>20}")
    return "\n".join(lines)
