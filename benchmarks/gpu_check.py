"""One prepared run that measures the harness on a GPU (`scripts/gpu-check`), and its CPU smoke mode (`--cpu`).

1. Draws its own image folder: N seeded JPEGs at 500×375 (gradients, shapes, noise; a process pool sized to the
   cores), laid out as `train/<class>/<image>` and prepared as an `image_folder` dataset.
2. Extracts pooled features with a ViT-S/14-sized (`dinov2_vits14@random`) and a ResNet-50-sized
   (`resnet50@random`) model, fp32 and bf16, each cold (empty cache) and cached (the same call again: every
   entry a hit), through `harness.runs.extract.extract_dataset` on the device. Random init: this is throughput.
3. Measures the device's bf16 matmul peak (an n³ `torch.matmul`, warm-ups, CUDA events, median of repeats) and
   each model's forward FLOPs per image (`FlopCounterMode`), so every row says the share of that peak its forward
   passes reach; a forward-only row per model × precision (device-resident batch, no decode, no copy back) says
   what the model itself reaches.
4. Trains one dense probe (depth, on ViT-S/14-shaped synthetic features) on the device.
5. Runs `correspondence` × `efficientnet_lite0` on the bundled photos through `harness.run` in a temporary
   workspace on the device, and compares every metric with the committed CPU record
   (`results/default/correspondence/efficientnet_lite0.json`): |Δ| ≤ tolerance × max(1, |committed|).
6. Prints a table and writes everything as JSON to `benchmarks/results/gpu_check-<machine>.json` (a CPU run:
   `build/gpu_check-<machine>.json`, kept off the performance page; or `--out`).

Targets (reported beside the measurements, never asserted): cold extraction of 10,000 images with the
ViT-S/14-sized model under 20 s at bf16, its forward above 50% of the measured bf16 peak. Exit 0 when every part
ran (targets met or not), 1 when a part failed or a metric is outside its tolerance, 2 for a bad command (a CUDA
device on a machine without one). `scripts/gpu-check --wheels DIR` (benchmarks/gpu_wheels.py, no torch needed)
instead downloads, for a GPU machine without internet, the wheels of what this check imports beyond a stock
torch + timm + numpy + Pillow + safetensors + PyYAML environment (docs/gpu.md). Usage:

    scripts/gpu-check [--cpu] [--device cuda:0] [--images 10000] [--out PATH]
    scripts/gpu-check --wheels DIR [--python-version 3.12]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.abc
import importlib.metadata
import json
import logging
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # run as a script: `benchmarks` (the report's torch-free half) is found from here
# key → (registry name, what it stands for); random init: the architecture's cost, no weights to carry
MODELS = {"vit_s14": ("dinov2_vits14@random", "ViT-S/14"), "resnet50": ("resnet50@random", "ResNet-50")}
PRECISIONS = ("fp32", "bf16")
IMAGE_SIZE = (500, 375)  # width × height, a typical photo-dataset JPEG
CLASSES = 10
GPU_IMAGES, CPU_IMAGES = 10_000, 24
# The metric check: a default-grid run whose data ships with scikit-image/scikit-learn (no ../shared, no apt)
CHECK_BACKBONE, CHECK_TASK, CHECK_DATASET, CHECK_GRID = "efficientnet_lite0", "correspondence", "homography_photos", \
    "default"
TOLERANCE = 1e-3  # fp32 on a GPU against the committed CPU record (TF32 off, deterministic kernels)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image, ImageDraw, ImageFilter  # noqa: E402

# what the report says and how its lines read, without torch (the performance page renders them too)
from benchmarks.gpu_check_report import (  # noqa: E402
    LEGEND,
    SCHEMA,
    dataset_line,
    device_line,
    metric_cells,
    metric_check_line,
    metric_check_outcome,
    outcome,
    peak_line,
    probe_line,
    report_name,
    table,
    target_line,
    targets,
)
from benchmarks.gpu_wheels import (  # noqa: E402
    ONLY_CARRIED_ENV,
    PROJECT,
    STOCK,
    canonical,
    carried_distributions,
    only_carried_site,
    requirement_closure,
)

log = logging.getLogger("gpu_check")


# -- the image folder ------------------------------------------------------------------------------------------
def draw_image(seed: int, index: int) -> Image.Image:
    """One procedural photo, a function of (seed, index) alone: a two-colour gradient at a random angle, 3–9
    filled shapes, sometimes a blur, Gaussian noise. JPEG-encoded it is about the size of a real photo's."""
    rng = np.random.default_rng((seed, index))
    width, height = IMAGE_SIZE
    angle = rng.uniform(0, 2 * np.pi)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    ramp = (xs * np.cos(angle) + ys * np.sin(angle)) / (width + height)
    ramp = (ramp - ramp.min()) / max(float(np.ptp(ramp)), 1e-6)
    a, b = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    pixels = a[None, None] * (1 - ramp[..., None]) + b[None, None] * ramp[..., None]
    image = Image.fromarray(pixels.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 10))):
        fill = tuple(int(v) for v in rng.integers(0, 256, 3))
        x0, y0 = rng.uniform(-50, width), rng.uniform(-50, height)
        box = [x0, y0, x0 + rng.uniform(20, 250), y0 + rng.uniform(20, 250)]
        shape = int(rng.integers(3))
        if shape == 0:
            draw.ellipse(box, fill=fill)
        elif shape == 1:
            draw.rectangle(box, fill=fill)
        else:
            points = rng.uniform([0, 0], [width, height], (int(rng.integers(3, 7)), 2))
            draw.polygon([tuple(p) for p in points.tolist()], fill=fill)
    if rng.random() < 0.3:
        image = image.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 3.0))))
    sigma = np.float32(rng.uniform(0, 12))
    noisy = np.asarray(image, dtype=np.float32) + sigma * rng.standard_normal((height, width, 3), dtype=np.float32)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def image_path(root: Path, index: int) -> Path:
    return root / "train" / f"class{index % CLASSES}" / f"{index:05d}.jpg"


