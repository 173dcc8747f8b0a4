"""Cold vs cached feature-extraction throughput (images/s) for every backbone that loads offline.

Cold: decode + preprocess + forward + cache write, into an empty cache. Cached: the same call again, where every
entry is a hit (key computation + verified reads, no decode, no forward). Each repetition starts from an empty
cache; the backbones are interleaved (benchmarks/runner.py). Ratio: cached ÷ cold per backbone. Writes
benchmarks/results/extraction_throughput-<machine>.json. Usage:

    .venv/bin/python benchmarks/extraction_throughput.py [--images 64] [--backbones a,b,...] [--reps 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from runner import Bench, add_results_argument

from harness.backbones import WeightsUnavailableError, create_backbone, list_backbones
from harness.core.config import load_params
from harness.datasets.kinds import prepare_dataset
from harness.runs.extract import FeatureRequest, extract_dataset

DEFAULT = [
    "efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2", "cifar_resnet20", "cifar_resnet56",
    "resnet18@random", "resnet50@random", "dinov2_vits14@random", "dinov2_vitb14@random",
    "clip_vitb32@random", "clip_vitb16@random",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--backbones", default=",".join(DEFAULT))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--source", default="/usr/share/datasets/fashion-mnist", help="Fashion-MNIST's folder")
    add_results_argument(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    bench = Bench("extraction_throughput")
    checkpoints = load_params().checkpoints if os.path.exists("params.yaml") else {}
    per_class = max(1, args.images // 10)
    with tempfile.TemporaryDirectory() as tmp:
        manifest = prepare_dataset(
            "bench", {"kind": "fashion_mnist", "source": args.source, "per_class": {"train": per_class}},
            Path(tmp) / "data")
        n = len(manifest.items)
        bench.note(f"{n} Fashion-MNIST images, batch {args.batch_size}, pooled features")
        backbones = {}
        for name in args.backbones.split(","):
            if name not in list_backbones():
                raise SystemExit(f"unknown backbone {name}")
            try:
                backbones[name] = create_backbone(name, checkpoint=checkpoints.get(name))
            except WeightsUnavailableError as error:
                bench.note(f"{name}: skipped ({str(error).splitlines()[0][:80]})")

        def cold_then_cached(name: str) -> None:
            out = Path(tmp) / "features" / name
            shutil.rmtree(out, ignore_errors=True)
            details = {"backbone": name, "input": backbones[name].preprocess.crop}
            for phase in ("cold", "cached"):
                bench.sample(f"{name} {phase}", lambda: extract_dataset(
                    backbones[name], manifest, [FeatureRequest("pooled")], out, args.batch_size),
                    work=n, unit="img/s", details=details)

        for name in bench.rounds(list(backbones), args.reps):
            cold_then_cached(name)
        for name in backbones:
            bench.ratio(f"{name}: cached ÷ cold", f"{name} cached", f"{name} cold")
            print(f"{name:<24} cold {bench.median(f'{name} cold'):9.1f} img/s, cached "
                  f"{bench.median(f'{name} cached'):10.0f} img/s", flush=True)
    bench.write(args.results)


if __name__ == "__main__":
    main()
