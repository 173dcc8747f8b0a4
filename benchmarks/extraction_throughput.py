"""Cold vs cached feature-extraction throughput (images/s) for every backbone that loads offline.

Cold: decode + preprocess + forward + cache write, into an empty cache. Cached: the same call again,
where every entry is a hit (key computation + verified reads, no decode, no forward). Prints one line
per backbone and the cached/cold ratio. Usage:

    .venv/bin/python benchmarks/extraction_throughput.py [--images 64] [--backbones a,b,...]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from harness.backbones import WeightsUnavailableError, create_backbone, list_backbones
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
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    per_class = max(1, args.images // 10)
    with tempfile.TemporaryDirectory() as tmp:
        manifest = prepare_dataset(
            "bench", {"kind": "fashion_mnist", "source": "/usr/share/datasets/fashion-mnist",
                      "per_class": {"train": per_class}}, Path(tmp) / "data")
        n = len(manifest.items)
        print(f"{n} Fashion-MNIST images, batch {args.batch_size}, pooled features; images/s (higher is better)")
        print(f"{'backbone':<24} {'input':>5} {'cold':>9} {'cached':>10} {'cached/cold':>12}")
        for name in args.backbones.split(","):
            if name not in list_backbones():
                raise SystemExit(f"unknown backbone {name}")
            try:
                backbone = create_backbone(name)
            except WeightsUnavailableError as error:
                print(f"{name:<24} skipped: {str(error).splitlines()[0][:80]}")
                continue
            out = Path(tmp) / "features" / name
            timings = []
            for _ in range(2):  # cold, then cached
                started = time.perf_counter()
                extract_dataset(backbone, manifest, [FeatureRequest("pooled")], out, args.batch_size)
                timings.append(time.perf_counter() - started)
            cold, cached = n / timings[0], n / timings[1]
            print(f"{name:<24} {backbone.preprocess.crop:>5} {cold:>9.1f} {cached:>10.0f} {cached / cold:>11.0f}×")


if __name__ == "__main__":
    main()
