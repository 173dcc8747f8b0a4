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

import pytest

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
