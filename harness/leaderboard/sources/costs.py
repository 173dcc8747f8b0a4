"""Cost beside score (issue 49): what each architecture costs, read from the results files of
`benchmarks/backbone_costs.py` (benchmarks/results/backbone_costs-<machine>.json), and the Pareto front of score
against cost.

Cost is the architecture's: `resnet18` and its control `resnet18@random` share one. Parameters and FLOPs per image
are counted (torch's FlopCounterMode, at the backbone's own input size), so every machine's file gives the same;
img/s is measured: where the corpus's records carry their extraction's timed speed (`Record.throughput`), the median
over the extractions they timed on the device most of them name (`with_record_rates`), else the benchmark's, on the
device its row names. Where several files cost an architecture, the newest (its `when`) is the one shown. No
number here is typed: a missing file or architecture shows as missing.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from harness.core.run_key import CONTROL_SUFFIX_SPELLED
from harness.leaderboard.sources.references import results_files

BENCH = "backbone_costs"
COMMAND = "python benchmarks/backbone_costs.py"


@dataclass(frozen=True)
class BackboneCost:
    arch: str
    parameters: int
    flops: int  # per image, one forward of the extraction at `input`² (2 FLOPs per multiply-add)
    input: int  # the square input side, in pixels: the backbone's preprocessing crop
    images_per_s: float | None  # the extraction forward's median img/s, on `device`
    device: str | None  # as records describe a device: `cpu:MODEL:FLAGS:Nthreads`, `cuda:MODEL:…`
    path: str  # the results file, relative to the project root
    rate_extractions: int | None = None  # over how many timed extractions `images_per_s` is the median; None: file's

    @property
    def gflops(self) -> float:
        return self.flops / 1e9


NO_COSTS: Mapping[str, BackboneCost] = MappingProxyType({})  # a renderer's default: every cost shows as missing


def architecture(name: str) -> str:
    """A backbone name's architecture: `resnet18@random` → `resnet18` (the older `.random` spelling too)."""
    # up to any '@': a user's row beside a board (`NAME@yours`, harness.user.score) costs what NAME costs
    return name.partition("@")[0].removesuffix(CONTROL_SUFFIX_SPELLED)


def backbone_costs(root: Path) -> dict[str, BackboneCost]:
    """Architecture → its cost, from the newest results file that costs it; empty without a results file."""
    found: dict[str, BackboneCost] = {}
    files = sorted(results_files(Path(root), BENCH), key=lambda r: (str(r.get("when", "")), r["path"]), reverse=True)
    for results in files:
        measured = {m["name"]: m for m in results["measurements"] if isinstance(m, dict) and "name" in m}
        for name, parameters in measured.items():
            arch = name.removesuffix(" parameters")
            flops = measured.get(f"{arch} GFLOP per image")
            if arch == name or arch in found or flops is None:
                continue
            rate = measured.get(f"{arch} extraction")
            details = (rate or {}).get("details") or {}
            found[arch] = BackboneCost(
                arch=arch, parameters=int(parameters["median"]), flops=int(flops["details"]["flops"]),
                input=int(flops["details"]["input"]), images_per_s=None if rate is None else float(rate["median"]),
                device=details.get("device"), path=results["path"])
    return dict(sorted(found.items()))


def with_record_rates(costs: Mapping[str, BackboneCost], rates: Sequence[Mapping]) -> dict[str, BackboneCost]:
    """`costs` with each architecture's img/s from the records that timed its extraction (`rates`: rows of
    backbone_name, device, images_per_s, one per extraction, `queries.throughput`): the median over the device most
    of them name (the
    first such device by name on a tie). An architecture no record timed keeps the benchmark's."""
    by_device: dict[str, dict[str, list[float]]] = {}
    for row in rates:
        by_device.setdefault(architecture(row["backbone_name"]), {}).setdefault(row["device"], []).append(
            float(row["images_per_s"]))
    out = dict(costs)
    for arch, devices in by_device.items():
        if arch not in out:
            continue
        device, timed = min(devices.items(), key=lambda d: (-len(d[1]), d[0]))
        out[arch] = replace(out[arch], images_per_s=statistics.median(timed), device=device,
                            rate_extractions=len(timed))
    return out


def cost_of(name: str, costs: Mapping[str, BackboneCost]) -> BackboneCost | None:
    return costs.get(architecture(name))


# -- the Pareto front ------------------------------------------------------------------------------------------------

def pareto_front(points: Sequence[tuple[float, float]], higher_is_better: bool) -> list[int]:
    """Indices of the (cost, score) points on the Pareto front, cheapest first: those no other point beats, where
    to beat is to cost no more and score no worse, and be strictly better in one of the two. Lower cost is better;
    the score is better higher or lower as `higher_is_better` says. Equal points are all on the front."""
    sign = 1.0 if higher_is_better else -1.0

    def beats(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return a[0] <= b[0] and sign * a[1] >= sign * b[1] and (a[0] < b[0] or sign * a[1] > sign * b[1])

    front = [i for i, p in enumerate(points) if not any(beats(q, p) for q in points)]
    return sorted(front, key=lambda i: (points[i][0], -sign * points[i][1], i))


# -- how a cost reads ------------------------------------------------------------------------------------------------

def parameters_text(count: int) -> str:
    """`11.7M`, `0.27M`; a fixed filter's `0`."""
    if count == 0:
        return "0"
    return f"{count / 1e6:.1f}M" if count >= 1e6 else f"{count / 1e6:.2f}M"


def gflops_text(gflops: float) -> str:
    """Two or three significant figures: `61`, `3.6`, `0.77`, `0.081`."""
    for bound, decimals in ((10.0, 0), (1.0, 1), (0.1, 2)):
        if gflops >= bound:
            return f"{gflops:.{decimals}f}"
    return f"{gflops:.3f}"


def rate_text(images_per_s: float | None) -> str:
    if images_per_s is None:
        return "n/a"
    return f"{images_per_s:.0f}" if images_per_s >= 10 else f"{images_per_s:.1f}"


def cost_cell(cost: BackboneCost | None, missing: str = "n/a") -> str:
    """A board row's compact cost: `11.7M · 3.6 GF · 95 img/s`."""
    if cost is None:
        return missing
    text = f"{parameters_text(cost.parameters)} · {gflops_text(cost.gflops)} GF"
    return text + (f" · {rate_text(cost.images_per_s)} img/s" if cost.images_per_s is not None else "")
