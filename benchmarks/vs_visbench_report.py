"""The tables benchmarks/vs_visbench.py prints (Markdown) and the measurements and ratios of its results file.

"advantage" reads the same way in every row: above 1 means ours is better. It is theirs ÷ ours for seconds and
bytes (the issue's "ratio (theirs / ours)"), and ours ÷ theirs for images per second. The results file's ratios
(`record_results`) are named the same way round.
"""

from __future__ import annotations

from runner import Bench
from side_by_side import median

TOOLS = {"theirs": "visbench", "ours": "ours fp32", "ours_bf16": "ours bf16"}

TARGET_CACHED_S = 4.0



def _bf16_against_fp32(rate: dict) -> str:
    """bf16 matmul against fp32 in words: CPUs without bf16 units (AVX-512 BF16, AMX) run it many times slower."""
    ratio = rate["bf16"] / rate["fp32"]
    if ratio >= 1:
        return f"{ratio:.1f}× faster than fp32: this CPU has bf16 units"
    return f"{1 / ratio:.0f}× slower than fp32: this CPU has no native bf16"

def _s(value: float) -> str:
    return f"{value:.1f} s" if value == value else "–"


def _mb(value: float) -> str:
    return f"{value / 1e6:.2f} MB"


def _x(value: float) -> str:
    return f"{value:.2f}×" if value == value else "–"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _median_of(runs: list[dict], key: str, field: str = "wall") -> float:
    return median([getattr(run[key], field) for run in runs])


def summarise(runs: list[dict]) -> dict:
    """Medians of one tool × backbone × precision: cold and cached wall/CPU, cache bytes, extraction img/s."""
    if not runs:
        return {}
    out = {"reps": len(runs), "cold": _median_of(runs, "cold"), "cold_cpu": _median_of(runs, "cold", "cpu"),
           "cached": _median_of(runs, "cached"), "cached_cpu": _median_of(runs, "cached", "cpu"),
           "bytes": median([run["bytes"][0] for run in runs]), "disk_bytes": median([run["bytes"][1] for run in runs]),
           "metrics": runs[-1]["metrics"]}
    out["img_s"] = runs[-1]["images"] / (out["cold"] - out["cached"]) if out["cold"] > out["cached"] else float("nan")
    if "stages" in runs[0]:
        out["stages"] = {name: {"wall": _median_of([r["stages"] for r in runs], name),
                                "cpu": _median_of([r["stages"] for r in runs], name, "cpu")}
                         for name in runs[0]["stages"]}
        rates = [r["in_process_img_s"] for r in runs if r["in_process_img_s"]]
        out["in_process_img_s"] = median(rates)
        out["precision"], out["identity"] = runs[-1]["precision"], runs[-1]["identity"]
    return out


