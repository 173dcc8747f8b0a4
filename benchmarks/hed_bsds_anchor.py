"""HED's own edge map on BSDS500 test images, scored by the harness's BSDS scorer: the check of the port.

`hed_vgg16`'s fused output (sigmoid of HED's fusion layer over its five side outputs), computed at each
image's native size as HED is tested, edge-NMS'd (SE's NMS, as `edge_bsds` does) and scored with 99
thresholds and max_dist 0.0075 (`matching`, `metrics`). HED's published fused ODS / OIS / AP on BSDS500
test is 0.782 / 0.804 / 0.833 (Xie & Tu 2015, Table 4, single scale, with NMS); a port that gets the
channel order, the mean, the padding or the side outputs' alignment wrong lands far below. Usage:

    .venv/bin/python benchmarks/hed_bsds_anchor.py [--images 200] [--save DIR]

`--save DIR` keeps each image's map (before NMS) as DIR/<id>.npy, the input `bsds_scoring.py
--predictions DIR` times the scorer on.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from PIL import Image

import harness.backbones.hed_vgg  # noqa: F401  (registers hed_vgg16 until the registry finds modules itself)
from harness.backbones import create_backbone
from harness.datasets.bsds500 import read_bsds_ground_truth
from harness.probes.boundary.matching import boundary_counts, bsds_thresholds
from harness.probes.boundary.metrics import summarise
from harness.probes.boundary.nms import edge_nms

SHARED_BSDS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "bsds500"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=SHARED_BSDS)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--thresholds", type=int, default=99)
    parser.add_argument("--save", type=Path, default=None)
    args = parser.parse_args()
    images = sorted((args.root / "images" / "test").glob("*.jpg"))[: args.images]
    if not images:
        raise SystemExit(f"no test images under {args.root}")
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
    hed = create_backbone("hed_vgg16")
    thresholds = bsds_thresholds(args.thresholds)
    counts, network, scoring = [], 0.0, 0.0
    for image_path in images:
        with Image.open(image_path) as image:
            pixels = hed.native_input(image)[None]
        start = time.perf_counter()
        soft = hed.edges(pixels)[0].double().numpy()
        network += time.perf_counter() - start
        if args.save:
            np.save(args.save / f"{image_path.stem}.npy", soft)
        _, annotators = read_bsds_ground_truth(args.root / "groundTruth" / "test" / f"{image_path.stem}.mat")
        start = time.perf_counter()
        counts.append(boundary_counts(edge_nms(soft), annotators, thresholds))
        scoring += time.perf_counter() - start
    metrics, _ = summarise(thresholds, np.stack(counts))
    print(f"HED fused, {len(images)} BSDS500 test images, {len(thresholds)} thresholds: ODS {metrics['ods_f']:.4f} "
          f"(t = {metrics['ods_threshold']:.2f}) OIS {metrics['ois_f']:.4f} AP {metrics['ap']:.4f} R50 "
          f"{metrics['r50']:.4f}; network {network:.0f} s, NMS + scoring {scoring:.0f} s")


if __name__ == "__main__":
    main()