def _write_images(job: tuple[str, int, list[int]]) -> int:
    root, seed, indices = job
    for index in indices:
        draw_image(seed, index).save(image_path(Path(root), index), quality=90)
    return len(indices)


def write_image_folder(root: Path, count: int, seed: int, workers: int) -> None:
    """`count` images under root/train/class<k>/ (k = index mod CLASSES), written by `workers` forked processes
    (before any torch computation has started its thread pool; the children use only NumPy and Pillow)."""
    for label in range(CLASSES):
        (root / "train" / f"class{label}").mkdir(parents=True, exist_ok=True)
    chunks = [list(range(start, count, max(1, workers * 4))) for start in range(min(count, max(1, workers * 4)))]
    jobs = [(str(root), seed, chunk) for chunk in chunks if chunk]
    if workers <= 1 or count < 64:  # a pool costs more than it saves on a handful of images
        for job in jobs:
            _write_images(job)
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        written = sum(pool.map(_write_images, jobs))
    assert written == count, (written, count)


# -- measurements ------------------------------------------------------------------------------------------------
def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return
    # Linux: writing 5 to clear_refs resets this process's peak RSS (VmHWM) to its current RSS
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def peak_memory(device: torch.device) -> tuple[int | None, str]:
    """Bytes at peak since `reset_peak_memory`, and what they count."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device)), "cuda max_memory_allocated"
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024, "peak RSS (VmHWM)"
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "peak RSS since start (ru_maxrss)"


def _timed(device: torch.device, fn, repeats: int, warmups: int) -> list[float]:
    """Seconds of each of `repeats` calls of `fn` after `warmups`: CUDA events on a GPU (the kernels' time, not
    the launch queue's), the wall clock on the CPU."""
    for _ in range(warmups):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
    return times


def matmul_peak(device: torch.device, size: int, repeats: int, inner: int) -> dict[str, Any]:
    """The bf16 matmul rate the device reaches here: median over `repeats` of `inner` back-to-back n³ products."""
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=generator)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=generator)
    out = torch.empty(size, size, device=device, dtype=torch.bfloat16)

    def run() -> None:
        for _ in range(inner):
            torch.matmul(a, b, out=out)

    times = _timed(device, run, repeats, warmups=2)
    median = statistics.median(times)
    return {"size": size, "dtype": "bf16", "inner": inner, "repeats_s": times, "median_s": median,
            "tflops": 2 * size**3 * inner / median / 1e12}


