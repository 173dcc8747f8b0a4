"""docs/extend.md, followed literally on a temporary clone: the plugin file and the params.yaml additions it
shows, an image folder, and the command it gives. The plugin's backbone lands as a control, and the plugin is
a DVC dependency of exactly the stages that use it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import repro_code_stage, write_image_folder

from harness.core.dvcfiles import row_address
from harness.executors.experiments import experiment_name, experiment_ref

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r'^```(?P<lang>\w+) title="(?P<title>[^"]+)"\n(?P<body>.*?)^```$', re.M | re.S)
pytestmark = pytest.mark.dvc


def documented_blocks() -> dict[str, str]:
    """{title: content} of the titled code blocks of docs/extend.md."""
    return {m["title"]: m["body"] for m in FENCE.finditer((REPO / "docs" / "extend.md").read_text())}


def _merge(base: dict, additions: dict) -> dict:
    merged = dict(base)
    for key, value in additions.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        elif isinstance(value, list) and isinstance(merged.get(key), list):
            merged[key] = [*merged[key], *value]
        else:
            merged[key] = value
    return merged


@pytest.fixture(scope="module")
def followed(tmp_path_factory):
    """A clone where the page's steps were done and its command ran; (clone, completed process)."""
    clone = tmp_path_factory.mktemp("extend") / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(clone)], check=True, timeout=120)
    (clone / ".venv").symlink_to(REPO / ".venv")
    blocks = documented_blocks()
    plugin = clone / "plugins" / "tiny_net.py"
    plugin.parent.mkdir()
    plugin.write_text(blocks["plugins/tiny_net.py"])
    write_image_folder(clone / "my_images")
    params_file = clone / "params.yaml"
    params = _merge(yaml.safe_load(params_file.read_text()), yaml.safe_load(blocks["params.yaml (additions)"]))
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    command = blocks["run"].strip().split()
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(command, cwd=clone, capture_output=True, text=True, timeout=900, env=env)
    return clone, done


def test_the_documented_command_runs_the_plugin_backbone_as_a_control(followed):
    clone, done = followed
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    corpus = {json.loads(line)["run_id"]: json.loads(line)
              for line in (clone / "leaderboard" / "corpus.jsonl").read_text().splitlines()}
    for task in ("classification", "retrieval"):
        control = corpus[f"mine-{task}@tiny_net.random"]
        assert control["status"] == "ok" and control["backbone"]["control"] is True
        assert control["backbone_name"] == "tiny_net@random" and control["backbone"]["weights"]["kind"] == "random"
        assert corpus[f"mine-{task}@efficientnet_lite0"]["backbone"]["control"] is False


def test_the_plugin_is_a_dependency_of_exactly_the_stages_using_it(followed):
    clone, done = followed
    assert done.returncode == 0
    from harness.core.dvcfiles import load_documents

    # by (file, stage): each backbone's row of the grid is a dvc.yaml of its own, with its own member of the group
    stages = {(path.as_posix(), name): stage for path, document in load_documents(clone).items()
              for name, stage in document["stages"].items()}
    users = [key for key, stage in stages.items() if "plugins/tiny_net.py" in json.dumps(stage)]
    # what rewrites the fingerprints, and what reads them: the plugin backbone's extraction, in its row
    assert users == [("dvc.yaml", "codedeps"), ("pipelines/mine/tiny_net.random/dvc.yaml", "extract-mine-my_images")]
    plugin_row = stages[("pipelines/mine/tiny_net.random/dvc.yaml", "extract-mine-my_images")]
    assert list(plugin_row["foreach"]) == ["tiny_net.random"]
    assert " --code plugins/tiny_net.py " in plugin_row["do"]["cmd"]
    registry_row = stages[("pipelines/mine/efficientnet_lite0/dvc.yaml", "extract-mine-my_images")]
    assert " --code harness/backbones/efficientnet_lite.py " in registry_row["do"]["cmd"]
    before = changed_deps(clone)
    plugin = clone / "plugins" / "tiny_net.py"
    original = plugin.read_text()
    plugin.write_text(original + "\n# an edit\n")
    try:
        assert changed_deps(clone) - before == {"codedeps"}  # the edit reaches stages through the fingerprints
        repro_code_stage(clone)
        assert changed_deps(clone) - before == {"extract-mine-my_images@tiny_net.random"}
    finally:  # the clone is shared by the module's tests: the override test expects its features current
        plugin.write_text(original)
        repro_code_stage(clone)


def changed_deps(clone: Path) -> set[str]:
    """Stages whose dependencies `dvc status` says changed (a fresh clone's missing outputs are not that)."""
    status = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=clone,
                            capture_output=True, text=True, timeout=300, env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    assert status.returncode == 0, status.stderr
    from harness.core.dvcfiles import stage_of

    return {stage_of(stage) for stage, entries in json.loads(status.stdout).items()
            if any("changed deps" in entry for entry in entries if isinstance(entry, dict))}


