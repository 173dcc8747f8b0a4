"""Shared test setup: no network, an empty Hugging Face cache, the repository root, and each xdist worker its cores.

The environment is set at import, before any test module imports `huggingface_hub` (which reads
`HF_HUB_OFFLINE` and `HF_HUB_CACHE` once, at import): hub lookups then fail fast and locally, and a
hub file cached on the developer's machine cannot make a "weights unavailable" test pass by accident.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _pin_xdist_worker_to_its_cores() -> None:
    """Under `pytest -n N`, worker i runs on its own 1/N of the usable cores, set before torch is imported.

    Every process a test starts inherits the affinity (stage commands, DVC, slurmd's jobs, podman's container), so
    torch sizes its pool to the worker's share (`torch.get_num_threads()` follows the affinity) and the records
    say so (`1threads` on 2 cores). Unpinned, the two workers of `scripts/test` each ran torch with 2 OpenMP
    threads on the 2 cores, and the threads spin at every barrier while their peer is descheduled: on the
    AVX2-only 2-core CI machine pytest took 443 s unpinned and 302-355 s pinned (five runs; the container module
    alone 251 s -> 141 s). A host run and a container run that a test compares bit for bit come from the same worker,
    so they share the thread count."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if worker.startswith("gw") and worker[2:].isdigit() and 1 < count <= len(cores):
        share, index = len(cores) // count, int(worker[2:])
        os.sched_setaffinity(0, set(cores[index * share:(index + 1) * share]))


_pin_xdist_worker_to_its_cores()

import numpy as np  # noqa: E402  (after the pinning: torch reads the affinity when it is imported)
import pytest  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
_EMPTY_HF_CACHE = tempfile.mkdtemp(prefix="visbench-test-empty-hf-cache-")
os.environ["HF_HUB_CACHE"] = _EMPTY_HF_CACHE
atexit.register(shutil.rmtree, _EMPTY_HF_CACHE, ignore_errors=True)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test with the repository root as the working directory (where params.yaml lives)."""
    monkeypatch.chdir(REPO)
    return REPO


@pytest.fixture
def root_dvc() -> Iterator[Path]:
    """The repository root, held for DVC alone: two DVC commands in one workspace fail on .dvc/tmp/rwlock, and
    scripts/test runs test modules on two workers. Tests that run DVC in the root (not a clone) take this."""
    lock = REPO / ".dvc" / "tmp" / "tests-root-dvc.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield REPO


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed docs/ built once per session by `mkdocs build --strict` into a temporary directory."""
    import subprocess
    import sys

    site = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return site


@pytest.fixture(scope="module")
def scenes(tmp_path_factory: pytest.TempPathFactory):
    """Nine tiny procedural scenes (6 train, 3 val, 64 px) for end-to-end dense and detection probes."""
    from harness.datasets.scenes import prepare_procedural_scenes

    return prepare_procedural_scenes("scenes", tmp_path_factory.mktemp("scenes"), {"train": 6, "val": 3}, seed=0,
                                     size=64)


def _fake_dense_features(manifest):
    """Random 3×3 conv features of the RGB, average-pooled to an 8×8 grid: (16, 8, 8), like a tiny ViT."""
    conv = torch.nn.Conv2d(3, 16, kernel_size=3, padding=1)
    generator = torch.Generator().manual_seed(0)
    torch.nn.init.normal_(conv.weight, generator=generator)
    torch.nn.init.normal_(conv.bias, std=0.1, generator=generator)  # not the global RNG: re-runs must match
    cache = {}

    def lookup(item):
        if item.path not in cache:
            rgb = np.asarray(Image.open(manifest.resolve(item)), dtype=np.float32) / 255.0
            with torch.no_grad():
                x = torch.relu(conv(torch.from_numpy(rgb).permute(2, 0, 1)[None]))
                cache[item.path] = torch.nn.functional.adaptive_avg_pool2d(x, 8)[0].numpy()
        return cache[item.path]

    return lookup


@pytest.fixture
def fake_dense_features():
    """`fake_dense_features(manifest)` → a feature lookup for ProbeInputs (deterministic per manifest)."""
    return _fake_dense_features


def write_image_folder(root: Path, per_split: int = 4, splits=("train", "val"), classes: int = 2) -> Path:
    """Tiny 32-px colour-blob images in `root/<split>/<class>/` (split None: `root/<class>/`)."""
    rng = np.random.default_rng(0)
    colours = [(200, 30, 30), (30, 30, 200), (30, 200, 30)]
    for split in splits:
        for label in range(classes):
            folder = root / split / f"class{label}" if split else root / f"class{label}"
            folder.mkdir(parents=True)
            for index in range(per_split):
                pixels = np.clip(np.array(colours[label]) + rng.normal(0, 20, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{index}.png")
    return root


def image_project_params(folder: Path, backbones: list[str]) -> dict:
    """params.yaml of a one-grid project `g` (classification + retrieval on the folder as dataset `tiny`)."""
    return {
        "settings": {"precision": "fp32", "batch_size": 4, "seed": 0},
        "datasets": {"tiny": {"kind": "image_folder", "root": str(folder)}},
        "probes": {
            "classification": {"pooling": "default", "layers": None, "train_split": "train", "eval_split": "val",
                               "epochs": 20, "lr": 0.01, "weight_decay": 0.0, "batch_size": 8},
            "retrieval": {"pooling": "default", "layers": None, "query_split": "val", "gallery_split": "train",
                          "recall_at": [1, 5]},
        },
        "grids": {"g": {"backbones": backbones, "tasks": {"classification": "tiny", "retrieval": "tiny"}}},
    }


@pytest.fixture
def image_project(tmp_path, monkeypatch):
    """A project folder (the working directory) whose params.yaml reads a tiny image folder; returns
    (project, images). Backbone: the random-init CIFAR ResNet-20 (32-px inputs, offline, fast)."""
    import yaml

    images = write_image_folder(tmp_path / "images")
    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.chdir(work)
    (work / "params.yaml").write_text(yaml.safe_dump(image_project_params(images, ["cifar_resnet20.random"])))
    return work, images


def repro_code_stage(workspace: Path) -> None:
    """Plain `dvc repro` of the codedeps stage in a clone: the fingerprints rewritten after an edit, as a plain
    `dvc repro` of anything does first."""
    done = subprocess.run([sys.executable, "-m", "dvc", "repro", "--single-item", "codedeps"], cwd=workspace,
                          capture_output=True, text=True, timeout=300,
                          # the stage's `python` is the venv's, as the CLI runs stages
                          env={**os.environ, "DVC_NO_ANALYTICS": "1",
                               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stdout + done.stderr