def forward_flops(backbone) -> float:
    """FLOPs of one image's forward pass as the extraction runs it (pooled, default layer), counted on a batch
    of two on the CPU. Attention runs in its math form there, the one FlopCounterMode counts: the fused CPU kernel
    has no FLOP formula. Any backend does the same FLOPs, so the count holds for the GPU's fused kernels."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    crop = backbone.preprocess.crop
    images = torch.zeros(2, 3, crop, crop)
    counter = FlopCounterMode(display=False)
    with sdpa_kernel([SDPBackend.MATH]), counter:
        backbone.extract_features(images)
    return counter.get_total_flops() / 2


def forward_only(backbone, device: torch.device, batch: int, repeats: int) -> dict[str, Any]:
    """`extract_features` on a device-resident batch, outputs left there: what the model reaches without the
    extraction's decoding, host-to-device copy and copy of every output back to the CPU."""
    crop = backbone.preprocess.crop
    images = torch.randn(batch, 3, crop, crop, generator=torch.Generator().manual_seed(0)).to(device)
    if device.type == "cuda" and backbone.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    times = _timed(device, lambda: backbone.extract_features(images), repeats, warmups=2)
    return {"batch": batch, "repeats_s": times, "median_s": statistics.median(times)}


def warm_up(backbone, device: torch.device) -> None:
    crop = backbone.preprocess.crop
    backbone.to_device(device)
    backbone.extract_features(torch.zeros(2, 3, crop, crop, device=device))
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cache_stats(out_dir: Path) -> dict[str, int]:
    from harness.runs.feature_cache import STATS_SUFFIX

    return json.loads(out_dir.with_name(out_dir.name + STATS_SUFFIX).read_text())


def extraction_pass(backbone, manifest, out_dir: Path, batch_size: int, device: torch.device,
                    workers: int | None) -> dict[str, Any]:
    """One `extract_dataset` call, timed by the wall clock around it and by the extraction's own `timing`."""
    from harness.runs.extract import FeatureRequest, extract_dataset

    reset_peak_memory(device)
    started = time.perf_counter()
    description = extract_dataset(backbone, manifest, [FeatureRequest("pooled")], out_dir, batch_size,
                                  device=device, workers=workers)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall = time.perf_counter() - started
    memory, memory_kind = peak_memory(device)
    timing = description.get("timing", {})
    stats = cache_stats(out_dir)
    return {"wall_s": wall, "img_per_s": len(manifest.items) / wall, "images": len(manifest.items),
            "computed": stats["computed"], "cache_hits": stats["cached"],
            "decode_wait_s": timing.get("decode_wait_s"), "forward_s": timing.get("forward_s"),
            "store_s": timing.get("store_s"), "loop_s": timing.get("total_s"),
            "batch_size_used": description.get("batch_size_used", timing.get("batch_size_used")),
            "peak_memory_bytes": memory, "peak_memory_kind": memory_kind,
            "extraction_device": description.get("device", "cpu")}


def run_extractions(models: list[str], manifest, work: Path, device: torch.device, batch_size: int,
                    workers: int | None, peak_tflops: float | None, forward_repeats: int, forward_batch: int | None,
                    failures: list[str]) -> list[dict[str, Any]]:
    from harness.backbones import create_backbone

    rows: list[dict[str, Any]] = []
    for key in models:
        name, label = MODELS[key]
        flops = None
        for precision in PRECISIONS:
            with section(f"extraction {key} {precision}", failures):
                backbone = create_backbone(name, precision=precision)
                if flops is None:  # counted once at fp32 on the CPU: the same FLOPs at either precision
                    flops = forward_flops(create_backbone(name, precision="fp32"))
                out_dir = work / "features" / f"{key}-{precision}"
                base = {"model": key, "label": label, "backbone": name, "precision": precision,
                        "flops_per_image": flops}
                # one untimed batch on the device first: the cold pass measures an empty cache, not the first
                # use of the device's kernels (cuBLAS/cuDNN handles, lazy module loading)
                warm_up(backbone, device)
                for phase in ("cold", "cached"):
                    row = {**base, "pass": phase, **extraction_pass(backbone, manifest, out_dir, batch_size, device,
                                                                   workers)}
                    if row["forward_s"] and row["computed"]:
                        row["forward_tflops"] = flops * row["computed"] / row["forward_s"] / 1e12
                    else:
                        row["forward_tflops"] = None
                    row["peak_share"] = _share(row["forward_tflops"], peak_tflops)
                    rows.append(row)
                    log.info("%s %s %s: %.1f img/s", key, precision, phase, row["img_per_s"])
                    if phase == "cached" and row["computed"]:
                        failures.append(f"{key} {precision} cached pass computed {row['computed']} images")
                batch = forward_batch or rows[-2]["batch_size_used"] or batch_size
                reset_peak_memory(device)
                measured = forward_only(backbone, device, batch, forward_repeats)
                memory, memory_kind = peak_memory(device)
                tflops = flops * batch / measured["median_s"] / 1e12
                rows.append({**base, "pass": "fwd-only", "images": batch, "computed": batch, "cache_hits": 0,
                             "wall_s": measured["median_s"], "img_per_s": batch / measured["median_s"],
                             "decode_wait_s": 0.0, "forward_s": measured["median_s"], "store_s": 0.0,
                             "batch_size_used": batch, "forward_tflops": tflops,
                             "peak_share": _share(tflops, peak_tflops), "peak_memory_bytes": memory,
                             "peak_memory_kind": memory_kind, "repeats_s": measured["repeats_s"]})
                del backbone
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    return rows


