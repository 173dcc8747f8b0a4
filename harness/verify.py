"""`visbench-harness verify`: re-run the stages behind committed records and compare every metric.

Extraction and probing run again from the prepared datasets into a scratch folder (nothing committed
is touched), and each metric is compared with the corpus under the record's declared tolerance. On the
same CPU build, runs agree exactly: inference, the seeded AdamW probe and the rankings are
deterministic, and the tolerances are 0. Where both records carry per-sample scores, their files must be
byte-identical too (check `samples_sha256`, tolerance 0). A few-shot stage is re-run whole and each of
its (k, seed) records compared with the committed one of the same run id.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness import paths
from harness.config import Params
from harness.plan import Run
from harness.records import Record, read_records
from harness.stages.common import StageFailed

log = logging.getLogger("visbench")


@dataclass
class MetricCheck:
    run_id: str
    metric: str
    committed: float | None
    reproduced: float | None
    tolerance: float

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
    return MetricCheck(run_id, name, 0.0, 0.0 if same else 1.0, 0.0)


def compare(committed: Record, reproduced: Record) -> list[MetricCheck]:
    names = sorted(set(committed.metrics) | set(reproduced.metrics)) or ["status"]
    checks = []
    for name in names:
        if name == "status":
            checks.append(_same(committed.run_id, "status", committed.status == reproduced.status))
            continue
        checks.append(MetricCheck(
            committed.run_id, name, committed.metrics.get(name), reproduced.metrics.get(name),
            committed.tolerances.get(name, 0.0),
        ))
    if committed.samples is not None and reproduced.samples is not None:
        same = committed.samples.sha256 == reproduced.samples.sha256
        checks.append(_same(committed.run_id, "samples_sha256", same))
    if "subset_sha256" in committed.protocol_params:  # a few-shot run trained on the same items
        same = committed.protocol_params["subset_sha256"] == reproduced.protocol_params.get("subset_sha256")
        checks.append(_same(committed.run_id, "subset_sha256", same))
    return checks


def verify_runs(runs: list[Run], params: Params, scratch: Path | None = None) -> list[MetricCheck]:
    from harness import stage_calls as stages
    from harness.fewshot import stage_run_ids

    corpus = {r.run_id: r for r in read_records(paths.CORPUS)}
    missing = [run_id for run in runs for run_id in stage_run_ids(params, run.grid, run.task, run.backbone)
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
                reproduced_records = read_records(paths.failure_path(run.stage))
            result = [check for reproduced in reproduced_records
                      for check in compare(corpus[reproduced.run_id], reproduced)]
            checks += result
            worst = max((abs(c.difference) for c in result if c.difference is not None), default=0.0)
            log.info("[%d/%d] verify %s: %s (max |diff| %.3g)", index, len(runs), run.stage,
                     "agrees" if all(c.ok for c in result) else "DIFFERS", worst)
    return checks


def format_checks(checks: list[MetricCheck]) -> str:
    lines = [f"{'run':<48} {'metric':<18} {'committed':>10} {'reproduced':>10} {'diff':>10}  ok"]
    for c in checks:
        def fmt(v: float | None) -> str:
            return "missing" if v is None else f"{v:.6f}"

        lines.append(f"{c.run_id:<48} {c.metric:<18} {fmt(c.committed):>10} {fmt(c.reproduced):>10} "
                     f"{fmt(c.difference):>10}  {'yes' if c.ok else 'NO'}")
    return "\n".join(lines)


def committed_records() -> list[Record]:
    return read_records(paths.CORPUS)
