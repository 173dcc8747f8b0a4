"""docs/api.md runs: every fenced python block (in order, one namespace) and every `visbench-harness` line of its
bash blocks (exit 0, or the `# exits N` its comment says), in a fresh folder with the project's params.yaml."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
import warnings
from pathlib import Path

from harness.cli.main import main

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "api.md"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(text: str) -> list[tuple[str, str]]:
    return [(language, body) for language, body in FENCE.findall(text)]


def test_the_page_has_an_example_of_each_feature():
    text = PAGE.read_text()
    for needle in ("harness.run(", ".evaluate(features, labels", "load_probe(", "publish run=", "data=my_photos",
                   "promote run=", "cache stats", "cache gc", "clip_vitb32_proj", "finetune_classification",
                   "on_bad_image", "train_dataset="):
        assert needle in text, needle


def test_every_example_on_the_page_runs(tmp_path, monkeypatch):
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    ran = 0
    for language, body in blocks(PAGE.read_text()):
        if language == "python":
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                exec(compile(body, f"{PAGE.name} block {ran}", "exec"), namespace)
            ran += 1
        elif language == "bash":
            for line in body.splitlines():
                command, _, comment = line.partition("#")
                if not command.strip():
                    continue
                words = shlex.split(command)
                assert words[0] == "visbench-harness", line
                expected = int(comment.split("exits", 1)[1]) if "exits" in comment else 0
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    assert main(words[1:]) == expected, line
                ran += 1
    assert ran >= 15
    assert Path("my_head/README.md").is_file() and Path("user/corpus.jsonl").is_file()
    assert "my_photos" in Path("params.yaml").read_text()  # promoted