def _share(tflops: float | None, peak: float | None) -> float | None:
    return tflops / peak if tflops is not None and peak else None


def dense_probe(device: torch.device, train: int, val: int, epochs: int) -> dict[str, Any]:
    """The depth probe (`ProbeSpec.evaluate`) on ViT-S/14-shaped features (384 × 16 × 16) whose depth is a
    smooth function of them, so the head has something to learn; trained on `device` when the probe uses one."""
    import torch.nn.functional as F

    from harness.probes import get_probe

    rng = np.random.default_rng(0)
    weights = rng.normal(size=384).astype(np.float32) / 20

    def split(count: int) -> tuple[np.ndarray, np.ndarray]:
        features = rng.normal(size=(count, 384, 16, 16)).astype(np.float32)
        signal = torch.from_numpy(np.einsum("nchw,c->nhw", features, weights))[:, None]
        depth = 2.0 + torch.tanh(F.interpolate(signal, size=(56, 56), mode="bilinear"))[:, 0]
        return features, depth.numpy().astype(np.float32)

    (train_x, train_y), (val_x, val_y) = split(train), split(val)
    spec = get_probe("depth")
    ran_on = str(device) if spec.uses_device else "cpu"
    reset_peak_memory(device)
    started = time.perf_counter()
    result = spec.evaluate({"train": train_x, "val": val_x}, {"train": train_y, "val": val_y}, epochs=epochs,
                           device=str(device))
    seconds = time.perf_counter() - started
    memory, memory_kind = peak_memory(device)
    return {"task": "depth", "features": [384, 16, 16], "train": train, "val": val, "epochs": epochs,
            "device_asked": str(device), "device": ran_on, "uses_device": spec.uses_device, "seconds": seconds,
            "metrics": dict(result.metrics), "peak_memory_bytes": memory, "peak_memory_kind": memory_kind}


def metric_check(device: torch.device, tolerance: float) -> dict[str, Any]:
    """`harness.run` of the check's backbone × task in a temporary workspace on `device`, every metric against
    the committed CPU record: passes where |Δ| ≤ tolerance × max(1, |committed|) (absolute for rates, relative
    for metrics in pixels)."""
    import harness

    committed_path = ROOT / "results" / CHECK_GRID / CHECK_TASK / f"{CHECK_BACKBONE}.json"
    committed = json.loads(committed_path.read_text())["metrics"]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-check-run-") as tmp:
        result = harness.run(CHECK_BACKBONE, CHECK_TASK, CHECK_DATASET, workspace=Path(tmp),
                             params_file=ROOT / "params.yaml", device=str(device))
        measured = result.metrics
    seconds = time.perf_counter() - started
    metrics = {}
    for name in sorted(committed):
        ref, got = float(committed[name]), measured.get(name)
        allowed = tolerance * max(1.0, abs(ref))
        diff = None if got is None else abs(float(got) - ref)
        metrics[name] = {"committed": ref, "measured": got, "abs_diff": diff, "allowed": allowed,
                         "pass": diff is not None and diff <= allowed}
    return {"run": f"{CHECK_GRID}-{CHECK_TASK}@{CHECK_BACKBONE}", "committed": str(committed_path.relative_to(ROOT)),
            "device": str(device), "tolerance": tolerance, "rule": "|measured - committed| <= tolerance * "
            "max(1, |committed|)", "seconds": seconds, "metrics": metrics,
            "passed": all(m["pass"] for m in metrics.values())}


