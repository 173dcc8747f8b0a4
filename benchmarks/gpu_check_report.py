"""The GPU check's report (`benchmarks/results/gpu_check-<machine>.json`), read and written without torch.

What `benchmarks/gpu_check.py` prints and what `benchmarks/performance_page.py` puts on docs/performance.md come
from the same functions here: the machine slug of a device description (the report's file name), the issue's two
targets judged from the extraction rows, and every line and table cell of the report. Standard library only, so the
page generator reads a report without importing torch, and the check formats it the one way.
"""

from __future__ import annotations

import re
from typing import Any

SCHEMA = "gpu_check/v1"
PREFIX = "gpu_check-"  # benchmarks/results/gpu_check-<machine>.json
TARGET_IMAGES, TARGET_COLD_S, TARGET_PEAK_SHARE = 10_000, 20.0, 0.5  # the targets, ViT-S/14 at bf16
# the extraction table: (header, alignment, width) of each column, as printed and as on the page
COLUMNS = (("model", "<", 10), ("prec", "<", 5), ("pass", "<", 9), ("images", ">", 7), ("img/s", ">", 9),
           ("wall s", ">", 8), ("decode-wait s", ">", 14), ("forward s", ">", 10), ("fwd TFLOP/s", ">", 12),
           ("% bf16 peak", ">", 12), ("peak mem MiB", ">", 13))
LEGEND = ("cold: empty cache; cached: the same call again (every entry a hit); fwd-only: extract_features on a "
          "device-resident batch (no decode, no copy back). % bf16 peak: forward FLOPs / forward s / peak.")
METRIC_COLUMNS = ("metric", "committed", "measured", "|Δ|", "allowed", "result")
VERDICTS = {True: "met", False: "NOT met", None: "not judged"}


def machine_slug(description: str) -> str:
    """`cuda:NVIDIA H200:sm_90:...` → `nvidia-h200`; `cpu:Intel(R) Xeon(R) Processor:...` →
    `cpu-intel-xeon-processor`."""
    kind, _, rest = description.partition(":")
    model = rest.split(":")[0]
    model = re.sub(r"\((r|tm)\)", "", model.lower())
    slug = re.sub(r"[^a-z0-9]+", "-", model).strip("-")
    return slug if kind == "cuda" else f"cpu-{slug}"


def report_name(description: str) -> str:
    """The report's file name for the device `description` (records' spelling)."""
    return f"{PREFIX}{machine_slug(description)}.json"


def fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


def row_cells(row: dict[str, Any]) -> list[str]:
    """One extraction row's cells, in COLUMNS' order."""
    return [row["label"], row["precision"], row["pass"], str(row["images"]), f"{row['img_per_s']:.1f}",
            f"{row['wall_s']:.2f}", fmt(row["decode_wait_s"], ".2f"), fmt(row["forward_s"], ".2f"),
            fmt(row["forward_tflops"], ".3f"), fmt(row["peak_share"], ".1f", 100),
            fmt(row["peak_memory_bytes"], ".0f", 2**-20)]


def table(rows: list[dict[str, Any]]) -> str:
    """The extraction rows as the check prints them: fixed-width columns under a header and a rule."""
    def line(cells: list[str]) -> str:
        return " ".join(format(cell, f"{align}{width}") for cell, (_, align, width) in zip(cells, COLUMNS,
                                                                                             strict=True))

    header = line([name for name, _, _ in COLUMNS])
    return "\n".join([header, "-" * len(header), *(line(row_cells(row)) for row in rows)])


def targets(rows: list[dict[str, Any]], images: int) -> list[dict[str, Any]]:
    """The issue's two targets for ViT-S/14 at bf16, measured, and met or not (None: not measured at the
    target's 10,000 images, so the time is shown scaled and not judged)."""
    def row(phase: str) -> dict[str, Any] | None:
        return next((r for r in rows if r["model"] == "vit_s14" and r["precision"] == "bf16" and r["pass"] == phase),
                    None)

    cold, alone = row("cold"), row("fwd-only")
    if cold is None:
        return []
    at_target = images == TARGET_IMAGES
    scaled = cold["wall_s"] * TARGET_IMAGES / max(1, images)
    share = cold["peak_share"]
    alone_share = alone["peak_share"] if alone else None
    measured = "-" if share is None else f"{share:.1%} in the extraction"
    if alone_share is not None:
        measured += f", {alone_share:.1%} forward-only"
    return [
        {"target": f"ViT-S/14 bf16 cold extraction of {TARGET_IMAGES:,} images < {TARGET_COLD_S:.0f} s",
         "measured": f"{cold['wall_s']:.2f} s for {images:,} images" + ("" if at_target else
                                                                         f" (≈ {scaled:.1f} s scaled)"),
         "value_s": cold["wall_s"], "met": (cold["wall_s"] < TARGET_COLD_S) if at_target else None},
        {"target": f"ViT-S/14 bf16 forward > {TARGET_PEAK_SHARE:.0%} of the measured bf16 matmul peak",
         "measured": measured, "value": share, "forward_only_value": alone_share,
         "met": None if share is None else share > TARGET_PEAK_SHARE},
    ]


# -- the report's lines: `gpu_check.print_report` prints them, the performance page shows them ----------------------
def device_line(environment: dict[str, Any]) -> str:
    return (f"{environment['device']} ({environment['cores']} cores, torch {environment['torch']}, "
            f"python {environment['python']})")


def dataset_line(report: dict[str, Any]) -> str:
    data = report["dataset"]
    width, height = data["size"]
    return (f"{data['images']} JPEGs {width}×{height}, drawn in {data['generate_s']:.1f} s with {data['writers']} "
            f"processes; decode workers {report['decode_workers']}")


def peak_line(peak: dict[str, Any]) -> str:
    return f"{peak['tflops']:.2f} TFLOP/s ({peak['size']}³, median of {len(peak['repeats_s'])})"


def target_line(target: dict[str, Any]) -> str:
    return f"{target['target']}: {target['measured']} -> {VERDICTS[target['met']]}"


def probe_line(probe: dict[str, Any]) -> str:
    where = probe["device"] + ("" if probe["device"] == probe["device_asked"] else
                               f" (asked {probe['device_asked']}; the probe computes on the CPU)")
    return (f"{probe['task']} on {where}: {probe['train']}+{probe['val']} maps, {probe['epochs']} epochs in "
            f"{probe['seconds']:.2f} s; delta1 {probe['metrics'].get('delta1', float('nan')):.4f}")


def metric_check_line(check: dict[str, Any]) -> str:
    return (f"{check['run']} on {check['device']} vs {check['committed']} (tolerance {check['tolerance']:g}: "
            f"{check['rule']}), {check['seconds']:.1f} s")


def metric_cells(name: str, metric: dict[str, Any]) -> list[str]:
    """One metric of the metric check, in METRIC_COLUMNS' order."""
    return [name, f"{metric['committed']:.6f}", fmt(metric["measured"], ".6f"), fmt(metric["abs_diff"], ".2e"),
            f"{metric['allowed']:.1e}", "pass" if metric["pass"] else "FAIL"]


def metric_check_outcome(check: dict[str, Any]) -> str:
    return f"metric check {'passed' if check['passed'] else 'FAILED'}"


def outcome(report: dict[str, Any]) -> str:
    return f"{'ok' if report['ok'] else 'FAILED'} in {report['duration_s']:.1f} s"
