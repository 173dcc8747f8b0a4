"""`visbench-harness verify`: re-run the stages behind committed records and compare every metric.

Extraction and probing run again from the prepared datasets into a scratch folder (nothing committed
is touched), and each metric is compared with the corpus under the record's declared tolerance. On the
same CPU build, runs agree exactly: inference, the seeded AdamW probe and the rankings are
deterministic, and the tolerances are 0. Where both records carry per-sample scores, their files must be
byte-identical too (check `samples_sha256`, tolerance 0). A few-shot stage is re-run whole and each of
its (k, seed) records compared with the committed one of the same run id. On a CPU with other kernels
(AVX2 against AVX-512) features can differ in their last bits, and near-tied rankings with them;
`tolerance=1e-6` then accepts every metric and per-sample score within that, comparing the per-sample files
value by value.
"""

from __future__ import annotations

import logging
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.core import paths
from harness.core.config import Params
from harness.core.hashing import sha256_file
from harness.pipeline.plan import Run
from harness.runs.failed_records import failed_records
from harness.runs.records import Record, read_records
from harness.stages.common import StageFailed

log = logging.getLogger("visbench")


@dataclass
class MetricCheck:
    run_id: str
    metric: str
    committed: float | None
    reproduced: float | None
    tolerance: float
    same_or_not: bool = False  # a yes/no check (a file's hash, the status): printed as agree/differ
    note: str = ""  # what the numbers alone do not say (how many per-sample scores are beyond the tolerance)

    @property
    def difference(self) -> float | None:
        if self.committed is None or self.reproduced is None:
            return None
        return self.reproduced - self.committed

    @property
    def ok(self) -> bool:
        return self.difference is not None and abs(self.difference) <= self.tolerance


def _same(run_id: str, name: str, same: bool) -> MetricCheck:
    """A yes/no check in metric form: reproduced is 0 when equal, 1 when not; tolerance 0."""
    return MetricCheck(run_id, name, 0.0, 0.0 if same else 1.0, 0.0, same_or_not=True)


def compare(committed: Record, reproduced: Record, tolerance: float = 0.0,
            reproduced_root: Path = Path(".")) -> list[MetricCheck]:
    """Every metric within the larger of its declared tolerance and `tolerance`; the per-sample scores
    byte-identical, or with a `tolerance`, value by value within it (`reproduced_root`: where the re-run's
    files are)."""
    names = sorted(set(committed.metrics) | set(reproduced.metrics)) or ["status"]
    checks = []
    for name in names:
        if name == "status":
            checks.append(_same(committed.run_id, "status", committed.status == reproduced.status))
            continue
        checks.append(MetricCheck(
            committed.run_id, name, committed.metrics.get(name), reproduced.metrics.get(name),
            max(committed.tolerances.get(name, 0.0), tolerance),
        ))
    if committed.samples is not None:
        # the committed file itself, not only the hash its record names: a file edited or rotted on disk would
        # otherwise pass as long as the re-run agreed with the record
        on_disk = Path(committed.samples.path)
        intact = on_disk.is_file() and sha256_file(on_disk) == committed.samples.sha256
        checks.append(MetricCheck(committed.run_id, "samples_file", 0.0, 0.0 if intact else 1.0, 0.0,
                                  same_or_not=True,
                                  note="" if intact else f"{on_disk} is missing or differs from the hash its record "
                                                         "names: restore it (git checkout, or a plain run)"))
    if committed.samples is not None and reproduced.samples is not None:
        same = committed.samples.sha256 == reproduced.samples.sha256
        if same or not tolerance:
            checks.append(_same(committed.run_id, "samples_sha256", same))
        else:
            checks.append(_samples_within(committed, reproduced, tolerance, reproduced_root))
    if "subset_sha256" in committed.protocol_params:  # a few-shot run trained on the same items
        same = committed.protocol_params["subset_sha256"] == reproduced.protocol_params.get("subset_sha256")
        checks.append(_same(committed.run_id, "subset_sha256", same))
    return checks


def _samples_within(committed: Record, reproduced: Record, tolerance: float, root: Path) -> MetricCheck:
    """The largest |difference| between the two per-sample files, over the same samples and columns (a file
    whose samples or columns differ is an infinite difference, beyond any tolerance). Every sample is held to
    the tolerance, as the metrics are: a retrieval query whose near-tied neighbours swapped order changes its
    own score by far more than the mean moves, and that is reported (`beyond`: how many samples), not averaged
    away."""
    from harness.runs.samples import read_samples

    assert committed.samples is not None and reproduced.samples is not None
    ids, columns = read_samples(committed.samples)
    their_ids, theirs = read_samples(reproduced.samples, root)
    if ids != their_ids or set(columns) != set(theirs):
        return MetricCheck(committed.run_id, "samples_max_diff", 0.0, math.inf, tolerance)
    # scores only: an auxiliary column (a predicted class, a count) that changes moves a score column with it
    differences = [np.abs(columns[name] - theirs[name]) for name in committed.samples.columns]
    worst = max((float(np.max(d, initial=0.0)) for d in differences), default=0.0)
    beyond = int(np.count_nonzero(np.any(np.stack(differences) > tolerance, axis=0))) if differences else 0
    return MetricCheck(committed.run_id, "samples_max_diff", 0.0, worst, tolerance,
                       note=f"{beyond} of {len(ids)} samples beyond {tolerance:g}" if beyond else "")


