"""Small CLI answers (issue 48 item 6): a dry run writes nothing, `checkpoint=PATH` on the command line names where
weights of your own go, `harness.run` outside a project names the missing params.yaml."""

from __future__ import annotations

from pathlib import Path

from harness.cli.main import main


def _files(root: Path) -> dict[str, bytes]:
    """The project's files, but DVC's own state: `dvc status` keeps a hash cache under .dvc/site_cache."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] != ".dvc"}


def test_a_dry_run_writes_no_pipeline_file(image_project, caplog):
    """The project has never generated its pipeline: a real run would write dvc.yaml, the grid files and the code
    fingerprints; `dry_run=true` leaves every file as it was and says the pipeline is out of date."""
    project, _ = image_project
    before = _files(project)
    caplog.set_level("INFO", logger="visbench")
    main(["grid=g", "dry_run=true"])  # DVC's status of a project without .dvc/ may fail: the files are the point
    assert _files(project) == before
    assert "out of date with params.yaml" in caplog.text


def test_checkpoint_on_the_command_line_names_params_yaml(image_project, capsys):
    for args in (["task=classification", "checkpoint=weights/mine.pt"], ["score", "checkpoint=x.pt"],
                 ["task=classification", "checkpoints.resnet18=x.pt"]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "`checkpoints: {NAME: PATH}`" in err, err


def test_harness_run_outside_a_project_names_the_missing_params_yaml(tmp_path, monkeypatch):
    import pytest

    import harness
    from harness.core.config import ConfigError

    monkeypatch.chdir(tmp_path)  # no params.yaml here
    with pytest.raises(ConfigError, match=r"^params\.yaml is missing here, .*pass params_file=PATH"):
        harness.run("cifar_resnet20@random", "classification", str(tmp_path))


def test_what_local_commands_write_is_ignored_by_git():
    """`dvc plots show` writes dvc_plots/, data= and score runs user/: neither is ever committed by accident."""
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    for path in ("dvc_plots/index.html", "user/corpus.jsonl"):
        checked = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=repo)
        assert checked.returncode == 0, f"{path} is not ignored by .gitignore"
