"""collect never writes a corpus short of a record it should hold (issue 47 item 4), without DVC: a record
dvc.lock says its stage wrote, now missing, and a record cut short or edited by hand each stop the stage in one
line naming the file and the command that heals it, the corpus left as it was; a run that never ran is no
refusal. And a failed attempt the CLI wrote for a failed upstream stage goes once that stage is ok again (item 1).
The same faults on a real DVC project, healed by a plain re-run: tests/test_faults.py."""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.core import paths
from harness.stages import collect

BACKBONE = "cifar_resnet20.random"
RECORD = Path(f"results/g/classification/{BACKBONE}.json")
COMMAND = "visbench-harness grid=g task=classification backbone=cifar_resnet20@random"


def _lock(outs: list[str]) -> None:
    """The grid row's dvc.yaml and a dvc.lock whose probe stage names `outs`."""
    row = Path("pipelines/g") / BACKBONE
    row.mkdir(parents=True)
    (row / "dvc.yaml").write_text("stages: {}\n")
    stage = f"g-classification@{BACKBONE}"
    (row / "dvc.lock").write_text(yaml.safe_dump(
        {"schema": "2.0", "stages": {stage: {"cmd": "x", "outs": [{"path": out, "size": 1} for out in outs]}}}))


def _collect(capsys) -> tuple[int, str]:
    code = collect.main([])
    return code, capsys.readouterr().err


def test_a_run_that_never_ran_is_no_refusal(image_project, capsys):
    assert _collect(capsys)[0] == 0
    assert paths.CORPUS.read_text() == ""


def test_a_deleted_record_that_dvc_lock_names_is_refused_in_one_line(image_project, capsys):
    _lock([str(RECORD)])
    paths.CORPUS.parent.mkdir(parents=True, exist_ok=True)
    paths.CORPUS.write_text("kept\n")
    code, err = _collect(capsys)
    assert code == 1 and err.count("\n") == 1, err
    assert f"{RECORD} is missing, though dvc.lock says stage g-classification@{BACKBONE} wrote it" in err
    assert COMMAND in err
    assert paths.CORPUS.read_text() == "kept\n"  # the corpus left as it was


def test_a_record_cut_short_or_emptied_is_one_line_not_a_traceback(image_project, capsys):
    RECORD.parent.mkdir(parents=True)
    for damage in ('{"run_id": "g-classification@cifar', ""):
        RECORD.write_text(damage)
        code, err = _collect(capsys)
        assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"collect: FAILED: {RECORD} ") and COMMAND in err



def test_an_upstream_failure_is_cleared_once_its_stage_and_the_run_are_up_to_date(image_project, monkeypatch):
    """failures/<probe>.jsonl written for a failed extraction (issue 47 item 1): kept while the extract stage's own
    failure stands or DVC finds the run or its extraction stale; cleared, and the run ok, once neither is."""
    from harness.executors import report
    from harness.pipeline import dvc_runner
    from harness.pipeline.plan import Run
    from harness.runs.failures import StageFailure

    run = Run("g", "classification", BACKBONE, "tiny", "g")
    upstream = StageFailure(stage=run.extract_stage, phase="extract", error_type="OSError",
                            message="[Errno 28] No space left on device")
    report.record_upstream_failure(run, upstream)
    own = paths.failure_path(run.stage)
    stale: set[str] = {run.extract_stage}
    monkeypatch.setattr(dvc_runner, "stale_stages", lambda stages, docs=None, echo=True: stale & set(stages))

    failed, changed = report.find_failures([run], dvc_failed=False)  # extraction not re-run yet
    assert [(r.stage, phase) for r, phase, _ in failed] == [(run.stage, "extract")] and own.is_file()
    stale.clear()
    stale.add(run.stage)  # extracted again, the run itself still out of date: DVC runs it, not us
    assert report.find_failures([run], dvc_failed=False)[0] and own.is_file()
    stale.clear()
    failed, changed = report.find_failures([run], dvc_failed=False)
    assert failed == [] and changed and not own.exists()
