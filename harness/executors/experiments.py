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
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.core.config import ConfigError, Params
from harness.pipeline.plan import Run

log = logging.getLogger("visbench")


def validated_overrides(params: Params, runs: list[Run], overrides: dict[str, Any]) -> list[str]:
    """`-S` arguments (`probes.T.P=V`), each checked against the probe's schema with the value applied."""
    from harness.probes import get_probe, validate_probe_params

    selected_tasks = {run.task for run in runs}
    settings = []
    for dotted, value in sorted(overrides.items()):
        task, _, key = dotted.partition(".")
        if task not in params.probes:
            raise ConfigError(f"probes.{dotted}: no probes.{task} block in params.yaml")
        if task not in selected_tasks:
            raise ConfigError(f"probes.{dotted}: no selected run is a {task} run; add task={task}")
        schema = get_probe(task).params.model_fields  # a key params.yaml leaves at its default may be set too
        if key not in params.probes[task] and key not in schema:
            valid = ", ".join(dict.fromkeys([*params.probes[task], *schema]))
            raise ConfigError(f"probes.{dotted}: probes.{task} has no key {key!r}; valid keys: {valid}")
        try:
            validate_probe_params(task, {**params.probes[task], key: value})
        except ValueError as error:
            raise ConfigError(str(error)) from None
        spelled = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
        # DVC's -S (Hydra's override grammar) adds a key params.yaml does not have only when told to, with `+`
        settings.append(f"{'' if key in params.probes[task] else '+'}probes.{dotted}={spelled}")
    return settings


def scoped_runs(params: Params, runs: list[Run], overrides: dict[str, Any]) -> tuple[list[Run], list[Run]]:
    """(the runs an override reaches, the others): a run of an overridden task, in a grid that does not set the key
    itself (`grids.G.probes.T.K` wins over `probes.T.K`, so there the override would change nothing and the
    experiment would only re-list the committed number as tied). A one-line error when it reaches none."""
    keys = [dotted.partition(".")[::2] for dotted in overrides]
    reached, others = [], []
    for run in runs:
        own = params.grids[run.grid].probes.get(run.task, {})
        (reached if any(run.task == task and key not in own for task, key in keys) else others).append(run)
    if not reached:
        grids = ", ".join(sorted({run.grid for run in runs}))
        raise ConfigError(f"probes.{', probes.'.join(sorted(overrides))}: every selected grid ({grids}) sets it in "
                          "its own grids.GRID.probes block, so the override reaches no run; override that key instead")
    return reached, others


def experiment_name(settings: list[str], stages: Sequence[str] = ()) -> str:
    """`override-<what>-<hash>`: the overridden keys and values, readable in `dvc exp show`, and a hash of them and
    the stages the experiment runs, so the same override over other runs (another task=, grid= or backbone=) is
    another experiment and never replaces this one; the same override over the same runs replaces its earlier run."""
    what = re.sub(r"[^A-Za-z0-9._-]+", "-", "_".join(s.lstrip("+").removeprefix("probes.") for s in settings))
    scope = "\n".join([*settings, "--", *sorted(stages)])
    return f"override-{what.strip('-')[:60]}-{hashlib.sha256(scope.encode()).hexdigest()[:10]}"


def run_experiment(runs: list[Run], settings: list[str], dry_run: bool = False) -> int:
    """`settings` from `validated_overrides`, as `-S` settings for `dvc exp run`."""
    from harness.pipeline.dvc_runner import run_dvc
    from harness.pipeline.stage_model import addresses

    stages = list(dict.fromkeys(run.stage for run in runs))
    name = experiment_name(settings, stages)
    log.info("override %s: a DVC experiment %r over %d stages; the committed corpus is not touched",
             ", ".join(settings), name, len(stages))
    if dry_run:
        return 0
    ref = experiment_ref(name)
    kept = None
    if ref and _exists(ref):
        # the same override on this commit before: set that experiment aside instead of passing `--force`, which
        # makes `dvc exp run` reproduce every stage upstream of the probes too (a prepare and an extraction re-ran
        # for a 0.1 s probe: 35 s against 22 s on the default grid, and hours for a large grid's extractions). It
        # comes back if this run fails: a failed run never removes a successful one.
        kept = _set_aside(ref)
        log.info("experiment %s was run on this commit before; a successful run replaces it", name)
    link_outside_paths_for_experiments()
    args = ["exp", "run", "--temp", "--name", name]
    for setting in settings:
        args += ["-S", setting]
    code = run_dvc([*args, *addresses(stages)])
    if code:
        if kept is not None and ref is not None:
            _git(["update-ref", ref, kept])
        log.error("experiment %s failed (see DVC's output above); nothing committed changed%s", name,
                  "; the earlier run of this override is kept" if kept else "")
        return 1
    print(compare_with_committed(name, runs))
    log.info("the experiment is kept as a git ref: dvc exp show, dvc exp diff HEAD %s; drop it: dvc exp remove %s",
             name, name)
    return 0


