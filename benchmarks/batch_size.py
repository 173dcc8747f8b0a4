"""Forward throughput by batch size, and whether the features depend on it, for each backbone (issue 15).

For every backbone and precision: img/s of `extract_features` at each batch size over the same random images
(one warm-up call per size, then the best of --reps passes), and the largest |difference| of the pooled and
dense features against batch size 32 (the project's old fixed size). The sizes the families declare
(`Backbone.batch_sizes`; each backbone runs its size, at most `settings.batch_size`) are the fastest that are
also exactly batch-invariant here. A number, not a test; run it on the machine you care about:

    .venv/bin/python benchmarks/batch_size.py [--images 64] [--sizes 1,2,4,8,16,32,64] [--backbones a,b]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from harness.backbones import WeightsUnavailableError, create_backbone
from harness.core.config import load_params

DEFAULT = ["efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2", "resnet18@random",
           "clip_vitb32@random", "cifar_resnet20", "cifar_resnet56", "hed_vgg16", "sobel"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--sizes", default="1,2,4,8,16,32,64")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--backbones", default=",".join(DEFAULT))
    args = parser.parse_args()
    sizes = sorted(s for s in {int(s) for s in args.sizes.split(",")} | {32} if s <= args.images)
    checkpoints = load_params().checkpoints if os.path.exists("params.yaml") else {}
    print(f"{args.images} random images per pass, {torch.get_num_threads()} threads; img/s by batch size "
          "(best of reps), then max |Δ| of pooled / dense features against batch 32")
    for name in args.backbones.split(","):
        for precision in args.precisions.split(","):
            try:
                backbone = create_backbone(name, precision=precision, checkpoint=checkpoints.get(name))
            except WeightsUnavailableError as error:
                print(f"{name} {precision}: skipped ({str(error).splitlines()[0][:90]})")
                continue
            crop = backbone.preprocess.crop
            images = torch.randn(args.images, 3, crop, crop, generator=torch.Generator().manual_seed(0))
            layers = sorted({backbone.num_layers - 1, *backbone.resolve_layers("stride16")}
                            if "stride16" in backbone.layer_sets() else {backbone.num_layers - 1})
            rates, outputs = {}, {}
            for size in sizes:
                backbone.extract_features(images[:size], "default", layers)
                best = float("inf")
                for _ in range(args.reps):
                    started = time.perf_counter()
                    outs = [backbone.extract_features(images[i: i + size], "default", layers)
                            for i in range(0, args.images, size)]
                    best = min(best, time.perf_counter() - started)
                rates[size] = args.images / best
                outputs[size] = (torch.cat([o["pooled"] for o in outs]), torch.cat([o["dense"] for o in outs]))
            reference = outputs[32]
            cells = []
            for size in sizes:
                pooled = (outputs[size][0] - reference[0]).abs().max().item()
                dense = (outputs[size][1] - reference[1]).abs().max().item()
                same = "=" if pooled == 0 and dense == 0 else f"Δ{max(pooled, dense):.0e}"
                cells.append(f"{size}:{rates[size]:.0f}{same}")
            declared = backbone.batch_size
            print(f"{name:<20} {precision:<5} crop {crop:<4} declared {declared:<3} " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
