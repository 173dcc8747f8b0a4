"""`visbench-harness score`: a backbone on a committed board's exact task, data and protocol, ranked beside its
rows in user/, never in the corpus; an unknown board is a one-line error listing the boards."""

from __future__ import annotations

from pathlib import Path

from harness.cli.main import main
from harness.core import paths
from harness.leaderboard.comparability import comparability_key
from harness.runs.records import read_records, write_records


def _committed_board(project: Path) -> str:
    """Make the project's corpus one committed run (classification on `tiny`, CIFAR ResNet-20 at random), as
    the pipeline would leave it: record and per-sample file under results/; the board's code."""
    import harness

    result = harness.run("cifar_resnet20@random", "classification", "tiny", workspace=".")
    write_records(project / paths.CORPUS, [result.record])
    return f"B-{comparability_key(result.record)[:4]}"


def test_score_ranks_your_run_beside_the_committed_rows(image_project, capsys):
    project, _ = image_project
    code = _committed_board(project)
    corpus_before = (project / paths.CORPUS).read_bytes()
    capsys.readouterr()
    assert main(["score", "backbone=cifar_resnet20@random", f"board={code}", "build_site=false"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| control |")]
    committed = [r for r in rows if "[cifar_resnet20@random](" in r]
    yours = [r for r in rows if "[cifar_resnet20@random@yours](" in r]
    assert len(committed) == len(yours) == 1, out
    # the same backbone, data and protocol: the same number, interval and per-sample scores
    assert committed[0].split(" | ")[2] == yours[0].split(" | ")[2]
    assert (project / paths.CORPUS).read_bytes() == corpus_before  # never the corpus
    (mine,) = read_records(project / "user" / "corpus.jsonl")
    (theirs,) = read_records(project / paths.CORPUS)
    assert comparability_key(mine) == comparability_key(theirs) and mine.metrics == theirs.metrics


def test_the_user_site_shows_the_board_with_your_row(image_project):
    project, _ = image_project
    code = _committed_board(project)
    assert main(["score", "backbone=cifar_resnet20@random", f"board={code}"]) == 0
    page = (project / "user" / "docs" / "tasks" / "classification.md").read_text()
    assert f"Board **{code}**" in page
    assert "[cifar_resnet20@random](" in page and "[cifar_resnet20@random@yours](" in page
    chart = next((project / "user" / "docs" / "plots" / "boards").glob("*.svg")).read_text()
    assert "cifar_resnet20@random@yours" in chart


def test_an_unknown_board_is_one_line_listing_the_boards(image_project, capsys):
    project, _ = image_project
    code = _committed_board(project)
    capsys.readouterr()
    assert main(["score", "backbone=cifar_resnet20@random", "board=B-0000"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is no board of the committed corpus" in err and code in err
    assert not (project / "user").exists()  # refused before any work
    assert main(["score", "board=" + code]) == 2  # backbone= missing


def test_the_user_site_is_the_leaderboards_twin_and_builds_strict(image_project):
    """The user config is derived from the leaderboard's mkdocs.yml (same extensions, scripts, styles, theme), so
    boards render as tables and folded blocks as <details>; its home page names user/corpus.jsonl; no warning."""
    import os
    import subprocess
    import sys

    import yaml

    project, _ = image_project
    code = _committed_board(project)
    assert main(["score", "backbone=cifar_resnet20@random", f"board={code}"]) == 0
    main_config = yaml.safe_load((Path(__file__).resolve().parents[1] / "mkdocs.yml").read_text())
    user_config = yaml.safe_load((project / "user" / "mkdocs.yml").read_text())
    for key in ("markdown_extensions", "extra_javascript", "extra_css", "theme"):
        assert user_config[key] == main_config[key], key
    assert user_config["site_name"] != main_config["site_name"]
    home = (project / "user" / "docs" / "index.md").read_text()
    assert "user/corpus.jsonl" in home and "Each number comes from one validated run record" not in home
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "user/mkdocs.yml"],
                           capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0 and "WARNING" not in built.stderr, built.stderr
    board = (project / "user" / "site" / "tasks" / "classification" / "index.html").read_text()
    assert "<table>" in board and "| Rank |" not in board
    assert "<details" in board and '??? info "' not in board
