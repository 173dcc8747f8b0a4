"""Forward throughput by batch size, and whether the features depend on it, for each backbone (issue 15).

For every backbone and precision: img/s of `extract_features` at each batch size over the same random images
(one warm-up call per size, then --reps passes per size, the sizes interleaved), and the largest |difference| of
the pooled and dense features against batch size 32 (the project's old fixed size). The sizes the families
declare (`Backbone.batch_sizes`; each backbone runs its size, at most `settings.batch_size`) are the fastest that
are also exactly batch-invariant here. Ratios: each size's median rate over batch 32's. Writes
benchmarks/results/batch_size-<machine>.json (benchmarks/runner.py); run it on the machine you care about:

    .venv/bin/python benchmarks/batch_size.py [--images 64] [--sizes 1,2,4,8,16,32,64] [--backbones a,b]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from runner import Bench, add_results_argument

from harness.backbones import WeightsUnavailableError, create_backbone
from harness.core.config import load_params

DEFAULT = ["efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2", "resnet18@random",
           "clip_vitb32@random", "cifar_resnet20", "cifar_resnet56", "hed_vgg16", "sobel"]
REFERENCE = 32  # the project's old fixed batch size: every size's features and rate are compared with it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--sizes", default="1,2,4,8,16,32,64")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--backbones", default=",".join(DEFAULT))
    add_results_argument(parser)
    args = parser.parse_args()
    if args.images < REFERENCE:
        raise SystemExit(f"batch_size: --images must be at least {REFERENCE} (the reference batch)")
    bench = Bench("batch_size")
    sizes = sorted(s for s in {int(s) for s in args.sizes.split(",")} | {REFERENCE} if s <= args.images)
    checkpoints = load_params().checkpoints if os.path.exists("params.yaml") else {}
    bench.note(f"{args.images} random images per pass; img/s = images ÷ the pass's wall time; max_abs_diff: the "
               f"largest |Δ| of the pooled and dense features against batch {REFERENCE} (0: batch-invariant)")
    for name in args.backbones.split(","):
        for precision in args.precisions.split(","):
            try:
                backbone = create_backbone(name, precision=precision, checkpoint=checkpoints.get(name))
            except WeightsUnavailableError as error:
                bench.note(f"{name} {precision}: skipped ({str(error).splitlines()[0][:90]})")
                continue
            crop = backbone.preprocess.crop
            images = torch.randn(args.images, 3, crop, crop, generator=torch.Generator().manual_seed(0))
            layers = sorted({backbone.num_layers - 1, *backbone.resolve_layers("stride16")}
                            if "stride16" in backbone.layer_sets() else {backbone.num_layers - 1})

            def one_pass(size: int, backbone=backbone, images=images, layers=layers) -> tuple:
                outs = [backbone.extract_features(images[i: i + size], "default", layers)
                        for i in range(0, args.images, size)]
                return torch.cat([o["pooled"] for o in outs]), torch.cat([o["dense"] for o in outs])

            label = {size: f"{name} {precision} batch {size}" for size in sizes}
            for size in sizes:  # warm-up: oneDNN primitives and packed weights are made on the first call
                backbone.extract_features(images[:size], "default", layers)
            outputs = bench.interleave({label[s]: (lambda s=s: one_pass(s)) for s in sizes}, args.reps,
                                       work=args.images, unit="img/s")
            reference = outputs[label[REFERENCE]][-1]
            for size in sizes:
                pooled, dense = outputs[label[size]][-1]
                difference = max((pooled - reference[0]).abs().max().item(), (dense - reference[1]).abs().max().item())
                bench.describe(label[size], backbone=name, precision=precision, crop=crop, batch=size,
                               declared=backbone.batch_size, max_abs_diff=difference)
                if size != REFERENCE:
                    bench.ratio(f"{name} {precision}: batch {size} ÷ batch {REFERENCE}", label[size],
                                label[REFERENCE])
            print(f"{name:<20} {precision:<5} crop {crop:<4} declared {backbone.batch_size:<3} "
                  + "  ".join(f"{s}:{bench.median(label[s]):.0f}" for s in sizes), flush=True)
    bench.write(args.results)


if __name__ == "__main__":
    main()
