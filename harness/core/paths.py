"""Where each stage reads and writes, relative to the project root (where DVC runs stages).

`verify` re-runs stages into a scratch folder: `scratch_outputs` redirects features and results there
while datasets and the committed corpus stay where they are. The Python API and `data=` runs use
`workspace`: prepared data, features, results and failures all under one folder (`user/` by default), so
they never touch the pipeline's outputs or the frozen corpus.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DATA = Path("data")
CORPUS = Path("leaderboard/corpus.jsonl")
FAILED_CORPUS = Path("leaderboard/failures.jsonl")  # failed attempts, shown apart from the ok records
FAILURES = Path("failures")  # each failed stage's latest attempt (git-tracked, never a DVC out)
DOCS = Path("docs")
_outputs = {"data": DATA, "features": Path("features"), "results": Path("results"), "failures": FAILURES}


@contextmanager
def scratch_outputs(root: Path) -> Iterator[None]:
    saved = dict(_outputs)
    _outputs.update(features=root / "features", results=root / "results", failures=root / "failures")
    try:
        yield
    finally:
        _outputs.update(saved)


@contextmanager
def workspace(root: Path) -> Iterator[None]:
    """Every stage output (and the prepared data) under `root`: root/data, root/features, root/results, ..."""
    saved = dict(_outputs)
    _outputs.update(data=root / "data", features=root / "features", results=root / "results",
                    failures=root / "failures")
    try:
        yield
    finally:
        _outputs.update(saved)


def dataset_dir(dataset: str) -> Path:
    return _outputs["data"] / dataset


def manifest_path(dataset: str) -> Path:
    return _outputs["data"] / dataset / "manifest.json"


def features_dir(grid: str, backbone: str, dataset: str) -> Path:
    return _outputs["features"] / grid / backbone / dataset


def record_path(grid: str, task: str, backbone: str, shot: tuple[int, int] | None = None) -> Path:
    """A stage's record; a few-shot stage writes one per (k, seed) `shot` (a `harness.core.run_key.Shot`) into
    its folder. `harness.core.run_key.RunKey` names these files for a run."""
    if shot is None:
        return _outputs["results"] / grid / task / f"{backbone}.json"
    k, seed = shot
    return fewshot_dir(grid, task, backbone) / f"k{k}-s{seed}.json"


def metrics_path(grid: str, task: str, backbone: str) -> Path:
    """The stage's DVC metrics file; beside a few-shot stage's folder, since DVC outs may not overlap."""
    return _outputs["results"] / grid / task / f"{backbone}.metrics.json"


def samples_path(grid: str, task: str, backbone: str, shot: tuple[int, int] | None = None) -> Path:
    if shot is None:
        return _outputs["results"] / grid / task / f"{backbone}.samples.csv"
    k, seed = shot
    return fewshot_dir(grid, task, backbone) / f"k{k}-s{seed}.samples.csv"


def head_path(grid: str, task: str, backbone: str, shot: tuple[int, int] | None = None) -> Path:
    """A trained probe's head beside its record (`harness.heads.file`): safetensors, weights and identity."""
    record = record_path(grid, task, backbone, shot)
    return record.with_name(record.name.removesuffix(".json") + ".head.safetensors")


def fewshot_dir(grid: str, task: str, backbone: str) -> Path:
    """A few-shot stage's DVC out: every (k, seed) record and samples file of one task × backbone."""
    return _outputs["results"] / grid / task / backbone


def extract_stage_name(grid: str, backbone: str, dataset: str) -> str:
    """One foreach group per (grid, dataset), so its template lists exactly the params its features read."""
    return f"extract-{grid}-{dataset}@{backbone}"


CODE_STAGE = "codedeps"  # rewrites the code fingerprints every other stage depends on (harness.pipeline.fingerprints)


def prepare_stage_name(dataset: str) -> str:
    return f"prepare-{dataset}"


def failure_path(stage: str) -> Path:
    """Where a stage's failed attempt is kept (git-tracked, never a DVC out, so it never replaces an ok
    record): `failures/<stage>.jsonl`, written and read only through harness.runs.failures (its format)."""
    return _outputs["failures"] / f"{stage.replace('@', '-at-')}.jsonl"
