"""Procedural-scene throughput: render only, render + targets, and the whole prepare (files written).

Records scenes/s per image size, single process, --reps repetitions of each stage (benchmarks/runner.py), the
bytes written per scene, and as ratios how much of the whole prepare's cost the render alone is and what the
smaller size saves. Writes benchmarks/results/scene_render-<machine>.json. Usage:

    .venv/bin/python benchmarks/scene_render.py [--scenes 100] [--sizes 224,64] [--reps 3]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from runner import Bench, add_results_argument

from harness.datasets.scene_render import render_scene
from harness.datasets.scenes import derive_targets, prepare_procedural_scenes, sample_scene


def measure(bench: Bench, size: int, n: int, reps: int) -> None:
    """`reps` samples of each step at one image size; each step needs the one before (targets read the renders),
    so they run in order."""
    scenes = [sample_scene(np.random.default_rng([0, 0, i]), size) for i in range(n)]
    details = {"size": size, "scenes": n}

    def targets(renders: list) -> None:
        for scene, render in zip(scenes, renders, strict=True):
            derive_targets(scene, render, keypoint_sigma=2.0, occlusion_threshold=0.05, orientation_scale=2.0)

    def prepare(folder: Path) -> None:
        prepare_procedural_scenes("bench", folder, {"train": n}, seed=0, size=size)

    for _ in range(reps):
        renders = bench.sample(f"{size}² render", lambda: [render_scene(scene) for scene in scenes],
                               work=n, unit="scenes/s", details=details)
        bench.sample(f"{size}² targets (from renders)", lambda renders=renders: targets(renders), work=n,
                     unit="scenes/s", details=details)
        with tempfile.TemporaryDirectory() as tmp:
            bench.sample(f"{size}² prepare (all, written)", lambda tmp=tmp: prepare(Path(tmp)), work=n,
                         unit="scenes/s", details=details)
            written = sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file()) / n / 2**20
        bench.record(f"{size}² written per scene", "MiB", [written], details)
    bench.ratio(f"{size}²: render ÷ whole prepare (scenes/s)", f"{size}² render", f"{size}² prepare (all, written)")
    print(f"{size}²: render {bench.median(f'{size}² render'):.1f} scenes/s, prepare "
          f"{bench.median(f'{size}² prepare (all, written)'):.1f} scenes/s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenes", type=int, default=100)
    parser.add_argument("--sizes", default="224,64")
    parser.add_argument("--reps", type=int, default=3)
    add_results_argument(parser)
    args = parser.parse_args()
    bench = Bench("scene_render")
    bench.note(f"{args.scenes} scenes per sample, one process")
    sizes = [int(s) for s in args.sizes.split(",")]
    for size in sizes:
        measure(bench, size, args.scenes, args.reps)
    for small in sizes[1:]:
        bench.ratio(f"prepare: {small}² ÷ {sizes[0]}² (scenes/s)", f"{small}² prepare (all, written)",
                    f"{sizes[0]}² prepare (all, written)")
    bench.write(args.results)


if __name__ == "__main__":
    main()