def test_a_plugin_backbone_without_weights_is_refused_as_pretrained(followed):
    clone, _ = followed
    original = (clone / "params.yaml").read_text()
    params = yaml.safe_load(original)
    params["grids"]["mine"]["backbones"] = ["tiny_net"]
    (clone / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        done = subprocess.run([sys.executable, "-m", "harness.cli.main", "grid=mine", "dry_run=true"], cwd=clone,
                              capture_output=True, text=True, timeout=300)
    finally:  # the clone is shared by the module's tests: the next one runs the documented grid
        (clone / "params.yaml").write_text(original)
    assert done.returncode == 2
    assert "tiny_net has no weights" in done.stderr and "tiny_net@random" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_probe_override_runs_as_an_experiment_and_leaves_the_corpus_alone(followed, monkeypatch):
    """`probes.retrieval.recall_at=[1,2]` on the command line: a DVC experiment in a temporary workspace,
    compared metric by metric with the committed record; the workspace's records and corpus are untouched."""
    clone, done = followed
    assert done.returncode == 0
    subprocess.run(["git", "add", "-A"], cwd=clone, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "mine"], cwd=clone,
                   check=True)
    corpus = (clone / "leaderboard" / "corpus.jsonl").read_bytes()
    command = [sys.executable, "-m", "harness.cli.main", "grid=mine", "task=retrieval", "backbone=tiny_net@random",
               "probes.retrieval.recall_at=[1,2]"]
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    # The same override run on this commit before: DVC refuses a second experiment of one name, so the run must
    # replace it. An experiment ref of that name planted on HEAD's commit stands for the earlier run (a second real
    # run would cost the test ~25 s).
    head = _git(clone, "rev-parse", "HEAD").strip()
    monkeypatch.chdir(clone)  # experiment_ref reads HEAD of the working directory's repository
    stale = experiment_ref(experiment_name(["probes.retrieval.recall_at=[1, 2]"], ["mine-retrieval@tiny_net.random"]))
    assert stale and head in stale.replace("/", "")
    _git(clone, "update-ref", stale, head)
    run = subprocess.run(command, cwd=clone, capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "was run on this commit before; a successful run replaces it" in run.stdout + run.stderr
    rows = {line.split()[1]: line.split()[2:] for line in run.stdout.splitlines()
            if line.startswith("mine-retrieval@tiny_net.random ") and " Δ " not in line}
    assert rows["recall@2"][0] == "-" and rows["recall@5"][1] == "-"  # only the experiment has recall@2
    assert rows["map"][0] == rows["map"][1]  # recall_at does not change the ranking
    # the headline's paired difference over the same queries, with its interval and the boards' verdict
    assert re.search(r"^mine-retrieval@tiny_net\.random +map Δ \+0\.0000 \[\+0\.0000, \+0\.0000\] over \d+ "
                     r"query samples \(paired bootstrap, 95%\): tied$", run.stdout, re.M), run.stdout[-2000:]
    # the probe alone ran: the prepared data and the features came from DVC's cache
    ran = re.findall(r"Running stage '([^']+)'", run.stdout + run.stderr)
    # the -S edit of params.yaml reaches the probe through its grid's params file, which the codedeps stage writes
    assert ran[:1] == ["codedeps"], ran
    probe = row_address("mine", "tiny_net.random", "mine-retrieval@tiny_net.random")
    assert ran[1:] in ([], [probe]), ran  # []: run cache restored
    extract = row_address("mine", "tiny_net.random", "extract-mine-my_images@tiny_net.random")
    unchanged = f"Stage '{extract}' didn't change"
    assert unchanged in run.stdout + run.stderr
    refs = _git(clone, "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps").splitlines()
    overrides = [ref.split() for ref in refs if "/override-" in ref]
    assert len(overrides) == 1 and overrides[0][0] == stale and overrides[0][1] != head, refs  # replaced
    assert (clone / "leaderboard" / "corpus.jsonl").read_bytes() == corpus
    assert subprocess.run(["git", "status", "--porcelain", "--", "results", "leaderboard", "dvc.lock"], cwd=clone,
                          capture_output=True, text=True).stdout == ""


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_the_documented_score_command_ranks_the_plugin_beside_the_board(followed):
    clone, done = followed
    assert done.returncode == 0
    command = documented_blocks()["score"].strip().split()
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "NO_MKDOCS_2_WARNING": "1"}
    scored = subprocess.run(command, cwd=clone, capture_output=True, text=True, timeout=900, env=env)
    assert scored.returncode == 0, scored.stdout[-3000:] + scored.stderr[-3000:]
    rows = [line for line in scored.stdout.splitlines() if line.startswith("| ")]
    assert any("[tiny_net@random@yours](" in row for row in rows), scored.stdout
    assert any("[efficientnet_lite0](" in row for row in rows)  # the committed rows are there too
    assert subprocess.run(["git", "status", "--porcelain", "--", "leaderboard", "results"], cwd=clone,
                          capture_output=True, text=True).stdout == ""  # never the corpus