# -- environment -------------------------------------------------------------------------------------------------
def imported_distributions() -> dict[str, str]:
    """Every installed distribution a module imported so far belongs to, with its version (the project itself,
    run from its folder, is none)."""
    owners = importlib.metadata.packages_distributions()
    found: dict[str, str] = {}
    for module in list(sys.modules):
        for dist in owners.get(module.split(".")[0], []):
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                found[canonical(dist)] = importlib.metadata.version(dist)
    found.pop(PROJECT, None)
    return dict(sorted(found.items()))


def environment(device: torch.device) -> dict[str, Any]:
    import timm

    from harness.core.devices import describe_device
    from harness.runs.extract import usable_cores

    return {"device": describe_device(device), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "timm": timm.__version__, "numpy": np.__version__, "cores": usable_cores(),
            "torch_threads": torch.get_num_threads(), "host_cpu": describe_device("cpu")}


@contextlib.contextmanager
def section(name: str, failures: list[str]) -> Iterator[None]:
    """A part of the check: its exception is logged and recorded, and the other parts still run (one GPU run
    brings back everything it could measure)."""
    try:
        yield
    except Exception as error:
        traceback.print_exc()
        failures.append(f"{name}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")


# -- output ------------------------------------------------------------------------------------------------------
def print_report(report: dict[str, Any]) -> None:
    print(f"\ngpu-check on {device_line(report['environment'])}")
    if report.get("dataset"):
        print(f"dataset: {dataset_line(report)}")
    if report.get("matmul_peak"):
        print(f"bf16 matmul peak: {peak_line(report['matmul_peak'])}")
    if report.get("extraction"):
        print("\n" + table(report["extraction"]))
        print(LEGEND)
    for target in report.get("targets", []):
        print(f"target: {target_line(target)}")
    if report.get("probe"):
        print(f"\ndense probe: {probe_line(report['probe'])}")
    check = report.get("metric_check")
    if check:
        print(f"\nmetric check: {metric_check_line(check)}")
        for name, metric in check["metrics"].items():
            cells = metric_cells(name, metric)
            print(f"  {cells[0]:<16} committed {cells[1]}  measured {cells[2]}  |Δ| {cells[3]}  allowed {cells[4]}  "
                  f"{cells[5]}")
        print(f"  {metric_check_outcome(check)}")
    for failure in report["failures"]:
        print(f"FAILED: {failure}")
    print(f"\n{outcome(report)}; wrote {report['out']}")


def run_only_carried(argv: list[str]) -> int:
    """This check again in an interpreter that sees only the stock and the carried distributions."""
    with tempfile.TemporaryDirectory(prefix="gpu-check-site-") as site:
        linked = only_carried_site(Path(site))
        env = {**os.environ, ONLY_CARRIED_ENV: ",".join(linked),
               "PYTHONPATH": os.pathsep.join([site, str(ROOT)])}
        argv = [arg for arg in argv if arg != "--only-carried"]
        return subprocess.call([sys.executable, "-S", str(Path(__file__).resolve()), *argv], env=env)