def verify_runs(runs: list[Run], params: Params, scratch: Path | None = None,
                tolerance: float = 0.0) -> list[MetricCheck]:
    from harness.runs.fewshot import stage_run_ids
    from harness.stages import calls as stages

    corpus = {r.run_id: r for r in read_records(paths.CORPUS)}
    missing = [run_id for run in runs for run_id in stage_run_ids(params, run.key)
               if run_id not in corpus]
    if missing:
        raise KeyError(f"no committed record for {', '.join(missing)}; run the grid and commit the corpus first")
    for dataset in sorted({run.dataset for run in runs}):
        if not paths.manifest_path(dataset).is_file():
            stages.prepare(dataset, params)
    checks: list[MetricCheck] = []
    with tempfile.TemporaryDirectory(prefix="visbench-verify-", dir=scratch) as tmp, paths.scratch_outputs(Path(tmp)):
        extracted = set()
        for index, run in enumerate(runs, start=1):
            key = (run.feature_grid, run.backbone, run.dataset)
            if key not in extracted:
                stages.extract(run.feature_grid, run.backbone, run.dataset, params)
                extracted.add(key)
            try:
                reproduced_records = stages.probe(run.grid, run.task, run.backbone, params)
            except StageFailed as error:  # the committed run is ok; its re-run failing is a difference
                log.error("verify %s: the re-run failed: %s", run.stage, error)
                reproduced_records = failed_records(run.stage)
            result = [check for reproduced in reproduced_records
                      for check in compare(corpus[reproduced.run_id], reproduced, tolerance, Path(tmp))]
            for line in device_notes(corpus, reproduced_records, tolerance):
                log.info("verify %s: %s", run.stage, line)
            checks += result
            worst = max((abs(c.difference) for c in result if c.difference is not None), default=0.0)
            log.info("[%d/%d] verify %s: %s (max |diff| %.3g)", index, len(runs), run.stage,
                     "agrees" if all(c.ok for c in result) else "DIFFERS", worst)
    return checks


def _devices(record: Record) -> str:
    """What computed a record: its features' device where that was not the CPU, then the run's own."""
    env = record.environment
    return f"features on {env.features_device}, probe on {env.device}" if env.features_device else env.device


def device_notes(corpus: dict[str, Record], reproduced: list[Record], tolerance: float) -> list[str]:
    """A line for each re-run computed on another kind of device than its committed record (a GPU against the
    CPU): what computed each, and the tolerance the comparison is made under (0 unless one was declared)."""
    from harness.core.devices import device_kind

    notes = []
    for record in reproduced:
        committed = corpus[record.run_id]
        kinds = {device_kind(r.environment.features_device or r.environment.device) for r in (committed, record)}
        kinds |= {device_kind(r.environment.device) for r in (committed, record)}
        if len(kinds) > 1:
            notes.append(f"committed by {_devices(committed)}; re-run by {_devices(record)}: compared "
                         + (f"within the declared tolerance {tolerance:g}" if tolerance else
                            "exactly (another device's kernels round differently: declare one, e.g. tolerance=1e-4)"))
    return notes


def format_checks(checks: list[MetricCheck]) -> str:
    lines = [f"{'run':<48} {'metric':<18} {'committed':>10} {'reproduced':>10} {'diff':>10}  ok"]
    for c in checks:
        def fmt(v: float | None) -> str:
            return "missing" if v is None else f"{v:.6f}"

        if c.same_or_not:  # a hash or the status: the two agree or differ, there is no amount
            lines.append(f"{c.run_id:<48} {c.metric:<18} {'':>10} {'agree' if c.ok else 'differ':>10} {'':>10}  "
                         f"{'yes' if c.ok else 'NO'}")
            continue
        # the difference in 3 significant digits: a 6e-7 difference must not print as 0.000001 or -0.000000
        diff = "missing" if c.difference is None else f"{c.difference:.3g}"
        lines.append(f"{c.run_id:<48} {c.metric:<18} {fmt(c.committed):>10} {fmt(c.reproduced):>10} "
                     f"{diff:>10}  {'yes' if c.ok else 'NO'}" + (f"  ({c.note})" if c.note else ""))
    return "\n".join(lines)
