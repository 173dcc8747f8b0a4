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
