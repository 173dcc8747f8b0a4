"""Peak memory of streaming a dense split from the feature cache, against the split's total size.

Writes N synthetic (C, H, W) float32 features to a temporary FeatureCache one at a time, then streams
them through `DenseStream` (with per-batch standardisation statistics, then one standardised pass) and
prints the process's peak RSS (ru_maxrss) before and after, beside the split's total bytes. Streaming
holds one batch at a time, so the growth should be on the order of a batch, not of the split. Usage:

    .venv/bin/python benchmarks/dense_streaming.py [--items 2000] [--shape 384,16,16] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.datasets.manifest import Item
from harness.probes.dense.streaming import DenseStream, channel_statistics
from harness.runs.feature_cache import FeatureCache

MIB = 1024 * 1024


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB, macOS bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--shape", default="384,16,16")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    shape = tuple(int(v) for v in args.shape.split(","))
    items = [Item(f"synthetic/{i:06d}.png", f"{i:064x}", "train") for i in range(args.items)]
    split_bytes = args.items * int(np.prod(shape)) * 4
    batch_bytes = args.batch_size * int(np.prod(shape)) * 4
    print(f"split: {args.items} × {shape} float32 = {split_bytes / MIB:.1f} MiB; "
          f"one batch of {args.batch_size} = {batch_bytes / MIB:.1f} MiB")
    print(f"peak RSS after imports (torch, numpy) {peak_rss_bytes() / MIB:.1f} MiB")
    with tempfile.TemporaryDirectory() as tmp:
        cache = FeatureCache(Path(tmp))
        rng = np.random.default_rng(0)
        started = time.perf_counter()
        for item in items:
            cache.put(item.sha256, rng.normal(size=shape).astype(np.float32))
        print(f"wrote cache in {time.perf_counter() - started:.1f} s; peak RSS so far {peak_rss_bytes() / MIB:.1f} MiB")
        before = peak_rss_bytes()
        stream = DenseStream(items, lambda item: cache.get(item.sha256), args.batch_size)
        started = time.perf_counter()
        stream.statistics = channel_statistics(stream)
        batches = largest = 0
        for batch in stream.batches(shuffle=True, seed=0, epoch=0):
            batches += 1
            largest = max(largest, batch.features.shape[0])
        after = peak_rss_bytes()
        print(f"streamed 2 passes ({batches} batches per pass, largest {largest}) in "
              f"{time.perf_counter() - started:.1f} s")
        print(f"peak RSS before streaming {before / MIB:.1f} MiB, after {after / MIB:.1f} MiB, "
              f"growth {(after - before) / MIB:.1f} MiB vs split {split_bytes / MIB:.1f} MiB")


if __name__ == "__main__":
    main()