def _set_aside(ref: str) -> str | None:
    """Remove experiment `ref` (so DVC can run it again under its name) and return the commit it pointed to."""
    commit = (_git(["rev-parse", "--verify", ref]) or "").strip() or None
    _git(["update-ref", "-d", ref])
    return commit


# DVC runs `--temp` experiments in a copy of the workspace at .dvc/tmp/exps/standalone/<random>/ (its tempdir
# queue); a params.yaml path that leaves the project (`../shared/…`) resolves from there to this folder's siblings.
EXPERIMENT_COPIES = Path(".dvc/tmp/exps/standalone")


def link_outside_paths_for_experiments() -> None:
    """Make params.yaml's paths that leave the project (`../shared/data/…`) resolve from DVC's temporary copy as
    from the project: a link beside the copies stands in for their first folder (`standalone/shared`)."""
    from harness.core.config import PARAMS_FILE
    from harness.executors.checkout import link_outside_paths, outside_links

    raw = yaml.safe_load(PARAMS_FILE.read_text())
    link_outside_paths(outside_links(raw, Path.cwd(), EXPERIMENT_COPIES / "copy"))


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
    """Every metric of each selected run: the committed record (HEAD) beside the experiment's; then, for each
    headline metric with per-sample scores in both, the paired difference (experiment − committed) with its
    95% bootstrap interval, and "tied" where that interval holds 0 (the boards' own test)."""
    from harness.runs.records import parse_record

    ref = experiment_ref(name)
    if ref is None or not _exists(ref):
        return f"experiment {name}: no git ref found (dvc exp show lists what exists)"
    lines = [f"{'run':<44} {'metric':<20} {'committed':>10} {name:>20}"]
    paired = []
    for run in runs:
        path = run.key.record_path.as_posix()
        texts = [_git_show("HEAD", path), _git_show(ref, path)]
        committed, experiment = (parse_record(t.strip(), path) if t else None for t in texts)
        if experiment is None and committed is None:  # a few-shot grid's runs: a folder of records per backbone
            lines.append(f"{run.stage:<44} (records under {path.removesuffix('.json')}/: dvc exp diff HEAD {name})")
            continue
        if experiment is None:
            lines.append(f"{run.stage:<44} (no record in the experiment)")
            continue
        old = committed.metrics if committed else {}
        for metric in sorted(set(old) | set(experiment.metrics)):
            before = f"{old[metric]:.4f}" if metric in old else "-"
            after = f"{experiment.metrics[metric]:.4f}" if metric in experiment.metrics else "-"
            lines.append(f"{run.stage:<44} {metric:<20} {before:>10} {after:>20}")
        if committed is not None:
            paired.append(_paired_line(run, committed, experiment, ref))
    return "\n".join([*lines, *[line for line in paired if line]])


def _paired_line(run: Run, committed, experiment, ref: str) -> str | None:
    """`RUN headline Δ +0.0067 [-0.0067, +0.0200] over 150 images: tied`, from both runs' per-sample files."""
    from harness.leaderboard.statistics.bootstrap import PairingError, paired_bootstrap, paired_seed
    from harness.runs.samples import parse_samples

    metric = committed.headline_metric
    if committed.samples is None or experiment.samples is None or metric not in committed.samples.columns:
        return f"{run.stage:<44} {metric}: no per-sample scores in both runs, so no paired interval"
    texts = [_git_show("HEAD", committed.samples.path), _git_show(ref, experiment.samples.path)]
    if not all(texts):
        return f"{run.stage:<44} {metric}: a per-sample file is missing, so no paired interval"
    (ids_a, cols_a), (ids_b, cols_b) = (parse_samples(text) for text in texts)
    try:
        test = paired_bootstrap(ids_b, cols_b[metric], ids_a, cols_a[metric], seed=paired_seed(
            run.task, committed.samples.sha256, experiment.samples.sha256, metric))
    except PairingError as error:
        return f"{run.stage:<44} {metric}: {error}"
    sign = -1.0 if metric in experiment.higher_is_better and not experiment.higher_is_better[metric] else 1.0
    verdict = "tied" if test.low <= 0.0 <= test.high else ("better" if sign * test.difference > 0 else "worse")
    return (f"{run.stage:<44} {metric} Δ {test.difference:+.4f} [{test.low:+.4f}, {test.high:+.4f}] over "
            f"{test.count} {committed.samples.unit} samples (paired bootstrap, 95%): {verdict}")
