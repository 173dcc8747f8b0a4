"""Procedural-scene throughput: render only, render + targets, and the whole prepare (files written).

Prints scenes/s and ms/scene per image size, single process. Usage:

    .venv/bin/python benchmarks/scene_render.py [--scenes 100] [--sizes 224,64]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.datasets.scene_render import render_scene
from harness.datasets.scenes import derive_targets, prepare_procedural_scenes, sample_scene


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenes", type=int, default=100)
    parser.add_argument("--sizes", default="224,64")
    args = parser.parse_args()
    n = args.scenes
    print(f"{n} scenes per row, one process; higher scenes/s is better")
    print(f"{'size':>5} {'stage':<24} {'scenes/s':>9} {'ms/scene':>9} {'MiB/scene':>10}")
    for size in (int(s) for s in args.sizes.split(",")):
        scenes = [sample_scene(np.random.default_rng([0, 0, i]), size) for i in range(n)]
        started = time.perf_counter()
        renders = [render_scene(scene) for scene in scenes]
        _row(size, "render", n, time.perf_counter() - started)
        started = time.perf_counter()
        for scene, render in zip(scenes, renders, strict=True):
            derive_targets(scene, render, keypoint_sigma=2.0, occlusion_threshold=0.05)
        _row(size, "targets (from renders)", n, time.perf_counter() - started)
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            prepare_procedural_scenes("bench", Path(tmp), {"train": n}, seed=0, size=size)
            elapsed = time.perf_counter() - started
            mib = sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file()) / n / 2**20
            _row(size, "prepare (all, written)", n, elapsed, mib)


def _row(size: int, stage: str, n: int, seconds: float, mib: float | None = None) -> None:
    size_text = f"{mib:10.2f}" if mib is not None else f"{'':>10}"
    print(f"{size:>5} {stage:<24} {n / seconds:9.1f} {1000 * seconds / n:9.2f} {size_text}")


if __name__ == "__main__":
    main()