# -- main --------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true",
                        help=f"the CI smoke mode: device cpu, {CPU_IMAGES} images, a small matmul and probe")
    parser.add_argument("--device", default=None, help="cuda (default), cuda:N, or cpu")
    parser.add_argument("--images", type=int, default=None, help=f"default {GPU_IMAGES:,} ({CPU_IMAGES} with --cpu)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=256,
                        help="most images per forward pass (params.yaml's cuda_batch_size; on the CPU each backbone "
                             "runs its own measured size up to it)")
    parser.add_argument("--workers", type=int, default=None, help="decode workers (default: the harness's choice)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"subset of {','.join(MODELS)}")
    parser.add_argument("--matmul-size", type=int, default=None, help="n of the n³ bf16 matmul (8192; 512 on CPU)")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE)
    parser.add_argument("--skip-metric-check", action="store_true")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep images and features here (default: a "
                        "temporary folder, removed at the end)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON path (default benchmarks/results/gpu_check-<machine>.json; on the CPU, build/…)")
    parser.add_argument("--only-carried", action="store_true",
                        help="run in an interpreter that sees only the stock and the carried distributions (what a "
                             "GPU machine with the carried wheels has): shows here that the carried list is enough")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("harness", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.only_carried:
        return run_only_carried(sys.argv[1:] if argv is None else argv)

    from harness.core.devices import DeviceError, describe_device, resolve_device, set_deterministic
    from harness.runs.extract import usable_cores

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; valid: {', '.join(MODELS)}")
    try:
        device = resolve_device(args.device or ("cpu" if args.cpu else "cuda"))
    except DeviceError as error:
        print(f"gpu-check: {error} (or run scripts/gpu-check --cpu)", file=sys.stderr)
        return 2
    small = args.cpu or device.type == "cpu"
    images = args.images or (CPU_IMAGES if small else GPU_IMAGES)
    # a GPU run's report is a benchmark result (the performance page renders every one); a CPU smoke run's is not
    results = ROOT / ("build" if small else "benchmarks/results")
    out = (args.out or results / report_name(describe_device(device))).resolve()
    os.chdir(ROOT)  # harness.run and params.yaml resolve project-relative paths
    # the settings the extraction itself sets, before cuBLAS is first used (the matmul peak runs under them too)
    determinism = set_deterministic(device)
    started = time.perf_counter()
    failures: list[str] = []
    report: dict[str, Any] = {"schema": SCHEMA, "created": datetime.datetime.now(datetime.UTC).isoformat(
        timespec="seconds"), "mode": "cpu" if small else "gpu", "argv": sys.argv[1:], "out": str(out),
        "environment": environment(device), "determinism": determinism, "failures": failures}
    with contextlib.ExitStack() as stack:
        if args.work_dir is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu-check-")))
        else:
            work = args.work_dir.resolve()
            work.mkdir(parents=True, exist_ok=True)
        writers = max(1, usable_cores())
        manifest = None
        with section("image folder", failures):
            generated = time.perf_counter()
            write_image_folder(work / "images", images, args.seed, writers)
            generate_s = time.perf_counter() - generated
            from harness.datasets.kinds import prepare_dataset

            prepared = time.perf_counter()
            manifest = prepare_dataset("gpu_check", {"kind": "image_folder", "root": str(work / "images")},
                                       work / "data")
            report["dataset"] = {"images": len(manifest.items), "size": list(IMAGE_SIZE), "seed": args.seed,
                                 "classes": CLASSES, "identity": manifest.identity, "writers": writers,
                                 "generate_s": generate_s, "prepare_s": time.perf_counter() - prepared}
        from harness.runs.extract import default_workers

        report["decode_workers"] = default_workers(device) if args.workers is None else args.workers
        peak_tflops = None
        with section("matmul peak", failures):
            size = args.matmul_size or (512 if small else 8192)
            report["matmul_peak"] = matmul_peak(device, size, repeats=5 if small else 10, inner=1 if small else 10)
            peak_tflops = report["matmul_peak"]["tflops"]
        if manifest is not None:
            report["extraction"] = run_extractions(
                models, manifest, work, device, args.batch_size, args.workers, peak_tflops,
                forward_repeats=2 if small else 10, forward_batch=2 if small else None, failures=failures)
            report["targets"] = targets(report["extraction"], len(manifest.items))
        with section("dense probe", failures):
            report["probe"] = dense_probe(device, *((16, 8, 2) if small else (512, 128, 30)))
        if not args.skip_metric_check:
            with section("metric check", failures):
                report["metric_check"] = metric_check(device, args.tolerance)
                if not report["metric_check"]["passed"]:
                    failed = [n for n, m in report["metric_check"]["metrics"].items() if not m["pass"]]
                    failures.append(f"metric check: {', '.join(failed)} outside tolerance {args.tolerance:g}")
    dists = imported_distributions()
    report["imported_distributions"] = dists
    report["stock"] = list(STOCK)
    report["carried"] = carried_distributions()
    report["imported_beyond_stock"] = sorted(set(dists) - requirement_closure(STOCK))
    # in the --only-carried child: the distributions its interpreter could see
    report["only_carried"] = os.environ[ONLY_CARRIED_ENV].split(",") if os.environ.get(ONLY_CARRIED_ENV) else None
    report["ok"] = not failures
    report["duration_s"] = time.perf_counter() - started
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print_report(report)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
