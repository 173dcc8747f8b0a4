"""`visbench-harness cache stats` and `cache gc`: what the feature cache holds, and dropping what nothing reads.

A feature set is one folder per (grid, backbone, dataset): `features/<grid>/<backbone>/<dataset>/` (the extract
stage's DVC out: `entries/` and `extraction.json`), and the same under `user/features/` for `data=` and API
runs. Each extraction also leaves `<dataset>.cache-stats.json` beside its folder (outside the DVC out, so it
changes no hash): how many images the last run found cached and how many it computed.

`cache gc` removes (or, with dry_run=true, lists) what no stage references: folders of extract stages no
longer in params.yaml (a removed grid, backbone or dataset), user feature sets whose dataset is gone, and
entries inside a live folder that no item of its dataset keys (an interrupted run's leftovers). DVC's own copy
in .dvc/cache is `dvc gc`'s to clean.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.core import paths
from harness.runs.feature_cache import STATS_SUFFIX

USER_ROOT = Path("user")


@dataclass(frozen=True)
class FeatureSet:
    root: Path  # the folder above features/ (the project, or user/)
    grid: str
    backbone: str
    dataset: str

    @property
    def folder(self) -> Path:
        return self.root / "features" / self.grid / self.backbone / self.dataset

    @property
    def stats_file(self) -> Path:
        return self.folder.with_name(self.dataset + STATS_SUFFIX)

    def entries(self) -> list[Path]:
        entries = self.folder / "entries"
        return sorted(p for p in entries.rglob("*") if p.is_file()) if entries.is_dir() else []


def feature_sets(roots: tuple[Path, ...] = (Path("."), USER_ROOT)) -> list[FeatureSet]:
    found = []
    for root in roots:
        base = root / "features"
        if not base.is_dir():
            continue
        for dataset_dir in sorted(base.glob("*/*/*")):
            if dataset_dir.is_dir():
                grid, backbone, dataset = dataset_dir.relative_to(base).parts
                found.append(FeatureSet(root, grid, backbone, dataset))
    return found


def stats_table(sets: list[FeatureSet]) -> str:
    lines = [f"{'where':<6} {'grid':<14} {'backbone':<28} {'dataset':<20} {'entries':>8} {'MiB':>9}  last run"]
    total_entries = total_bytes = 0
    for feature_set in sets:
        entries = feature_set.entries()
        size = sum(p.stat().st_size for p in entries)
        total_entries, total_bytes = total_entries + len(entries), total_bytes + size
        last = "-"
        if feature_set.stats_file.is_file():
            stats = json.loads(feature_set.stats_file.read_text())
            rate = stats["cached"] / stats["images"] if stats["images"] else 0.0
            last = f"{stats['cached']}/{stats['images']} cached ({rate:.0%} hit rate), {stats['computed']} computed"
        where = "user" if feature_set.root == USER_ROOT else "stage"
        lines.append(f"{where:<6} {feature_set.grid:<14} {feature_set.backbone:<28} {feature_set.dataset:<20} "
                     f"{len(entries):>8} {size / 2**20:>9.2f}  {last}")
    lines.append(f"{'total':<6} {'':<14} {'':<28} {'':<20} {total_entries:>8} {total_bytes / 2**20:>9.2f}")
    return "\n".join(lines)


def live_stage_sets() -> set[tuple[str, str, str]]:
    """(grid, backbone, dataset) of every extract stage params.yaml defines."""
    from harness.core.config import load_params
    from harness.pipeline import topology

    return {(grid, backbone, dataset) for grid, dataset, backbone in topology.extract_jobs(load_params())}


def garbage(sets: list[FeatureSet], live: set[tuple[str, str, str]]) -> list[Path]:
    """Folders and entry files no stage references (see the module docstring)."""
    unused: list[Path] = []
    for feature_set in sets:
        key = (feature_set.grid, feature_set.backbone, feature_set.dataset)
        manifest = (feature_set.root / "data" if feature_set.root == USER_ROOT else paths.DATA) / \
            feature_set.dataset / "manifest.json"
        if (feature_set.root != USER_ROOT and key not in live) or not manifest.is_file():
            unused.append(feature_set.folder)
            continue
        referenced = _referenced_entries(feature_set, manifest)
        if referenced is None:
            continue  # no extraction.json: a run in progress or failed; leave it to the next run
        unused += [p for p in feature_set.entries() if p.name.removesuffix(".npyz") not in referenced]
    return unused


def _referenced_entries(feature_set: FeatureSet, manifest_path: Path) -> set[str] | None:
    from harness.datasets.manifest import Manifest
    from harness.runs.feature_cache import EXTRACTION_FILE, entry_keys, read_extraction

    if not (feature_set.folder / EXTRACTION_FILE).is_file():
        return None
    extraction = read_extraction(feature_set.folder)
    manifest = Manifest.load(manifest_path)
    keys: set[str] = set()
    for item in manifest.items:
        keys.update(entry_keys(extraction["backbone"], extraction["requests"], item))
    return keys


def collect_garbage(dry_run: bool = False) -> tuple[list[Path], int]:
    """Remove (or only list) what no stage references; returns the paths and their bytes."""
    unused = garbage(feature_sets(), live_stage_sets())
    size = sum(_size(p) for p in unused)
    if not dry_run:
        for path in unused:
            if path.is_dir():
                shutil.rmtree(path)
                path.with_name(path.name + STATS_SUFFIX).unlink(missing_ok=True)
            else:
                path.unlink(missing_ok=True)
    return unused, size


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0
