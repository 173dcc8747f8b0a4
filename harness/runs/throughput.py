"""How fast a backbone's extraction forward runs on the device that computed its features (issue 49, cost beside
score): the extract stage times one fixed batch of the dataset, and every probe stage that reads those features
carries the measurement in its record (`Record.throughput`), so a board's img/s comes from the runs themselves.

A fixed batch, not the extraction's own clock: a re-run that finds every feature cached computes nothing and would
have nothing to time, and a batch the same size every run makes two runs' rates comparable. The measurement lies
beside the features folder, outside its DVC out: a time is this run's, never the features', and keeping it out
means no probe re-runs because a machine was faster. It names the extraction it timed (the hash of its
description), so a probe never reads one extraction's time beside another's features.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.atomic import write_text_atomic
from harness.core.hashing import hash_json

SUFFIX = ".throughput.json"
CPU_BATCH = 8  # images per timed forward on a CPU: enough to amortise the call, seconds even for a ViT-B on 2 cores
REPEATS = 3  # timed forwards after one warm-up (allocator, oneDNN primitive and cuDNN autotune caches); the median


def time_forward(forward: Callable[[], object], repeats: int = REPEATS) -> float:
    """The median seconds of `repeats` calls of `forward` after one untimed warm-up call. `forward` returns its
    outputs on the CPU, so a GPU's work has finished when the clock stops."""
    forward()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        forward()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def path_of(features_dir: Path) -> Path:
    features_dir = Path(features_dir)
    return features_dir.with_name(features_dir.name + SUFFIX)


def write_throughput(features_dir: Path, description: dict[str, Any], images: int, seconds: float,
                     device: str) -> dict[str, Any]:
    """Keep the timed batch beside the features folder whose extraction `description` describes."""
    measured = {"images_per_s": images / seconds, "batch": images, "device": device,
                "extraction": hash_json(description)}
    write_text_atomic(path_of(features_dir), json.dumps(measured, sort_keys=True, indent=1))
    return measured


def read_throughput(features_dir: Path, description: dict[str, Any]) -> dict[str, Any] | None:
    """The timed batch of the extraction `description` describes, as a record carries it (`images_per_s`, `batch`,
    `device`); None where none was kept (features made before timing existed, or by the Python API's workspace),
    where the file is unreadable, or where it timed another extraction than the one in the folder now."""
    try:
        measured = json.loads(path_of(features_dir).read_text(encoding="utf-8"))
        if measured["extraction"] != hash_json(description):
            return None
        return {"images_per_s": float(measured["images_per_s"]), "batch": int(measured["batch"]),
                "device": str(measured["device"])}
    except (OSError, ValueError, KeyError, TypeError):  # a rate is never worth failing a run over
        return None
