"""What each backbone costs: its parameters, the FLOPs of one image's forward at its own input size, and the images
per second its extraction forward reaches here (issue 49, "cost beside score").

Cost is the architecture's, not the weights': each registry architecture is built once, as its random-init
control `name@random` where it has one (no download needed), else as it is (fixed filters such as `sobel`); one
that cannot be built offline is skipped with the reason, printed and noted. Per architecture:
- parameters: the sum of `numel` over the built backbone's parameters (buffers are not parameters);
- FLOPs: counted, never estimated: `torch.utils.flop_counter.FlopCounterMode` around one
  `Backbone.extract_features` of a single `crop`² image (the call extraction makes, at the default pooling and
  layer set: the last layer) — matmuls and convolutions, 2 FLOPs per multiply-add, as vs_visbench counts them;
- img/s: `extract_features` on a batch of random pixels at that size (the family's measured batch size, capped
  by --max-batch), one warm-up then --reps samples, the architectures interleaved (benchmarks/runner.py); the
  device that computed is named in the row (`harness.core.devices.describe_device`). Forward only: no decode,
  no cache write (extraction_throughput measures those);
- the FLOP-bound limit, the fp32 matmul rate measured in the same run ÷ FLOPs per image, and the ratio
  extraction ÷ limit: how much of this CPU's matmul rate the architecture's forward reaches.
Writes benchmarks/results/backbone_costs-<machine>.json; harness.leaderboard.sources.costs reads it for the boards.
Usage:

    .venv/bin/python benchmarks/backbone_costs.py [--reps 3] [--max-batch 8] [--threads 2] [--archs a,b,...]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from runner import Bench, add_results_argument, matmul

from harness.backbones import Backbone, BackboneError, create_backbone, list_backbones
from harness.backbones.registry import backbone_entry, parse_backbone_name
from harness.core.devices import describe_device
from harness.core.run_key import CONTROL_SUFFIX


def architectures() -> dict[str, str]:
    """Every built-in registry architecture → the name it is built under for costing: its control where it has one.
    Plugins and module objects (`weights: custom`) registered in this process are the user's, not the harness's."""
    built = {}
    for name in list_backbones():
        arch, _ = parse_backbone_name(name)
        if backbone_entry(arch).weights != "custom":
            built.setdefault(arch, arch + CONTROL_SUFFIX if backbone_entry(arch).random_control else arch)
    return built


def parameter_count(backbone: Backbone) -> int:
    return sum(p.numel() for p in backbone.parameters())


def flop_count(backbone: Backbone) -> int:
    """FLOPs of one image's extraction forward at the backbone's input size, counted by torch."""
    from torch.utils.flop_counter import FlopCounterMode

    size = backbone.preprocess.crop
    with FlopCounterMode(display=False) as counter:
        backbone.extract_features(torch.zeros(1, 3, size, size))
    return int(counter.get_total_flops())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", default="", help="architectures to cost (default: every one in the registry)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    add_results_argument(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    bench = Bench("backbone_costs")
    device = describe_device("cpu", torch.get_num_threads())
    bench.note(f"forward of extract_features (default pooling, last layer), fp32, on {device}")
    wanted = architectures()
    if args.archs:
        unknown = sorted(set(args.archs.split(",")) - set(wanted))
        if unknown:
            raise SystemExit(f"unknown architectures: {', '.join(unknown)}")
        wanted = {arch: wanted[arch] for arch in args.archs.split(",")}
    built: dict[str, Backbone] = {}
    for arch, name in wanted.items():
        try:
            built[arch] = create_backbone(name)
        except (BackboneError, ImportError, OSError) as error:
            reason = f"{name}: skipped, cannot be built offline ({str(error).splitlines()[0][:100]})"
            print(reason, flush=True)
            bench.note(reason)
    if not built:
        raise SystemExit("no architecture could be built")
    flops = {}
    for arch, backbone in built.items():
        size = backbone.preprocess.crop
        flops[arch] = flop_count(backbone)
        details = {"backbone": backbone.name, "input": size}
        bench.record(f"{arch} parameters", "parameters", [parameter_count(backbone)], details)
        bench.record(f"{arch} GFLOP per image", "GFLOP", [flops[arch] / 1e9], {**details, "flops": flops[arch]})
    batches = {arch: torch.rand(min(b.batch_size, args.max_batch), 3, b.preprocess.crop, b.preprocess.crop)
               for arch, b in built.items()}
    rate = matmul(bench, "fp32", 2048, 5)
    label = {arch: f"{arch} extraction" for arch in built}
    for arch, backbone in built.items():  # warm-up: oneDNN primitives and packed weights are made on the first call
        backbone.extract_features(batches[arch])
    for arch in bench.rounds(list(built), args.reps):
        backbone, batch = built[arch], batches[arch]
        bench.sample(label[arch], lambda b=backbone, x=batch: b.extract_features(x), work=len(batch), unit="img/s",
                     details={"backbone": backbone.name, "input": backbone.preprocess.crop, "batch": len(batch),
                              "device": device})
    for arch, backbone in built.items():
        if flops[arch]:
            bench.record(f"{arch} FLOP-bound limit fp32", "img/s", [bench.median(rate) * 1e9 / flops[arch]],
                         {"backbone": backbone.name, "from": rate})
            bench.ratio(f"{arch} extraction ÷ FLOP-bound limit", label[arch], f"{arch} FLOP-bound limit fp32")
        print(f"{arch:<20} {parameter_count(backbone) / 1e6:8.2f} M params {flops[arch] / 1e9:9.3f} GFLOP "
              f"{bench.median(label[arch]):8.1f} img/s", flush=True)
    bench.write(args.results)


if __name__ == "__main__":
    main()
