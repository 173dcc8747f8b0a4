"""`visbench-harness score`: a backbone on a committed board's exact task, data and protocol, ranked beside its
rows in user/, never in the corpus; an unknown board is a one-line error listing the boards."""

from __future__ import annotations

from pathlib import Path

from harness.cli.main import main
from harness.core import paths
from harness.leaderboard.queries.comparability import comparability_key
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
    assert len(err.strip().splitlines()) == 1 and "is no board of the committed corpus" in err and "board=?" in err
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


def _interval_text(record) -> str:
    """The record's headline and 95% interval by the project's bootstrap (harness.runs.intervals), as printed."""
    from harness.runs.intervals import metric_interval
    from harness.runs.samples import read_samples

    _, columns = read_samples(record.samples)
    interval = metric_interval(record, record.headline_metric, columns)
    return f"{record.headline:.4f} [{interval.low:.4f}, {interval.high:.4f}]"


def test_score_returns_a_typed_result_with_the_interval_and_verdict_it_prints(image_project, capsys):
    from harness.runs.samples import read_samples
    from harness.user.answer import BETTER, TIED, TIED_TOLERANCE, WORSE
    from harness.user.score import ScoreResult, score

    project, _ = image_project
    code = _committed_board(project)
    result = score("cifar_resnet56@random", code)
    assert isinstance(result, ScoreResult) and result.board.code == code
    headline, mine = result.headline, result.record
    assert (headline.metric, headline.value) == (mine.headline_metric, mine.headline)
    assert _interval_text(mine) in str(result)  # the interval the stage's own bootstrap gives
    versus = headline.versus  # the board ranks no committed row: its control
    assert versus is not None and versus.role == "committed control" and versus.against == "cifar_resnet20@random"
    (theirs,) = read_records(project / paths.CORPUS)
    ids_a, a = read_samples(mine.samples)
    ids_b, b = read_samples(theirs.samples)
    order = [ids_b.index(i) for i in ids_a]
    assert abs(versus.test.difference - float((a["top1"] - b["top1"][order]).mean())) < 1e-12
    assert versus.test.low <= versus.test.difference <= versus.test.high
    # the paired test's rule (harness.leaderboard.statistics.analysis.verdict), read from your side: top1 is
    # higher-better
    expected = TIED if versus.p_value >= 0.05 else {True: BETTER, False: WORSE}[versus.test.difference > 0]
    assert versus.verdict in ((expected, TIED_TOLERANCE) if expected != TIED else (TIED,))
    printed = str(result)
    assert all(line in printed for line in result.table) and versus.verdict in printed.splitlines()[-1]
    capsys.readouterr()
    assert main(["score", "backbone=cifar_resnet56@random", f"board={code}", "build_site=false"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == printed.splitlines()[-1]  # the CLI prints the same


def test_data_runs_print_each_headline_with_its_interval(image_project, tmp_path, capsys):
    from conftest import write_image_folder

    folder = write_image_folder(tmp_path / "mine", per_split=4, splits=(None,), classes=2)
    capsys.readouterr()
    assert main(["task=classification", "backbone=cifar_resnet20@random,cifar_resnet56@random", f"data={folder}",
                 "build_site=false"]) == 0
    out = capsys.readouterr().out
    records = read_records(Path("user/corpus.jsonl"))
    assert len(records) == 2
    for record in records:
        (line,) = [line for line in out.splitlines() if line.startswith(record.backbone_name + " ")]
        assert _interval_text(record) in line and "no committed row on its board" in line


def test_an_unlisted_plugin_backbone_names_the_plugins_step(image_project, capsys):
    project, _ = image_project
    code = _committed_board(project)
    capsys.readouterr()
    assert main(["score", "backbone=tiny_net.random", f"board={code}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "unknown backbone 'tiny_net@random'" in err
    assert "params.yaml's `plugins:`" in err


def test_board_question_mark_lists_the_boards_as_a_table(image_project, capsys):
    project, _ = image_project
    code = _committed_board(project)
    capsys.readouterr()
    assert main(["score", "board=?"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == ["Board", "Runs", "What", "it", "ranks"]
    (row,) = lines[1:]
    assert row.startswith(code) and "classification on tiny (val), linear-probe-adamw/v3" in row
