"""The static import closure a stage's fingerprint lists covers every project module the stage really loads.

A stage depends on its role's fingerprint (harness.pipeline.fingerprints), made from `codedeps.code_closure`,
which reads import statements. A module loaded some other way (importlib, a registry's discovery, an import the
scanner misses) would be code a stage runs without depending on it: an edit there would not re-run the stage.
So a grid runs in a clone under a `sitecustomize` that, at each stage process's exit, writes down which files
of the project it had loaded; each must be in the closure of that stage's entry module and `--code` module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.dvcfiles import row_address
from harness.pipeline.codedeps import code_closure
from harness.pipeline.fingerprints import role_file, statistic_modules

ROOT = Path(__file__).resolve().parents[1]
ENTRY_KINDS = ("prepare", "extract", "probe", "collect", "site")

# Loaded by every Python process that starts with this folder on PYTHONPATH (the stages DVC starts inherit it).
SITECUSTOMIZE = '''
import atexit, json, os, sys

def _dump():
    entry = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    root = os.getcwd()
    if not entry.startswith(os.path.join(root, "harness", "stages") + os.sep):
        return
    files = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        # torch's stand-in modules (torch._classes) carry a bare "_classes.py": only real files count
        if path and os.path.isabs(path) and path.startswith(root + os.sep) and ".venv" not in path:
            files.add(os.path.relpath(os.path.abspath(path), root))
    out = os.path.join(os.environ["VISBENCH_MODULE_TRACE"], f"{os.getpid()}.json")
    with open(out, "w") as f:
        json.dump({"argv": [os.path.relpath(entry, root), *sys.argv[1:]], "files": sorted(files)}, f)

atexit.register(_dump)
'''


def _code_argument(argv: list[str]) -> str | None:
    return argv[argv.index("--code") + 1] if "--code" in argv else None


@pytest.mark.dvc
def test_every_module_a_stage_loads_is_in_its_fingerprinted_closure(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(clone)], check=True, timeout=120)
    hook, trace = tmp_path / "hook", tmp_path / "trace"
    hook.mkdir()
    trace.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {**os.environ, "PYTHONPATH": str(hook), "VISBENCH_MODULE_TRACE": str(trace), "DVC_NO_ANALYTICS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    # a fresh clone has no DVC cache: every stage of the selection runs (prepare, extract, probes)
    done = subprocess.run([sys.executable, "-m", "harness.cli.main", "grid=default", "backbone=efficientnet_lite0",
                           "task=classification,correspondence,similarity"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Where the extractions reproduce their features bit for bit, DVC skips the probes, and where the probes
    # reproduce the committed records (harness.runs.reproduction) it skips collect and site: run them anyway, to
    # see what they load.
    probes = [row_address("default", "efficientnet_lite0", f"default-{task}@efficientnet_lite0")
              for task in ("classification", "correspondence", "similarity")]
    forced = subprocess.run([sys.executable, "-m", "dvc", "repro", "--force", "--single-item", *probes, "collect",
                             "site"], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert forced.returncode == 0, forced.stdout[-3000:] + forced.stderr[-3000:]
    seen: dict[str, int] = {}
    for file in sorted(trace.glob("*.json")):
        process = json.loads(file.read_text())
        entry = process["argv"][0]
        kind = Path(entry).stem
        assert kind in ENTRY_KINDS, entry
        code = _code_argument(process["argv"])
        # what the stage's fingerprint file lists: its entry's and code's closure, and for the site the statistic
        # modules the registry discovers (`fingerprints.roles`)
        listed = (clone / role_file(kind, code if kind in ("prepare", "extract", "probe") else None)).read_text()
        closure = {line.split()[1] for line in listed.splitlines() if line and not line.startswith("#")}
        assert closure >= set(code_closure([entry, *([code] if code else [])], clone)), entry
        outside = sorted(set(process["files"]) - closure)
        assert not outside, f"{' '.join(process['argv'][:4])} loaded {outside}, which its fingerprint does not list"
        seen[kind] = seen.get(kind, 0) + 1
    # prepare: the three datasets; extract: three; probes: three (twice where the features moved); collect, site
    assert set(seen) == set(ENTRY_KINDS), seen
    assert seen["probe"] in (3, 6) and seen["prepare"] == 3, seen


def test_statistic_modules_are_found_from_any_working_directory(tmp_path, monkeypatch):
    """The site's fingerprint names the statistics modules by the package's own location, not the working
    directory's: from an empty folder the list is the same, every module there, project-relative."""
    import harness.probes.statistics

    folder = Path(harness.probes.statistics.__file__).resolve().parent
    expected = sorted(f"harness/probes/statistics/{p.name}" for p in folder.glob("*.py"))
    monkeypatch.chdir(ROOT)
    assert statistic_modules() == expected and "harness/probes/statistics/instances.py" in expected
    monkeypatch.chdir(tmp_path)
    assert statistic_modules() == expected
