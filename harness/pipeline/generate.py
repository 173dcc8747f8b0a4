"""Generate the pipeline's dvc.yaml files and their inputs from params.yaml, and keep them fresh.

    visbench-harness pipeline          # rewrite them (the CLI also does this before every run)
    visbench-harness pipeline check    # exit 1 if a committed one differs from a fresh generation

What the documents hold: `harness.pipeline.documents`; their targets and commands: `harness.pipeline.targets`;
their locks: `harness.pipeline.locks`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from harness.core import dvcfiles, paths
from harness.core.atomic import write_text_atomic
from harness.core.config import PARAMS_FILE, Params, load_params
from harness.core.registry import PACKAGE_ROOT
from harness.pipeline import fingerprints
from harness.pipeline.documents import DVC_FILE, HEADER, documents, dump, metrics_files, render
from harness.pipeline.locks import prune_lock, relocate_lock_entries, stale_lock_entries
from harness.pipeline.stage_model import StageSpec, read_stages
from harness.pipeline.stage_specs import BENCHMARK_RESULTS, RELEASES_FOLDER, stage_specs
from harness.pipeline.targets import stage_names

STAMP = Path(".dvc/tmp/visbench-pipeline.json")  # the source key of the last successful check + generation

def ensure_input_folders() -> None:
    """Create the folders collect and site read before any stage has written into them (failures/, the frozen
    releases, benchmark results): DVC refuses a missing dependency, and a new project (or a clone of one) may
    have none yet. A `.gitkeep` lets git carry the empty folder."""
    for folder in (paths.FAILURES, RELEASES_FOLDER, BENCHMARK_RESULTS):
        if not folder.is_dir():
            folder.mkdir(parents=True)
            (folder / ".gitkeep").write_text("")


def grid_params(stages: list[StageSpec], params_file: Path = PARAMS_FILE) -> dict[Path, str]:
    """Each grid's params file (dvcfiles.grid_params_file) as text: the params.yaml values its stages read,
    under the same dotted keys, in their first-read order, read with DVC's own YAML reader so that DVC finds
    the very values it would find in params.yaml (YAML 1.2: `1e-3` is a number)."""
    from dvc.utils.serialize import load_yaml

    raw = load_yaml(params_file)
    by_grid: dict[str, list[str]] = {}
    for stage in stages:
        if stage.grid is not None:
            by_grid.setdefault(stage.grid, []).extend(stage.params)
    files = {}
    for grid, keys in by_grid.items():
        values: dict[str, Any] = {}
        for key in dict.fromkeys(keys):
            source, target, parts = raw, values, key.split(".")
            for part in parts[:-1]:
                source, target = source[part], target.setdefault(part, {})
            target[parts[-1]] = source[parts[-1]]
        files[dvcfiles.grid_params_file(grid)] = json.dumps(values, indent=1) + "\n"
    return files


def write_inputs(params: Params, docs: dict[Path, dict[str, Any]] | None = None) -> list[str]:
    """What the stages read besides data, written from params.yaml and the code: the code fingerprints and each
    grid's params file (the `codedeps` stage's outputs); the files rewritten."""
    changed = fingerprints.write(params)
    for path, text in grid_params(_specs(params, docs)).items():
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, text)
            changed.append(path.as_posix())
    return changed


def _specs(params: Params, docs: dict[Path, dict[str, Any]] | None = None) -> list[StageSpec]:
    """The pipeline's stages: read back from `docs` where the caller has generated them, else built."""
    return list(read_stages(docs).values()) if docs is not None else stage_specs(params)


def _stale_files(docs: dict[Path, dict[str, Any]], root: Path) -> list[Path]:
    """Row files (and their locks) of grids or backbones params.yaml no longer has, params files of grids it no
    longer has, and the files of an earlier layout (one dvc.yaml and lock per grid)."""
    folder = root / dvcfiles.FOLDER
    params_name = dvcfiles.grid_params_file("x").name
    present = [*(root / p for p in dvcfiles.dvc_files(root) if p != DVC_FILE),
               *folder.glob(f"*/*/{dvcfiles.LOCK_NAME}"), *folder.glob(f"*/{dvcfiles.LOCK_NAME}"),
               *folder.glob(f"*/{dvcfiles.ROOT_FILE.name}"), *folder.glob(f"*/{params_name}")]
    grids = {grid for p in docs if (grid := dvcfiles.file_grid(p)) is not None}
    wanted = ({root / p for p in docs} | {root / dvcfiles.lock_of(p) for p in docs}
              | {root / dvcfiles.grid_params_file(grid) for grid in grids})
    return sorted(p for p in set(present) if p not in wanted)


