"""Fault injection against a real small project (issue 47): every fault a run can meet either heals with one
plain re-run or is refused in one line naming the file and the fix, and no good record is ever lost or changed.

The project: one grid `g` (classification + retrieval of the random-init CIFAR ResNet-20 on 12 images of 32 px),
this checkout's harness/ committed in its own git repository and run once through the CLI (module fixture);
each case works on a copy of it. Each case asserts the exit code, the one line, the records, and that one plain
re-run (the same command, or the one the line names) heals it.

`VISBENCH_FAULTS_RESULTS=1` (set by hand, never by CI) writes each row's outcome and time to heal to
benchmarks/reliability/faults-<machine>.json, from which `python -m benchmarks.reliability_page` renders
docs/reliability.md (the whole module must run: a file holds every row).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import yaml
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
BACKBONE = "cifar_resnet20.random"
CLASSIFICATION = f"g-classification@{BACKBONE}"
RECORD = Path(f"results/g/classification/{BACKBONE}.json")
SAMPLES = Path(f"results/g/classification/{BACKBONE}.samples.csv")
OTHER_RECORD = Path(f"results/g/retrieval/{BACKBONE}.json")
FEATURES = Path(f"features/g/{BACKBONE}/tiny")
GIT_ENV = {"GIT_AUTHOR_NAME": "visbench", "GIT_AUTHOR_EMAIL": "visbench@localhost", "GIT_COMMITTER_NAME": "visbench",
           "GIT_COMMITTER_EMAIL": "visbench@localhost"}
RESULTS_ENV = "VISBENCH_FAULTS_RESULTS"
pytestmark = pytest.mark.dvc
OUTCOMES: dict[str, dict] = {}


def _env() -> dict[str, str]:
    return {**os.environ, **GIT_ENV, "DVC_NO_ANALYTICS": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def _cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness.cli.main", "build_site=false", *args]


def cli(project: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(_cli_command(*args), cwd=project, capture_output=True, text=True, timeout=timeout,
                          env=_env())


def _images(root: Path) -> None:
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for label, colour in enumerate([(200, 30, 30), (30, 30, 200)]):
            folder = root / split / f"class{label}"
            folder.mkdir(parents=True)
            for index in range(3):
                pixels = np.clip(np.array(colour) + rng.normal(0, 20, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{index}.png")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """work/images and work/project (params.yaml reads ../images), the grid run once, then kept as pristine/.
    Every case runs in work/ again, a fresh copy of pristine/: at the same absolute path, the pipeline's
    freshness stamp (a hash naming the harness's files by path) still holds, and the CLI skips ~8 s of
    regenerating dvc.yaml in each case."""
    root = tmp_path_factory.mktemp("faults")
    work = root / "work"
    _images(work / "images")
    project = work / "project"
    shutil.copytree(REPO / "harness", project / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    probes = {"classification": {"pooling": "default", "layers": None, "train_split": "train", "eval_split": "val",
                                 "epochs": 5, "lr": 0.01, "weight_decay": 0.0, "batch_size": 8},
              "retrieval": {"pooling": "default", "layers": None, "query_split": "val", "gallery_split": "train",
                            "recall_at": [1, 5]}}
    params = {"settings": {"precision": "fp32", "batch_size": 4, "seed": 0}, "checkpoints": {},
              "datasets": {"tiny": {"kind": "image_folder", "root": "../images"}}, "probes": probes,
              "grids": {"g": {"backbones": [BACKBONE], "tasks": {"classification": "tiny", "retrieval": "tiny"}}}}
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    for keep in ("failures", "docs/plots"):  # collect reads failures/; a one-backbone site draws no plot
        (project / keep).mkdir(parents=True)
        (project / keep / ".gitkeep").write_text("")
    (project / ".gitignore").write_text("__pycache__/\n/features/\n")
    for command in (["git", "init", "-q", "-b", "main"], [sys.executable, "-m", "dvc", "init", "-q"],
                    ["git", "add", "-A"], ["git", "commit", "-q", "-m", "tiny grid"]):
        subprocess.run(command, cwd=project, env=_env(), check=True, capture_output=True)
    first = cli(project, "grid=g")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    shutil.copytree(work, root / "pristine", symlinks=True)
    return root


@pytest.fixture
def project(built: Path) -> Path:
    """work/project as the first run left it, for one case."""
    work = built / "work"
    shutil.rmtree(work)
    shutil.copytree(built / "pristine", work, symlinks=True)
    return work / "project"


def records(project: Path) -> dict[str, dict]:
    """Every ok record under results/, by path, less its wall time and its extraction's timed speed (the fields a
    re-run may change)."""
    found = {}
    for path in sorted((project / "results").rglob("*.json")):
        if not path.name.endswith(".metrics.json"):
            record = json.loads(path.read_text())
            record.pop("duration_s")
            record.pop("throughput", None)
            found[str(path.relative_to(project))] = record
    return found


def files(project: Path, *relative: Path) -> dict[Path, bytes]:
    return {path: (project / path).read_bytes() for path in relative}


def line_with(output: str, *needles: str) -> str:
    """The one line of `output` holding every needle (a fault's report: the file and the fix)."""
    lines = [line for line in output.splitlines() if all(needle in line for needle in needles)]
    assert lines, f"no line names {needles}:\n{output[-4000:]}"
    return lines[0]


def heal(row: str, project: Path, *args: str, before: dict[str, dict] | None = None) -> subprocess.CompletedProcess:
    """The plain re-run that heals a fault: exit 0, no failed attempt left, every record as `before`."""
    started = time.monotonic()
    done = cli(project, *args)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert "all " in done.stdout and "runs ok" in done.stdout
    assert not [p for p in (project / "failures").iterdir() if p.name != ".gitkeep"]
    assert (project / "leaderboard" / "failures.jsonl").read_text() == ""
    if before is not None:
        assert records(project) == before
    OUTCOMES.setdefault(row, {}).update(heal_s=round(seconds, 1), healed=True)
    return done


def outcome(row: str, result: str, line: str = "") -> None:
    OUTCOMES.setdefault(row, {}).update(result=result, line=line, test=CURRENT[0])


CURRENT = [""]  # the running test's name, which each row's outcome names


@pytest.fixture(autouse=True)
def _current_test(request: pytest.FixtureRequest) -> None:
    CURRENT[0] = request.node.name


@pytest.fixture(scope="module", autouse=True)
def _write_outcomes() -> Iterator[None]:
    """With VISBENCH_FAULTS_RESULTS=1, the rows' outcomes to benchmarks/reliability/faults-<machine>.json."""
    yield
    if os.environ.get(RESULTS_ENV) != "1" or not OUTCOMES:
        return
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # `benchmarks` is a folder of scripts, not an installed package
    from benchmarks.reliability_page import results_file
    from harness.core.devices import cpu_model
    from harness.runs.environment import code_commit

    payload = {"machine": this_machine(), "cpu": cpu_model(), "python": platform.python_version(),
               "git_commit": code_commit(), "measured": time.strftime("%Y-%m-%d", time.gmtime()),
               "load_average": [round(value, 2) for value in os.getloadavg()],
               "rows": {row: OUTCOMES[row] for row in sorted(OUTCOMES)}}
    target = results_file(payload["machine"])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")


def this_machine() -> str:
    from benchmarks.runner import machine_slug
    from harness.core.devices import cpu_kernel_flags, cpu_model

    return machine_slug(cpu_model(), list(cpu_kernel_flags()), os.cpu_count() or 1)


def _survivors(project: Path) -> list[psutil.Process]:
    """Processes still working in the project (DVC, a stage, the guard)."""
    found = []
    for process in psutil.process_iter(["cwd", "pid"]):
        with contextlib.suppress(psutil.Error):
            if process.info["cwd"] and Path(process.info["cwd"]).is_relative_to(project) and \
                    process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def _ctrl_c_as_in_a_terminal() -> None:
    """SIGINT at its default, as in a terminal's foreground job. A suite started in the background of a
    non-interactive shell (`pytest … &`) inherits SIGINT ignored, Python then keeps it ignored, and so would the
    CLI: its Ctrl-C was "lost" in such full suites (issue 47), never in one started from a terminal or by CI."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _mid_stage(project: Path, *args: str) -> subprocess.Popen:
    """The CLI (leading a process group of its own, as a shell's job) started and read up to the moment DVC
    starts the classification probe stage."""
    process = subprocess.Popen(_cli_command(*args), cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=_env(), start_new_session=True, preexec_fn=_ctrl_c_as_in_a_terminal)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("Running stage") and CLASSIFICATION in line:
            # the moment the stage's process exists (it is still importing torch): a fixed sleep raced the tiny
            # stage, which could finish before the signal on an idle machine
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with contextlib.suppress(psutil.Error):
                    if any("harness.stages.probe" in " ".join(child.cmdline())
                           for child in psutil.Process(process.pid).children(recursive=True)):
                        return process
                time.sleep(0.01)
            raise AssertionError("DVC said it runs the probe stage, but no stage process appeared in 30 s")
    raise AssertionError(f"the probe stage never started (exit {process.wait()})")


# -- rows ------------------------------------------------------------------------------------------------------------


def test_kill_9_of_the_cli_group_mid_stage(project):
    before = records(project)
    process = _mid_stage(project, "task=classification", "force=true")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 10
    while _survivors(project) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _survivors(project), "DVC or its stage outlived the CLI"
    assert records(project) == before
    outcome("kill -9 of the CLI's process group mid-stage", "heals")
    heal("kill -9 of the CLI's process group mid-stage", project, "task=classification", "force=true", before=before)


def test_ctrl_c_mid_stage(project):
    before = records(project)
    process = _mid_stage(project, "task=classification", "force=true")
    os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the foreground job's group, once
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 130, out[-3000:]
    line = line_with(out, "interrupted", "the same command goes on from there")
    deadline = time.monotonic() + 10  # the CLI may end before DVC's group: its guard then stops it
    while _survivors(project) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _survivors(project)
    assert records(project) == before
    outcome("Ctrl-C (SIGINT) mid-stage", "heals", line)
    heal("Ctrl-C (SIGINT) mid-stage", project, "task=classification", "force=true", before=before)


def _mountable() -> str | None:
    """Why a filesystem fault cannot be made here (None: it can): mounts need root and a kernel that lets us."""
    if sys.platform != "linux" or os.geteuid() != 0 or not shutil.which("mount"):
        return "needs root on Linux to mount a tiny filesystem (the probe stage runs as DVC starts it, not in-process)"
    return None


@contextlib.contextmanager
def _mounted(folder: Path, *options: str) -> Iterator[None]:
    """`folder` replaced by a tmpfs holding a copy of its files (mount OPTIONS), restored on exit."""
    held = {path.name: path.read_bytes() for path in folder.iterdir()}
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)], capture_output=True)
    if done.returncode:
        pytest.skip(f"mount failed here: {done.stderr.decode().strip()}")
    try:
        for name, data in held.items():
            (folder / name).write_bytes(data)
        for option in options:
            subprocess.run(["mount", "-o", f"remount,{option}", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _full(folder: Path) -> None:
    with contextlib.suppress(OSError), (folder / "filler").open("wb") as filler:
        while True:
            filler.write(b"\0" * 4096)
            filler.flush()


@pytest.mark.parametrize("fault", ["ENOSPC", "read-only"])
def test_a_full_or_read_only_results_folder(project, fault):
    """The probe stage's write meets ENOSPC (a full tmpfs over its results folder) or EROFS (mounted read-only):
    a failed attempt and one line naming the file and the fix; the ok record as it was; freed, the same command
    heals it."""
    reason = _mountable()
    if reason:
        pytest.skip(reason)
    row = "disk full (ENOSPC) at the record's write" if fault == "ENOSPC" else "read-only results folder"
    before, kept = records(project), files(project, RECORD, SAMPLES)
    folder = project / RECORD.parent
    with _mounted(folder, *(["ro"] if fault == "read-only" else [])):
        if fault == "ENOSPC":
            _full(folder)
        failed = cli(project, "task=classification", "force=true")
        assert failed.returncode == 1, failed.stdout[-3000:] + failed.stderr[-2000:]
        fix = "free space and re-run" if fault == "ENOSPC" else "make the filesystem writable and re-run"
        line = line_with(failed.stdout + failed.stderr, str(RECORD.parent), fix)
        assert files(project, RECORD, SAMPLES) == kept
    assert files(project, RECORD, SAMPLES) == kept and records(project) == before
    outcome(row, "heals", line)
    heal(row, project, "task=classification", "force=true", before=before)


def test_enospc_at_the_write_call_in_process(project, monkeypatch, capsys):
    """ENOSPC where no filesystem can be mounted (any user): the probe stage run in this process, as DVC would
    start it, with os.replace failing with ENOSPC at its first rename into results/: exit 1, one line naming the
    file and the fix, the ok record byte for byte; then the same CLI command heals it."""
    import errno

    from harness.stages import probe

    row = "disk full (ENOSPC) at the rename, stage in-process"
    before, kept = records(project), files(project, RECORD, SAMPLES)
    real_replace = os.replace
    failed_once: list[str] = []

    def full_disk(source, target, *args, **kwargs):
        if not failed_once and "results" in Path(target).parts:
            failed_once.append(str(target))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))
        return real_replace(source, target, *args, **kwargs)

    monkeypatch.chdir(project)
    monkeypatch.setattr(os, "replace", full_disk)
    code = probe.main(["g", "classification", BACKBONE, "--code", "harness/probes/classification.py", "--dataset",
                       "tiny", "--features", "g"])
    monkeypatch.setattr(os, "replace", real_replace)
    err = capsys.readouterr().err
    assert code == 1 and failed_once, err
    line = line_with(err, str(RECORD.parent), "free space and re-run")
    assert err.strip().count("\n") == 0, err
    assert files(project, RECORD, SAMPLES) == kept and records(project) == before
    outcome(row, "heals", line)
    heal(row, project, "task=classification", "force=true", before=before)


def test_a_deleted_record_is_restored_by_any_run(project):
    """Deleted by hand: collect refuses a corpus without it, so every run (here: the other task's) restores it."""
    before = records(project)
    (project / RECORD).unlink()
    done = heal("deleted record", project, "task=retrieval", before=before)
    line = line_with(done.stdout, str(RECORD), "runs again to restore it")
    outcome("deleted record", "heals", line)


def test_a_truncated_record_is_restored_by_any_run(project):
    before = records(project)
    data = (project / RECORD).read_bytes()
    (project / RECORD).write_bytes(data[: len(data) // 2])
    done = heal("truncated record", project, "task=retrieval", before=before)
    outcome("truncated record", "heals", line_with(done.stdout, str(RECORD), "runs again to restore it"))


def test_an_edited_record_is_refused_in_one_line_naming_the_command_that_heals_it(project):
    """A same-size edit (a byte changed): collect stops in one line naming the file and the command, the site is
    not rebuilt from a corpus without it, and that command heals it."""
    row = "record edited in place (same size)"
    before, corpus = records(project), (project / "leaderboard" / "corpus.jsonl").read_bytes()
    site_lock = _lock_entry(project, "site")
    data = bytearray((project / RECORD).read_bytes())
    data[data.index(b'"backbone_name"') + 2] = ord("#")
    (project / RECORD).write_bytes(bytes(data))
    failed = cli(project, "task=retrieval")
    assert failed.returncode == 1, failed.stdout[-3000:]
    command = f"visbench-harness grid=g task=classification backbone={BACKBONE.replace('.', '@')}"
    line = line_with(failed.stdout + failed.stderr, f"collect: FAILED: {RECORD} cannot be read", command)
    assert "Traceback" not in failed.stdout + failed.stderr
    assert "Running stage 'site'" not in failed.stdout and _lock_entry(project, "site") == site_lock
    assert (project / "leaderboard" / "corpus.jsonl").read_bytes() == corpus
    outcome(row, "refused in one line", line)
    heal(row, project, "grid=g", "task=classification", f"backbone={BACKBONE.replace('.', '@')}", before=before)


def _lock_entry(project: Path, stage: str) -> dict:
    return yaml.safe_load((project / "dvc.lock").read_text())["stages"][stage]


def test_a_corrupted_samples_file_is_rewritten_by_a_plain_run(project):
    row = "samples file corrupted"
    before, kept = records(project), files(project, SAMPLES)
    data = bytearray((project / SAMPLES).read_bytes())
    data[-3] = ord("7") if data[-3] != ord("7") else ord("3")
    (project / SAMPLES).write_bytes(bytes(data))
    heal(row, project, "task=classification", before=before)
    assert files(project, SAMPLES) == kept
    outcome(row, "heals")


def test_a_corrupted_corpus_is_rewritten_by_a_plain_run(project):
    row = "corpus corrupted"
    corpus = project / "leaderboard" / "corpus.jsonl"
    kept = corpus.read_bytes()
    corpus.write_bytes(kept[:100])
    heal(row, project, "task=retrieval", before=records(project))
    assert corpus.read_bytes() == kept
    outcome(row, "heals")


def test_a_corrupted_lock_file_is_refused_in_one_line(project):
    row = "dvc.lock corrupted"
    lock = project / "pipelines" / "g" / BACKBONE / "dvc.lock"
    kept, before = lock.read_bytes(), records(project)
    lock.write_bytes(kept[: len(kept) // 3] + b"\n  - : [\n")
    failed = cli(project, "task=retrieval")
    assert failed.returncode == 2, failed.stdout[-3000:] + failed.stderr[-3000:]
    assert "Traceback" not in failed.stdout + failed.stderr
    line = line_with(failed.stderr, str(lock.relative_to(project)), "git checkout")
    assert records(project) == before
    outcome(row, "refused in one line", line)
    lock.unlink()  # the line's other fix: without its lock, every stage of that file runs again
    heal(row, project, "task=retrieval", before=before)


def test_an_upstream_failure_is_cleared_once_its_stage_is_ok_again(project):
    """The CLI wrote failures/<probe>.jsonl for a failed extraction (a full disk); re-extraction, once space was
    freed, gave the same features, so DVC skips the probe stage: the CLI clears the failure and reports ok."""
    row = "upstream (extract) failure after its cause is gone"
    before = records(project)
    code = ("from harness.pipeline.plan import Run; from harness.executors.report import record_upstream_failure; "
            "from harness.runs.failures import StageFailure; "
            f"run = Run('g', 'classification', {BACKBONE!r}, 'tiny', 'g'); "
            "record_upstream_failure(run, StageFailure(stage=run.extract_stage, phase='extract', error_type='OSError', "
            "message='[Errno 28] No space left on device'))")
    subprocess.run([sys.executable, "-c", code], cwd=project, check=True, env=_env())
    done = heal(row, project, "task=classification", before=before)
    line = line_with(done.stdout, "is ok again", "its failed attempt is cleared")
    outcome(row, "heals", line)


def test_two_concurrent_runs(project):
    """Two CLIs at once in one workspace: DVC runs one command per workspace, so the other is refused in one line
    (or runs after it); nothing is lost, and the refused one's re-run succeeds."""
    row = "two concurrent runs"
    before = records(project)
    started = [subprocess.Popen(_cli_command("task=classification", "force=true"), cwd=project,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
               for _ in range(2)]
    outputs = [process.communicate(timeout=300)[0] for process in started]
    codes = sorted(process.returncode for process in started)
    assert codes in ([0, 0], [0, 1]), outputs
    line = ""
    for process, out in zip(started, outputs, strict=True):
        if process.returncode:
            line = line_with(out, "another DVC command holds this workspace's lock", "run the same command again")
            assert "FAILED" not in out
    assert records(project) == before
    outcome(row, "refused in one line" if line else "heals", line)
    heal(row, project, "task=classification", "force=true", before=before)


def test_a_dvc_lock_entry_whose_pid_was_reused(project):
    """A DVC killed in a container left .dvc/tmp/rwlock naming its pid, which the next container gave another
    process: DVC takes it for a live holder; the CLI says so in one line and clears it, and the same command runs."""
    row = "DVC rwlock naming a reused pid (a container restarted)"
    before = records(project)
    rwlock = project / ".dvc" / "tmp" / "rwlock"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        rwlock.write_text(json.dumps({"write": {str(project / RECORD): {"pid": other.pid, "cmd": "dvc repro"}},
                                      "read": {}}))
        written = time.time() - 60  # a minute before `other` started
        os.utime(rwlock, (written, written))
        refused = cli(project, "task=classification", "force=true")
        assert refused.returncode == 1, refused.stdout[-3000:] + refused.stderr[-3000:]
        line = line_with(refused.stdout + refused.stderr, ".dvc/tmp/rwlock", f"named pid {other.pid}",
                         "run the same command again")
        assert records(project) == before
        outcome(row, "refused in one line", line)
        heal(row, project, "task=classification", "force=true", before=before)
    finally:
        other.kill()
        other.wait()


# -- the other agent's rows (issue 47: DVC cache bit rot, an interrupted extraction) -----------------------------------


def _feature_entries(project: Path) -> list[Path]:
    return sorted(p for p in (project / FEATURES).rglob("*") if p.is_file() and p.name != "CONTENTS.sha256")


def test_a_corrupted_feature_entry_is_re_extracted_by_a_plain_run(project):
    row = "feature cache entry corrupted"
    before = records(project)
    entry = _feature_entries(project)[0]
    kept = entry.read_bytes()
    entry.write_bytes(kept[: len(kept) // 2])
    heal(row, project, "task=classification", before=before)
    assert entry.read_bytes() == kept
    outcome(row, "heals")


def test_a_rotted_dvc_cache_object_is_not_checked_out(project):
    """A feature entry's object in .dvc/cache rots, then the workspace's copy goes: the plain re-run must not
    hand the rotted bytes to a probe (DVC checks out from its cache without hashing)."""
    row = "DVC cache object bit rot"
    before = records(project)
    entry = _feature_entries(project)[0]
    kept = entry.read_bytes()
    rotted = [p for p in (project / ".dvc" / "cache").rglob("*") if p.is_file() and p.read_bytes() == kept]
    assert rotted, "the entry has no object in DVC's cache"
    for path in rotted:
        path.chmod(0o644)
        path.write_bytes(kept[:-8] + b"\xff" * 8)
    shutil.rmtree(project / FEATURES)
    heal(row, project, "task=classification", "force=true", before=before)
    assert entry.read_bytes() == kept
    outcome(row, "heals")


def test_kill_9_mid_extraction(project):
    """The CLI's group killed while the extract stage writes the feature cache (its entry removed first, so it
    runs): the plain re-run extracts again and every record stays."""
    row = "kill -9 mid-extraction"
    before = records(project)
    shutil.rmtree(project / FEATURES)
    process = subprocess.Popen(_cli_command("task=classification"), cwd=project, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=_env(), start_new_session=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("Running stage") and "extract-g-tiny" in line:
            time.sleep(1.5)  # torch imported, the backbone running
            break
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not _survivors(project) or time.sleep(3) or not _survivors(project)
    assert records(project) == before
    heal(row, project, "task=classification", before=before)
    outcome(row, "heals")


def _kill_tree(project: Path, cli_process: subprocess.Popen) -> None:
    """SIGKILL the whole tree at once, as a machine's OOM killer or a container's stop does: the CLI's group, DVC's
    group and its guard, the stage; no process is left to clean up after another. Like a cgroup's kill, the tree is
    frozen first (SIGSTOP until no new process appears): killing a snapshot raced a child forked just after it
    (CI, stop 54: one survivor in the site stage)."""
    frozen: set[psutil.Process] = set()
    while True:
        current: set[psutil.Process] = set()
        for process in [psutil.Process(cli_process.pid), *_survivors(project), *frozen]:
            with contextlib.suppress(psutil.Error):
                current |= {process, *process.children(recursive=True)}
        new = current - frozen
        if not new:
            break
        for process in new:
            with contextlib.suppress(psutil.Error):
                process.suspend()
        frozen |= new
    for process in frozen:
        with contextlib.suppress(psutil.Error):
            process.kill()
    cli_process.wait()
    psutil.wait_procs(list(frozen), timeout=10)


@pytest.mark.parametrize("stage", ["collect", "site"])
def test_kill_9_of_the_whole_tree_in_a_root_stage(project, stage):
    """The whole tree killed while DVC runs collect (its corpus deleted, so it runs) or the site (a page of it
    deleted): the plain re-run writes the corpus and the site again, and every record stays."""
    row = f"kill -9 of the whole tree in the {stage} stage"
    before = records(project)
    (project / ("leaderboard/corpus.jsonl" if stage == "collect" else "docs/index.md")).unlink()
    process = subprocess.Popen(_cli_command("task=classification"), cwd=project, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=_env(), start_new_session=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("Running stage") and f"'{stage}'" in line:
            break
    else:
        raise AssertionError(f"the {stage} stage never started (exit {process.wait()})")
    _kill_tree(project, process)
    assert not _survivors(project)
    assert records(project) == before
    outcome(row, "heals")
    heal(row, project, "task=classification", before=before)
    assert (project / "leaderboard/corpus.jsonl").is_file() and (project / "docs/index.md").is_file()