def report(runs: dict, context: dict, backbones: list[str]) -> tuple[str, dict]:
    for tool in ("ours", "theirs", "ours_bf16"):
        for results in runs[tool].values():
            for result in results:
                result["images"] = context["images"]
    medians = {tool: {b: summarise(runs[tool].get(b, [])) for b in backbones}
               for tool in ("ours", "theirs", "ours_bf16")}
    limit = context["limit"]
    rate = {"fp32": max(limit["fp32"]), "bf16": max(limit["bf16"])}
    lines = [f"{context['images']} images ({context['per_class']} + {context['per_class']} per class) from "
             f"{context['folder']}; {context['threads']} threads; medians of {context['reps']} interleaved "
             f"repetition(s); {context['date']}; {context['cpu']}", "",
             f"load before: {context['load_before']}", f"load after:  {context['load_after']}", "",
             "| workload | visbench 0.27.0 | visbench-harness | advantage | target |", "|---|---|---|---|---|"]
    for b in backbones:
        theirs, ours, bf16 = medians["theirs"][b], medians["ours"][b], medians["ours_bf16"][b]
        label = {"resnet18.random": "ResNet-18", "efficientnet_lite0": "EfficientNet-Lite0"}[b]
        cold, cached = theirs["cold"] / ours["cold"], theirs["cached"] / ours["cached"]
        lines.append(f"| {label}, classification, cold fp32 | {_s(theirs['cold'])} | {_s(ours['cold'])} | {_x(cold)} "
                     f"| ≥ 1.0×: {_verdict(cold >= 1.0)} |")
        if bf16:
            ratio = theirs["cold"] / bf16["cold"]
            lines.append(f"| {label}, cold, ours bf16 vs their fp32 | {_s(theirs['cold'])} | {_s(bf16['cold'])} | "
                         f"{_x(ratio)} | ≥ 2×: {_verdict(ratio >= 2.0)} |")
        lines.append(f"| {label}, classification, cached | {_s(theirs['cached'])} | {_s(ours['cached'])} | "
                     f"{_x(cached)} | ≥ 2×: {_verdict(cached >= 2.0)}; < {TARGET_CACHED_S:.0f} s: "
                     f"{_verdict(ours['cached'] < TARGET_CACHED_S)} |")
        lines.append(f"| {label}, feature cache bytes | {_mb(theirs['bytes'])} | {_mb(ours['bytes'])} | "
                     f"{_x(theirs['bytes'] / ours['bytes'])} | |")
        lines.append(f"| {label}, extraction img/s (images ÷ (cold − cached)) | {theirs['img_s']:.1f} | "
                     f"{ours['img_s']:.1f} | {_x(ours['img_s'] / theirs['img_s'])} | |")
        bound = rate["fp32"] / limit["flops"][b]
        lines.append(f"| {label}, img/s ÷ FLOP-bound limit ({bound:.1f} img/s) | {theirs['img_s'] / bound:.0%} | "
                     f"{ours['img_s'] / bound:.0%} | | |")
    lines += ["", "Per stage (ours, whole processes, wall / CPU):", "",
              "| backbone | prepare | extract | probe | cold total | cached probe | in-process extract | "
              "visbench cold | visbench cached |", "|---|---|---|---|---|---|---|---|---|"]
    for tool, tag in (("ours", "fp32"), ("ours_bf16", "bf16")):
        for b in backbones:
            ours, theirs = medians[tool][b], medians["theirs"][b]
            if not ours:
                continue
            st = ours["stages"]
            lines.append(f"| {b} {tag} | " + " | ".join(f"{_s(st[n]['wall'])} / {_s(st[n]['cpu'])}"
                                                       for n in ("prepare", "extract", "probe"))
                         + f" | {_s(ours['cold'])} / {_s(ours['cold_cpu'])} | {_s(ours['cached'])} / "
                         f"{_s(ours['cached_cpu'])} | {ours['in_process_img_s']:.1f} img/s | "
                         f"{_s(theirs['cold'])} / {_s(theirs['cold_cpu'])} | {_s(theirs['cached'])} / "
                         f"{_s(theirs['cached_cpu'])} |")
    lines += ["", "FLOP-bound limit: FLOPs per image (torch.utils.flop_counter, one forward at 224²) ÷ the best "
              f"size² matmul rate at {context['threads']} threads (measured before and after the runs):", "",
              f"- fp32 matmul (2048²): {', '.join(f'{r / 1e9:.1f}' for r in limit['fp32'])} GFLOP/s; bf16 matmul "
              f"(512²): {', '.join(f'{r / 1e9:.2f}' for r in limit['bf16'])} GFLOP/s "
              f"({_bf16_against_fp32(rate)})"]
    for b in backbones:
        flops = limit["flops"][b]
        lines.append(f"- {b}: {flops / 1e9:.2f} GFLOP/image → {rate['fp32'] / flops:.1f} img/s fp32, "
                     f"{rate['bf16'] / flops:.2f} img/s bf16")
    lines += ["", "Probe metrics (the probes differ: ours `linear-probe-adamw/v3` (NumPy), 100 epochs, lr 1e-3, "
              "standardised; "
              "visbench's default, 200 epochs, lr 1e-2, raw features):", "",
              "| backbone | ours fp32 top1 / top5 | ours bf16 top1 / top5 (Δ vs fp32) | bf16 identity ≠ fp32 | "
              "visbench top1 / top5 | pooled-feature parity |", "|---|---|---|---|---|---|"]
    for b in backbones:
        ours, bf16, theirs = medians["ours"][b], medians["ours_bf16"][b], medians["theirs"][b]
        om, tm = ours["metrics"], theirs["metrics"]
        if bf16:
            bm = bf16["metrics"]
            deltas = ", ".join(f"{k} {bm[k] - om[k]:+.4f}" for k in ("top1", "top5", "macro_f1", "train_top1"))
            bf16_cell = f"{bm['top1']:.4f} / {bm['top5']:.4f} ({deltas})"
            identity = f"{bf16['precision']}: {bf16['identity'] != ours['identity']}"
        else:
            bf16_cell = identity = "not run"
        par = runs["parity"].get(b)
        parity = f"max abs diff {par['max_abs_diff']:.2e} ({par['relative']:.1e} of max) over {par['images']} images" \
            if par else "–"
        lines.append(f"| {b} | {om['top1']:.4f} / {om['top5']:.4f} | {bf16_cell} | {identity} | "
                     f"{tm['top1']:.4f} / {tm['top5']:.4f} | {parity} |")
    dvc = runs.get("dvc")
    if dvc:
        lines += _dvc_lines(dvc)
    lines += ["", "Environments (both from our requirements.lock's pins):",
              f"- ours: {_versions(context['versions']['ours'])}",
              f"- visbench: {_versions(context['versions']['visbench'])}"]
    if context.get("no_bytecode"):
        lines.append("- PYTHONDONTWRITEBYTECODE=1 was set: harness's modules compiled in every process (site-packages "
                     "ship .pyc on both sides; measured: no difference in the probe stage's wall time)")
    for pin in context["dropped_pins"]:
        lines.append(f"- pin not applied to visbench's venv: {pin}")
    summary = {"context": context, "medians": medians, "parity": runs["parity"], "dvc": dvc, "raw": runs}
    return "\n".join(lines), summary


