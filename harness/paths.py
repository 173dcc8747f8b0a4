"""Where each stage reads and writes, relative to the project root (where DVC runs stages).

`verify` re-runs stages into a scratch folder: `scratch_outputs` redirects features and results there
while datasets and the committed corpus stay where they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DATA = Path("data")
CORPUS = Path("leaderboard/corpus.jsonl")
DOCS = Path("docs")
_outputs = {"features": Path("features"), "results": Path("results")}


@contextmanager
def scratch_outputs(root: Path) -> Iterator[None]:
    saved = dict(_outputs)
    _outputs.update(features=root / "features", results=root / "results")
    try:
        yield
    finally:
        _outputs.update(saved)


def dataset_dir(dataset: str) -> Path:
    return DATA / dataset


def manifest_path(dataset: str) -> Path:
    return DATA / dataset / "manifest.json"


def features_dir(grid: str, backbone: str, dataset: str) -> Path:
    return _outputs["features"] / grid / backbone / dataset


def record_path(grid: str, task: str, backbone: str) -> Path:
    return _outputs["results"] / grid / task / f"{backbone}.json"


def metrics_path(grid: str, task: str, backbone: str) -> Path:
    return _outputs["results"] / grid / task / f"{backbone}.metrics.json"


def samples_path(grid: str, task: str, backbone: str) -> Path:
    return _outputs["results"] / grid / task / f"{backbone}.samples.csv"


def stage_name(grid: str, task: str, backbone: str) -> str:
    return f"{grid}-{task}@{backbone}"


def extract_stage_name(grid: str, backbone: str, dataset: str) -> str:
    return f"extract-{grid}@{backbone}-{dataset}"
