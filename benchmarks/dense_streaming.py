"""Peak memory of streaming a dense split from the feature cache, against the split's total size.

Writes N synthetic (C, H, W) float32 features to a temporary FeatureCache one at a time, then streams them
through `DenseStream` (per-batch standardisation statistics, then one standardised pass; --reps times) and
records the process's peak RSS (ru_maxrss) before and after, beside the split's total bytes. Streaming holds one
batch at a time, so the growth should be on the order of a batch, not of the split: the ratios state it.
Writes benchmarks/results/dense_streaming-<machine>.json (benchmarks/runner.py). Usage:

    .venv/bin/python benchmarks/dense_streaming.py [--items 2000] [--shape 384,16,16] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
from pathlib import Path

import numpy as np
from runner import Bench, add_results_argument

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
    parser.add_argument("--reps", type=int, default=3)
    add_results_argument(parser)
    args = parser.parse_args()
    bench = Bench("dense_streaming")
    shape = tuple(int(v) for v in args.shape.split(","))
    items = [Item(f"synthetic/{i:06d}.png", f"{i:064x}", "train") for i in range(args.items)]
    details = {"items": args.items, "shape": args.shape, "batch_size": args.batch_size}
    bench.record("split size", "MiB", [args.items * int(np.prod(shape)) * 4 / MIB], details)
    bench.record("one batch", "MiB", [args.batch_size * int(np.prod(shape)) * 4 / MIB], details)
    bench.record("peak RSS after imports", "MiB", [peak_rss_bytes() / MIB])
    with tempfile.TemporaryDirectory() as tmp:
        cache = FeatureCache(Path(tmp))
        rng = np.random.default_rng(0)

        def write() -> None:
            for item in items:
                cache.put(item.sha256, rng.normal(size=shape).astype(np.float32))

        bench.sample("write the cache", write, work=args.items, unit="items/s", details=details)
        before = peak_rss_bytes()
        stream = DenseStream(items, lambda item: cache.get(item.sha256), args.batch_size)

        def two_passes() -> tuple[int, int]:
            stream.statistics = channel_statistics(stream)
            batches = largest = 0
            for batch in stream.batches(shuffle=True, seed=0, epoch=0):
                batches += 1
                largest = max(largest, batch.features.shape[0])
            return batches, largest

        (batches, largest), *_ = bench.interleave({"stream 2 passes": two_passes}, args.reps,
                                                  work=2 * args.items, unit="items/s",
                                                  details={"stream 2 passes": details})["stream 2 passes"]
        bench.describe("stream 2 passes", batches_per_pass=batches, largest_batch=largest)
        bench.record("peak RSS before streaming", "MiB", [before / MIB])
        bench.record("peak RSS growth while streaming", "MiB", [(peak_rss_bytes() - before) / MIB])
    bench.ratio("RSS growth ÷ split size", "peak RSS growth while streaming", "split size")
    bench.ratio("RSS growth ÷ one batch", "peak RSS growth while streaming", "one batch")
    bench.write(args.results)


if __name__ == "__main__":
    main()