def _dvc_lines(dvc: dict) -> list[str]:
    lines = ["", "What DVC adds per stage: `dvc repro --single-item STAGE` (how the CLI runs "
             "DVC) against the bare stage command run just before or after it; \"first\" = no dvc.lock yet, so DVC "
             "also hashes and caches the outs:", "",
             "| stage | bare command | under DVC | DVC adds (median of pairs) |", "|---|---|---|---|"]
    for row, pairs in dvc["pairs"].items():
        bare, under = median([b.wall for b, _ in pairs]), median([u.wall for _, u in pairs])
        added = median([u.wall - b.wall for b, u in pairs])
        lines.append(f"| {row}{f' ×{len(pairs)}' if len(pairs) > 1 else ''} | {_s(bare)} | {_s(under)} | {_s(added)} |")
    n = dvc["stages"]
    for how, times in dvc["noop"].items():
        total = median([t.wall for t in times])
        lines.append(f"| no-op, {n} stages up to date, {how} ×{len(times)} | – | {_s(total)} | "
                     f"{_s(total / n)} per stage |")
    return lines


def _versions(found: dict[str, str]) -> str:
    return ", ".join(f"{name} {version}" for name, version in found.items())


def record_results(bench: Bench, runs: dict, context: dict, backbones: list[str], rates: dict[str, str]) -> None:
    """Every repetition's processes as samples of the results file (wall and CPU seconds, cache MB, extraction
    img/s = images ÷ (cold − cached) per repetition), the probes' metrics, the parity check, DVC's overhead, and
    the ratios: visbench ÷ ours on the same work, and each tool's img/s ÷ the FLOP-bound limit (`rates`: the
    runner's matmul measurements by dtype)."""
    images = context["images"]
    bench.note(f"{images} images ({context['per_class']} + {context['per_class']} per class) from "
               f"{context['folder']}; {context['threads']} threads; visbench 0.27.0 from PyPI in its own venv")
    bench.note("the probes differ: ours `linear-probe-adamw/v3` (NumPy), visbench's default classification probe")
    bench.note("visbench: " + _versions(context["versions"]["visbench"]))
    for pin in context["dropped_pins"]:
        bench.note(f"pin not applied to visbench's venv: {pin}")
    for backbone in backbones:
        for tool, label in TOOLS.items():
            for run in runs[tool].get(backbone, []):
                details = {"backbone": backbone, "tool": label}
                bench.add_time(f"{backbone} {label} cold", run["cold"], details=details)
                bench.add_time(f"{backbone} {label} cached", run["cached"], details=details)
                for stage, timed in run.get("stages", {}).items():
                    bench.add_time(f"{backbone} {label} {stage}", timed, details=details)
                bench.record(f"{backbone} {label} feature cache", "MB", [run["bytes"][0] / 1e6], details)
                if run["cold"].wall > run["cached"].wall:
                    bench.record(f"{backbone} {label} extraction", "img/s",
                                 [images / (run["cold"].wall - run["cached"].wall)], details)
                for metric in ("top1", "top5"):
                    bench.record(f"{backbone} {label} {metric}", "accuracy", [run["metrics"][metric]], details)
        flops = context["limit"]["flops"][backbone]
        bench.record(f"{backbone} GFLOP per image", "GFLOP", [flops / 1e9], {"backbone": backbone})
        bench.record(f"{backbone} FLOP-bound limit fp32", "img/s", [bench.median(rates["fp32"]) * 1e9 / flops],
                     {"backbone": backbone, "from": rates["fp32"]})
        parity = runs["parity"].get(backbone)
        if parity:
            bench.record(f"{backbone} pooled-feature parity, max |Δ| ÷ max |x|", "relative", [parity["relative"]],
                         {"backbone": backbone, "images": parity["images"], "max_abs_diff": parity["max_abs_diff"]})
        theirs = f"{backbone} visbench"
        for label in ("ours fp32", "ours bf16"):
            ours = f"{backbone} {label}"
            bench.ratio(f"{backbone} cold: visbench ÷ {label} (s)", f"{theirs} cold", f"{ours} cold")
            bench.ratio(f"{backbone} cached: visbench ÷ {label} (s)", f"{theirs} cached", f"{ours} cached")
        bench.ratio(f"{backbone} feature cache: visbench ÷ ours (MB)", f"{theirs} feature cache",
                    f"{backbone} ours fp32 feature cache")
        bench.ratio(f"{backbone} extraction: ours ÷ visbench (img/s)", f"{backbone} ours fp32 extraction",
                    f"{theirs} extraction")
        for label in ("ours fp32", "visbench"):
            bench.ratio(f"{backbone} extraction, {label} ÷ FLOP-bound limit", f"{backbone} {label} extraction",
                        f"{backbone} FLOP-bound limit fp32")
    bench.ratio("bf16 matmul ÷ fp32 matmul (GFLOP/s)", rates["bf16"], rates["fp32"])
    dvc = runs.get("dvc")
    if dvc:
        for row, pairs in dvc["pairs"].items():
            for bare, under in pairs:
                bench.add_time(f"DVC: {row}, bare command", bare)
                bench.add_time(f"DVC: {row}, under DVC", under)
            bench.ratio(f"DVC: {row}, under DVC ÷ bare", f"DVC: {row}, under DVC", f"DVC: {row}, bare command")
        for how, times in dvc["noop"].items():
            for timed in times:
                bench.add_time(f"DVC: no-op repro of {dvc['stages']} stages, {how}", timed)
