"""Shared test setup: no network, an empty Hugging Face cache, and the repository root.

The environment is set at import, before any test module imports `huggingface_hub` (which reads
`HF_HUB_OFFLINE` and `HF_HUB_CACHE` once, at import): hub lookups then fail fast and locally, and a
hub file cached on the developer's machine cannot make a "weights unavailable" test pass by accident.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

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
