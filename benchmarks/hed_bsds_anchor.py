"""HED's own edge map on BSDS500 test images, scored by the harness's BSDS scorer: the check of the port.

`hed_vgg16`'s fused output (sigmoid of HED's fusion layer over its five side outputs), computed at each
image's native size as HED is tested, edge-NMS'd (SE's NMS, as `edge_bsds` does) and scored with 99
thresholds and max_dist 0.0075 (`matching`, `metrics`). Ratios: the ODS / OIS / AP measured here over HED's
published fused ones on BSDS500 test (Xie & Tu 2015, Table 4, single scale, with NMS: `PUBLISHED`); a port that
gets the channel order, the mean, the padding or the side outputs' alignment wrong lands far below. Also the
network's and the scorer's time per image (one sample per image, benchmarks/runner.py). Writes
benchmarks/results/hed_bsds_anchor-<machine>.json. Usage:

    .venv/bin/python benchmarks/hed_bsds_anchor.py [--images 200] [--save DIR]

`--save DIR` keeps each image's map (before NMS) as DIR/<id>.npy, the input `bsds_scoring.py
--predictions DIR` times the scorer on. Fewer than the 200 test images is a smaller sample, not the benchmark.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image
from runner import Bench, add_results_argument

import harness.backbones.hed_vgg  # noqa: F401  (registers hed_vgg16 until the registry finds modules itself)
from harness.backbones import create_backbone
from harness.datasets.bsds500 import read_bsds_ground_truth
from harness.probes.boundary.matching import boundary_counts, bsds_thresholds
from harness.probes.boundary.metrics import summarise
from harness.probes.boundary.nms import edge_nms

SHARED_BSDS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "bsds500"
# HED's published fused scores on the 200 BSDS500 test images (Xie & Tu 2015, Table 4): a citation, not a run
PUBLISHED = {"ODS F": 0.782, "OIS F": 0.804, "AP": 0.833}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=SHARED_BSDS)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--thresholds", type=int, default=99)
    parser.add_argument("--save", type=Path, default=None)
    add_results_argument(parser)
    args = parser.parse_args()
    images = sorted((args.root / "images" / "test").glob("*.jpg"))[: args.images]
    if not images:
        raise SystemExit(f"no test images under {args.root}")
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
    bench = Bench("hed_bsds_anchor")
    bench.note(f"HED fused, {len(images)} BSDS500 test images at native size, {args.thresholds} thresholds")
    hed = create_backbone("hed_vgg16")
    thresholds = bsds_thresholds(args.thresholds)
    counts = []
    for image_path in images:
        with Image.open(image_path) as image:
            pixels = hed.native_input(image)[None]
        soft = bench.sample("network (fused edge map)", lambda pixels=pixels: hed.edges(pixels)[0].double().numpy(),
                            details={"per": "image"})
        if args.save:
            np.save(args.save / f"{image_path.stem}.npy", soft)
        _, annotators = read_bsds_ground_truth(args.root / "groundTruth" / "test" / f"{image_path.stem}.mat")
        counts.append(bench.sample("NMS + scoring", lambda soft=soft, annotators=annotators: boundary_counts(
            edge_nms(soft), annotators, thresholds), details={"per": "image", "thresholds": len(thresholds)}))
    metrics, _ = summarise(thresholds, np.stack(counts))
    measured = {"ODS F": metrics["ods_f"], "OIS F": metrics["ois_f"], "AP": metrics["ap"], "R50": metrics["r50"]}
    for label, value in measured.items():
        bench.record(label, "score", [value], {"images": len(images), "ods_threshold": metrics["ods_threshold"]}
                     if label == "ODS F" else {"images": len(images)})
    for label, value in PUBLISHED.items():
        bench.record(f"published {label}", "score", [value], {"source": "Xie & Tu 2015, Table 4", "images": 200})
        bench.ratio(f"{label}: measured ÷ published", label, f"published {label}")
    print("  ".join(f"{label} {value:.4f}" for label, value in measured.items()))
    bench.write(args.results)


if __name__ == "__main__":
    main()
