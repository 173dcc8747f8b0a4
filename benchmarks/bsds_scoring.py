"""Time of the BSDS boundary scorer on real BSDS500 test images, and its counts against BSDS's own matcher.

Predictions are a probe-like soft edge map per image: the gradient magnitude of the blurred grey image,
computed at `--grid`² (a probe's prediction resolution), upsampled bilinearly to the native size,
scaled to [0, 1] by its 99th percentile and edge-NMS'd, as `edge_bsds` does to a head's output. Dense on
purpose: most pixels of the upsampled map survive thresholds near 0, the matcher's hardest case. With
`--predictions DIR`, DIR/<id>.npy maps (native size, [0, 1], before NMS) are used instead.

Records the scoring time of each image (`boundary_counts`, `--thresholds` thresholds, every annotator; one
sample per image, benchmarks/runner.py) and the ODS / OIS / AP it gives. With `--compare K`, also every K-th
threshold (from `--min-threshold` up: the reference takes minutes on maps of many thousand pixels) scored both
by `boundary_counts` and by pyEdgeEval's `correspond_pixels` (BSDS's match.cc with its CSA solver) in an
`evaluation_bdry_image.m` loop, the two interleaved per image: their times (the ratio is the same work) and, per
threshold, the largest difference in cntR and in cntP over the images, in pixels and in % of the reference, and
how many (image, threshold) cells differ at all. Writes benchmarks/results/bsds_scoring-<machine>.json. Usage
(from the repository root):

    .venv/bin/python benchmarks/bsds_scoring.py [--images 200] [--thresholds 99] [--compare 10]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import types
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from runner import Bench, add_results_argument
from scipy.ndimage import gaussian_filter, sobel
from skimage.morphology import thin as skimage_thin

from harness.datasets.bsds500 import read_bsds_ground_truth
from harness.probes.boundary.matching import boundary_counts, bsds_thresholds
from harness.probes.boundary.metrics import summarise
from harness.probes.boundary.nms import edge_nms

SHARED_BSDS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "bsds500"


def gradient_prediction(image: Path, grid: int) -> np.ndarray:
    """A probe-like soft edge map at native size (see the module docstring)."""
    with Image.open(image) as opened:
        grey = np.asarray(opened.convert("L"), dtype=np.float64) / 255.0
    magnitude = np.hypot(sobel(gaussian_filter(grey, 2.0), 0), sobel(gaussian_filter(grey, 2.0), 1))
    coarse = F.interpolate(torch.from_numpy(magnitude)[None, None], size=(grid, grid), mode="area")
    native = F.interpolate(coarse, size=grey.shape, mode="bilinear", align_corners=False)[0, 0].numpy()
    return np.clip(native / np.percentile(native, 99), 0.0, 1.0)


def reference_counts(pred: np.ndarray, gts: np.ndarray, threshold: float) -> tuple[int, int]:
    """(cntR, cntP) of `evaluation_bdry_image.m` at one threshold, with pyEdgeEval's BSDS matcher."""
    sys.modules.setdefault("cv2", types.ModuleType("cv2"))  # pyEdgeEval imports OpenCV only to write PNGs
    correspond = importlib.import_module("pyEdgeEval._lib").correspond_pixels
    bmap = skimage_thin(pred >= threshold).astype(float)
    cnt_r, matched = 0, np.zeros(pred.shape, dtype=bool)
    for gt in gts:
        m_pred, m_gt, _, _ = correspond(bmap, gt.astype(float), max_dist=0.0075)
        cnt_r += int(np.count_nonzero(m_gt))
        matched |= m_pred > 0
    return cnt_r, int(np.count_nonzero(matched))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=SHARED_BSDS)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--thresholds", type=int, default=99)
    parser.add_argument("--grid", type=int, default=112)
    parser.add_argument("--predictions", type=Path, default=None)
    parser.add_argument("--compare", type=int, default=0, help="check every K-th threshold against pyEdgeEval")
    parser.add_argument("--min-threshold", type=float, default=0.1)
    add_results_argument(parser)
    args = parser.parse_args()
    thresholds = bsds_thresholds(args.thresholds)
    images = sorted((args.root / "images" / "test").glob("*.jpg"))[: args.images]
    if not images:
        raise SystemExit(f"no test images under {args.root}")
    bench = Bench("bsds_scoring")
    source = "--predictions maps" if args.predictions is not None else f"gradient maps at {args.grid}²"
    bench.note(f"{len(images)} BSDS500 test images, {source}, {len(thresholds)} thresholds, every annotator")
    scoring = f"boundary_counts, {len(thresholds)} thresholds"
    compared = [k for k in range(0, len(thresholds), args.compare or len(thresholds))
                if args.compare and thresholds[k] >= args.min_threshold]
    subset = np.asarray([thresholds[k] for k in compared])
    ours, theirs = f"boundary_counts, {len(compared)} thresholds", f"pyEdgeEval, {len(compared)} thresholds"
    counts, differences = [], []
    for image in images:
        _, gts = read_bsds_ground_truth(args.root / "groundTruth" / "test" / f"{image.stem}.mat")
        if args.predictions is not None:
            soft = np.load(args.predictions / f"{image.stem}.npy")
        else:
            soft = gradient_prediction(image, args.grid)
        pred = edge_nms(soft)
        counts.append(bench.sample(scoring, lambda pred=pred, gts=gts: boundary_counts(pred, gts, thresholds),
                                   details={"per": "image", "thresholds": len(thresholds)}))
        if compared:
            # the same thresholds both ways, timed; the counts compared are the full run's above
            reference = bench.interleave({
                ours: lambda pred=pred, gts=gts: boundary_counts(pred, gts, subset),
                theirs: lambda pred=pred, gts=gts: [reference_counts(pred, gts, t) for t in subset]}, 1,
                details={name: {"per": "image", "from_threshold": args.min_threshold} for name in (ours, theirs)},
            )[theirs][0]
            for (cnt_r, cnt_p), k in zip(reference, compared, strict=True):
                differences.append((k, counts[-1][k, 0] - cnt_r, cnt_r, counts[-1][k, 2] - cnt_p, cnt_p))
    metrics, _ = summarise(thresholds, np.stack(counts))
    for key, label in (("ods_f", "ODS F"), ("ois_f", "OIS F"), ("ap", "AP")):
        bench.record(label, "score", [metrics[key]], {"images": len(images)})
    print(f"{len(images)} images: {bench.median(scoring):.2f} s/image scoring; ODS {metrics['ods_f']:.4f} "
          f"OIS {metrics['ois_f']:.4f} AP {metrics['ap']:.4f}")
    if differences:
        bench.ratio("pyEdgeEval ÷ boundary_counts (s/image, same thresholds)", theirs, ours)
        table = np.array(differences, dtype=np.float64)
        for k in np.unique(table[:, 0]).astype(int):
            rows = table[table[:, 0] == k]
            dr, r, dp, p = rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4]
            cells = {"threshold": float(thresholds[k]), "cells": len(rows)}
            r_pct, p_pct = 100 * np.abs(dr) / np.maximum(r, 1), 100 * np.abs(dp) / np.maximum(p, 1)
            bench.record(f"max |ΔcntR| at t = {thresholds[k]:.2f}", "px", [np.abs(dr).max()],
                         {**cells, "differ": np.count_nonzero(dr), "max_pct_of_ref": float(r_pct.max())})
            bench.record(f"max |ΔcntP| at t = {thresholds[k]:.2f}", "px", [np.abs(dp).max()],
                         {**cells, "differ": np.count_nonzero(dp), "max_pct_of_ref": float(p_pct.max()),
                          "sum_pct_of_ref": float(100 * dp.sum() / max(p.sum(), 1))})
    bench.write(args.results)


if __name__ == "__main__":
    main()