def write(params: Params, root: Path = Path(".")) -> bool:
    """Regenerate every dvc.yaml and the code fingerprints; drop lock entries of stages no file defines any
    more, and the files of grids params.yaml no longer has; True when any dvc.yaml changed."""
    ensure_input_folders()
    docs = documents(params)
    write_inputs(params, docs)
    changed = False
    for path in docs:  # a new grid's folder, before its lock is written
        (root / path).parent.mkdir(parents=True, exist_ok=True)
    relocate_lock_entries(docs, root)
    for stale in _stale_files(docs, root):
        stale.unlink()
        changed = changed or stale.name == DVC_FILE.name
        for folder in (stale.parent, stale.parent.parent):  # a row's folder, then its grid's, once empty
            if folder != root / dvcfiles.FOLDER and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    for path, document in docs.items():
        target = root / path
        prune_lock(stage_names(document), dvcfiles.lock_of(target))
        text = HEADER + dump(document)
        if target.is_file() and target.read_text() == text:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, text)
        changed = True
    return changed


def source_key(params: Params, params_file: Path = PARAMS_FILE) -> str:
    """A hash of everything the generated dvc.yaml (and check_params' verdict) is a function of: params.yaml,
    the harness's code and the plugins'. Equal keys → the last check and generation still hold."""
    digest = hashlib.sha256(params_file.read_bytes())
    files = sorted(PACKAGE_ROOT.rglob("*.py"))
    for plugin in params.plugins:
        path = Path(plugin)
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file).encode())
        digest.update(file.read_bytes() if file.is_file() else b"<missing>")
    return digest.hexdigest()


def ensure_fresh(params: Params) -> bool:
    """Check params.yaml against the registries and regenerate dvc.yaml, unless neither params.yaml, the code
    nor dvc.yaml changed since the last time this succeeded (then nothing heavy is imported at all).
    True when dvc.yaml was rewritten."""
    ensure_input_folders()
    stamp = _stamp(params)
    if _read_stamp() == stamp:
        return False
    changed = write(params)  # runs check_params
    _write_stamp(stamp)
    return changed


def _files_key() -> str | None:
    """A hash of every dvc.yaml of the pipeline (None before the first generation)."""
    files = dvcfiles.dvc_files()
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _metrics_key(params: Params) -> str:
    """Which DVC metrics files exist: the row files declare those (`metrics_files`), so a new one regenerates."""
    digest = hashlib.sha256()
    for grid, spec in params.grids.items():
        for backbone in spec.backbones:
            for file in metrics_files(params, grid, backbone):
                digest.update(f"{grid}/{file}".encode() + b"\0")
    return digest.hexdigest()


def _stamp(params: Params) -> dict[str, str | None]:
    return {"source": source_key(params), "dvc_yaml": _files_key(), "metrics": _metrics_key(params)}


def _read_stamp() -> object:
    """The last stamp, or None where there is none to trust: absent, unreadable (another uid's, in a container
    run with --user) or not JSON. The check then runs again and writes its own."""
    try:
        return json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return None


def _write_stamp(stamp: dict[str, str | None]) -> None:
    stamp = {**stamp, "dvc_yaml": _files_key()}
    STAMP.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(STAMP, json.dumps(stamp))


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    params = load_params()
    if args == ["check"]:
        stamp = _stamp(params)
        rendered = render(params)  # runs check_params
        stale_files = [p.as_posix() for p, text in rendered.items() if not p.is_file() or p.read_text() != text]
        stale_files += [p.as_posix() for p in _stale_files(documents(params), Path("."))]
        if stale_files:
            print(f"stale: {', '.join(stale_files)}: run `visbench-harness pipeline` and commit dvc.yaml and "
                  f"{dvcfiles.FOLDER}/", file=sys.stderr)
            return 1
        stale_values = [p.as_posix() for p, text in grid_params(stage_specs(params)).items()
                        if not p.is_file() or p.read_text() != text]
        if stale_values:
            print(f"stale: {', '.join(stale_values)}: run `visbench-harness pipeline` and commit them", file=sys.stderr)
            return 1
        stale = fingerprints.stale(params)
        if stale:
            print(f"code fingerprints are stale ({', '.join(stale)}): run `visbench-harness pipeline` and commit "
                  f"{fingerprints.FOLDER}/", file=sys.stderr)
            return 1
        if not any(stale_lock_entries(stage_names(d), dvcfiles.lock_of(p)) for p, d in documents(params).items()):
            # all ensure_fresh would have done (nothing to prune from a lock): the next run skips the check;
            # the image's build runs this, so each `docker run` starts ~4 s sooner
            _write_stamp(stamp)
        print("the pipeline (dvc.yaml, pipelines/*/*/dvc.yaml) is up to date")
        return 0
    if args == ["inputs"]:  # the codedeps stage
        from harness.core.registry import load_plugins

        load_plugins(params.plugins)  # their backbones, datasets and probes name roles too
        changed = write_inputs(params)
        print(f"stage inputs: {len(changed)} rewritten" + (f" ({', '.join(changed)})" if changed else ""))
        return 0
    if args:
        print("usage: visbench-harness pipeline [check]", file=sys.stderr)
        return 2
    print("the pipeline (dvc.yaml, pipelines/*/*/dvc.yaml) " + ("regenerated" if write(params) else "unchanged"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
