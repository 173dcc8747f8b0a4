"""`executor=slurm` on a real one-node SLURM cluster (slurmctld + slurmd + munged, tests/slurm_cluster.py): a tiny
grid (8 + 8 images, the random-init `cifar_resnet20` control, classification + retrieval) run through SLURM
gives exactly the local executor's records and metrics, leaves `dvc repro` with nothing to do, and a job
killed with scancel is submitted again, alone, by re-running the command. Plus the executor's planning
and bookkeeping, which need no cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import slurm_cluster
import yaml
from PIL import Image

from harness.executors.checkout import outside_links
from harness.executors.jobs import Job, Partition, Resources, plan_jobs, sbatch_options
from harness.executors.restore import _differences
from harness.pipeline.plan import Run

REPO = Path(__file__).resolve().parents[1]
BACKBONE = "cifar_resnet20.random"
STAGES = [f"g-classification@{BACKBONE}", f"g-retrieval@{BACKBONE}"]
# identical commits in both projects: records carry the commit, and must match to the bit
GIT_ENV = {"GIT_AUTHOR_NAME": "visbench", "GIT_AUTHOR_EMAIL": "visbench@localhost", "GIT_COMMITTER_NAME": "visbench",
           "GIT_COMMITTER_EMAIL": "visbench@localhost", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}


@pytest.fixture(scope="module")
def cluster():
    reason = slurm_cluster.unavailable_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the SLURM tests: {reason}")
        pytest.skip(reason)
    running = slurm_cluster.start()
    yield running
    slurm_cluster.stop(running)


def _images(root: Path) -> None:
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for label, colour in enumerate([(200, 30, 30), (30, 30, 200)]):
            folder = root / split / f"class{label}"
            folder.mkdir(parents=True)
            for index in range(4):
                pixels = np.clip(np.array(colour) + rng.normal(0, 20, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{index}.png")


def _projects(base: Path) -> tuple[Path, Path]:
    """Two identical git + DVC projects (one commit, cloned: records carry the commit) holding this checkout's
    harness/, reading ../images: a path that leaves the project, as ../shared/… does in the real params.yaml,
    which worker checkouts must resolve as the project does."""
    project = base / "local"
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
    env = {**os.environ, **GIT_ENV}
    for command in (["git", "init", "-q", "-b", "main"], [sys.executable, "-m", "dvc", "init", "-q"],
                    ["git", "add", "-A"], ["git", "commit", "-q", "-m", "tiny grid"]):
        subprocess.run(command, cwd=project, env=env, check=True, capture_output=True)
    subprocess.run(["git", "clone", "-q", str(project), str(base / "cluster")], check=True, capture_output=True)
    return project, base / "cluster"


def _cli(project: Path, env: dict, *args: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "harness.cli.main", "grid=g", "build_site=false", *args],
                               cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    process.started = time.monotonic()  # type: ignore[attr-defined]
    return process


def _finish(process: subprocess.Popen, timeout: float = 400) -> tuple[int, str, float]:
    out, _ = process.communicate(timeout=timeout)
    return process.returncode, out, time.monotonic() - process.started  # type: ignore[attr-defined]


def _record(path: Path) -> dict:
    record = json.loads(path.read_text())
    # wall time of the probe and the extraction's timed speed: the fields that are not functions of the inputs
    record.pop("duration_s")
    record.pop("throughput")
    return record


def _lock(project: Path) -> dict:
    from harness.core.dvcfiles import read_locks

    return read_locks(project)


@pytest.mark.slurm
def test_a_grid_through_slurm_equals_the_local_run_and_a_cancelled_job_is_resubmitted(cluster, tmp_path):
    _images(tmp_path / "images")
    local, remote_run = _projects(tmp_path)
    dvc = [sys.executable, "-m", "dvc"]
    subprocess.run([*dvc, "remote", "add", "-q", "-d", "--local", "shared", str(tmp_path / "remote")],
                   cwd=remote_run, check=True)
    env = {**cluster.env, "HF_HUB_OFFLINE": "1", "VISBENCH_SLURM_POLL_S": "1",
           "VISBENCH_SLURM_SCRATCH": str(tmp_path / "scratch")}

    # the reference: a local run, alongside the cluster's (each runs one stage process at a time, on one core)
    local_run = _cli(local, env)

    # 1. the backbone's job is cancelled while it runs: its runs are missing, nothing of them is half there
    first = _cli(remote_run, env, "executor=slurm")
    job_id = _wait_until_running(cluster, f"visbench-{BACKBONE}", first)
    assert cluster.run("scancel", job_id).returncode == 0
    code, out, cancelled_s = _finish(first)
    assert code == 1, out
    assert "CANCELLED" in out and "missing until re-run" in out and all(stage in out for stage in STAGES), out
    assert not (remote_run / "results").exists() or not any((remote_run / "results").rglob("*.json")), out
    assert "prepare-tiny" in _lock(remote_run)  # the prepare job finished: restored from its run-cache entry
    assert _left_in(tmp_path / "scratch") == [], out  # the restored job's folder and the cancelled one's are gone

    # 2. the same command submits that one job again (prepare is up to date now), and everything arrives
    code, out, recovery_s = _finish(_cli(remote_run, env, "executor=slurm"))
    assert code == 0, out
    submitted = [line for line in out.splitlines() if line.startswith("slurm: submitted")]
    assert len(submitted) == 1 and f"visbench-{BACKBONE} " in submitted[0], out
    # the extract stage came back as files with the probes' (its features folder is persist: no run-cache entry)
    assert "$ dvc commit --force <3 stages returned as files>" in out, out
    assert _left_in(tmp_path / "scratch") == [], out
    code, out, local_s = _finish(local_run)
    assert code == 0, out

    for stage in STAGES:
        task = stage.split("-")[1].split("@")[0]
        base = Path("results/g") / task
        assert _record(local / base / f"{BACKBONE}.json") == _record(remote_run / base / f"{BACKBONE}.json")
        for suffix in (".metrics.json", ".samples.csv"):
            assert (local / base / f"{BACKBONE}{suffix}").read_bytes() == \
                (remote_run / base / f"{BACKBONE}{suffix}").read_bytes()
    corpus = [(p / "leaderboard/corpus.jsonl").read_text().splitlines() for p in (local, remote_run)]
    assert [_strip(line) for line in corpus[0]] == [_strip(line) for line in corpus[1]] != []
    ours, theirs = _lock(local), _lock(remote_run)
    for stage in ("prepare-tiny", f"extract-g-tiny@{BACKBONE}"):  # same features, same hashes
        assert ours[stage] == theirs[stage], stage
    assert not list((remote_run / "failures").glob("*.jsonl"))

    # 3. DVC agrees that nothing is left to do: every stage, collect and site included, is up to date
    again = subprocess.run([*dvc, "repro"], cwd=remote_run, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "Running stage" not in again.stdout, again.stdout + again.stderr
    print(f"\nwall time: local {local_s:.0f}s; slurm with scancel {cancelled_s:.0f}s, re-run {recovery_s:.0f}s")


@pytest.mark.slurm
def test_a_deleted_record_and_deleted_features_are_brought_back_through_slurm(cluster, tmp_path):
    """A probe record deleted after a SLURM run (its outputs are `cache: false`, never in the remote) is
    recomputed by the job; deleted features come back from the remote. Each re-run ends 0 with the same
    metrics, DVC has nothing left to do, and no job folder is left in the scratch folder."""
    _images(tmp_path / "images")
    _, project = _projects(tmp_path)
    dvc = [sys.executable, "-m", "dvc"]
    subprocess.run([*dvc, "remote", "add", "-q", "-d", "--local", "shared", str(tmp_path / "remote")],
                   cwd=project, check=True)
    scratch = tmp_path / "scratch"
    env = {**cluster.env, "HF_HUB_OFFLINE": "1", "VISBENCH_SLURM_POLL_S": "1", "VISBENCH_SLURM_SCRATCH": str(scratch)}
    base = project / "results/g/classification"
    record, metrics = base / f"{BACKBONE}.json", base / f"{BACKBONE}.metrics.json"
    features = project / f"features/g/{BACKBONE}/tiny"
    lock_entry = f"extract-g-tiny@{BACKBONE}"

    def through_slurm(what: str) -> str:
        code, out, seconds = _finish(_cli(project, env, "executor=slurm"))
        logs = "".join(f"\n--- {log}\n{log.read_text()[-4000:]}" for log in sorted(scratch.rglob("job-*.log")))
        assert code == 0, out + logs
        status = subprocess.run([*dvc, "status", "--json"], cwd=project, env=env, capture_output=True, text=True)
        assert status.returncode == 0 and json.loads(status.stdout) == {}, status.stdout + status.stderr
        assert _left_in(scratch) == [], out
        print(f"\n{what}: {seconds:.0f}s")
        return out

    through_slurm("the grid through SLURM")
    before = _record(record), metrics.read_bytes(), _lock(project)[lock_entry]

    record.unlink()  # 1. a probe's record: recomputed in the job (nothing of it is in the remote)
    out = through_slurm("a deleted record")
    submitted = [line for line in out.splitlines() if line.startswith("slurm: submitted")]
    assert len(submitted) == 1 and f"visbench-{BACKBONE} " in submitted[0], out
    assert (_record(record), metrics.read_bytes()) == before[:2]

    shutil.rmtree(features)  # 2. an extract stage's features: the job pulls them from the remote
    through_slurm("deleted features")
    assert _lock(project)[lock_entry] == before[2] and features.is_dir()
    assert (_record(record), metrics.read_bytes()) == before[:2]


def _left_in(scratch: Path) -> list[str]:
    return sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*")) if scratch.exists() else []


def _strip(line: str) -> dict:
    record = json.loads(line)
    record.pop("duration_s")
    record.pop("throughput")
    return record


def _wait_until_running(cluster, name: str, process: subprocess.Popen, timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0]
        rows = cluster.run("squeue", "-h", "-n", name, "-t", "RUNNING", "-o", "%i").stdout.split()
        if rows:
            return rows[0]
        time.sleep(0.5)
    raise AssertionError(f"{name} never started\n{cluster.log_tail()}")


# -- planning and bookkeeping, no cluster needed ------------------------------------------------------------------


def _runs(*backbones: str) -> list[Run]:
    return [Run("g", task, b, "tiny", "g") for b in backbones for task in ("classification", "retrieval")]


def test_plan_groups_stages_per_backbone_and_waits_for_a_stale_prepare():
    runs = _runs("cifar_resnet20.random", "resnet18.random")
    jobs = plan_jobs(runs, {"prepare-tiny"})
    assert [job.key for job in jobs] == ["prepare-tiny", "cifar_resnet20.random", "resnet18.random"]
    assert jobs[1].stages == ["extract-g-tiny@cifar_resnet20.random", "g-classification@cifar_resnet20.random",
                              "g-retrieval@cifar_resnet20.random"]
    assert jobs[1].after == ["prepare-tiny"] and jobs[1].upstream_stages == [] \
        and jobs[1].returned_stages[0] == "extract-g-tiny@cifar_resnet20.random"
    assert jobs[2].resources.cpus > jobs[1].resources.cpus  # a timm ResNet-18 asks for more than a CIFAR ResNet
    only = plan_jobs(runs, {"g-retrieval@resnet18.random"})  # nothing else stale: one job, no prepare job
    assert [(job.key, job.after, job.stale) for job in only] == [
        ("resnet18.random", [], ["g-retrieval@resnet18.random"])]
    assert plan_jobs(runs, set()) == []


def test_requests_are_capped_to_the_partition_and_ask_for_a_gpu_only_where_there_is_one():
    job = Job("b", ["s1", "s2"], [], Resources(cpus=8, mem_gb=64, minutes_per_stage=30, gpu=True))
    small = sbatch_options(job, Partition(None, cpus=2, mem_mb=4000, gpus=False))
    assert "--cpus-per-task=2" in small and "--mem=4000M" in small and "--time=1:10:00" in small
    assert not any(o.startswith("--gres") for o in small) and not any(o.startswith("--partition") for o in small)
    gpu = sbatch_options(job, Partition("gpu", cpus=64, mem_mb=512_000, gpus=True))
    assert {"--cpus-per-task=8", "--mem=65536M", "--gres=gpu:1", "--partition=gpu"} <= set(gpu)
    no_memory = sbatch_options(job, Partition(None, cpus=2, mem_mb=1, gpus=False))  # no RealMemory configured
    assert not any(o.startswith("--mem") for o in no_memory)


def test_paths_leaving_the_project_resolve_from_a_checkout_as_from_the_project(tmp_path):
    root, checkout = tmp_path / "lab/project", tmp_path / "scratch/job/checkout"
    params = {"datasets": {"a": {"root": "../shared/data/a"}, "b": {"root": "/abs/b", "photos": ["skimage:x"]}},
              "checkpoints": {"w": "../../weights/w.th", "v": "../shared/weights/v.th"}}
    links = outside_links(params, root, checkout)
    assert links == [[str(tmp_path / "scratch/job/shared"), str(tmp_path / "lab/shared")],
                     [str(tmp_path / "scratch/weights"), str(tmp_path / "weights")]]


def test_a_lock_entry_differs_by_the_paths_whose_hashes_differ():
    entry = {"cmd": "python -m x", "deps": [{"path": "a", "md5": "1"}, {"path": "b", "md5": "2"}],
             "params": {"params.yaml": {"k": 1}}, "outs": [{"path": "o", "md5": "3"}]}
    assert _differences(entry, json.loads(json.dumps(entry))) == []
    changed = {**entry, "deps": [{"path": "a", "md5": "1"}, {"path": "b", "md5": "9"}],
               "params": {"params.yaml": {"k": 2}}}
    assert _differences(entry, changed) == ["params", "b"]


def test_the_coordinator_restores_only_from_the_run_cache_and_commits_only_matching_inputs(tmp_path, monkeypatch):
    """restore.py on a two-stage DVC project (no SLURM): a stage made in a clone comes back through the remote's
    run-cache, never by running here; returned probe outputs are committed only if this workspace's inputs
    hash as the job's did, and otherwise everything they replaced is put back."""
    from harness.executors.restore import commit_returned_stages, read_lock, restore_cached_stages

    coordinator, job = tmp_path / "coordinator", tmp_path / "job"
    coordinator.mkdir()
    write = "import pathlib as p; "
    stages = {"stages": {
        "make": {"cmd": f"python -c \"{write}p.Path('out').write_text(p.Path('in.txt').read_text() * 2)\"",
                 "deps": ["in.txt"], "outs": ["out"]},
        "probe": {"cmd": f"python -c \"{write}p.Path('rec.json').write_text(p.Path('out').read_text().upper())\"",
                  "deps": ["out", "extra.txt"], "outs": [{"rec.json": {"cache": False, "persist": True}}]}}}
    (coordinator / "dvc.yaml").write_text(yaml.safe_dump(stages))
    (coordinator / "in.txt").write_text("in")
    (coordinator / "extra.txt").write_text("extra")
    env = {**os.environ, **GIT_ENV, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    dvc = [sys.executable, "-m", "dvc"]
    for command in (["git", "init", "-q"], [*dvc, "init", "-q"],
                    [*dvc, "remote", "add", "-q", "-d", "shared", str(tmp_path / "remote")],
                    ["git", "add", "-A"], ["git", "commit", "-q", "-m", "two stages"]):
        subprocess.run(command, cwd=coordinator, env=env, check=True, capture_output=True)
    subprocess.run(["git", "clone", "-q", str(coordinator), str(job)], check=True, capture_output=True)
    for command in ([*dvc, "repro", "-q"], [*dvc, "push", "-q", "--run-cache", "make"]):
        subprocess.run(command, cwd=job, env=env, check=True, capture_output=True)
    job_lock = read_lock(job / "dvc.lock")
    monkeypatch.chdir(coordinator)
    monkeypatch.setenv("PATH", env["PATH"])  # `python` would run the stage here: only the refusal may stop it

    (coordinator / "in.txt").write_text("edited while the job ran")
    assert restore_cached_stages(["make"]) == set()  # no entry for these inputs: refused, not computed
    assert not (coordinator / "out").exists()
    (coordinator / "in.txt").write_text("in")
    assert restore_cached_stages(["make"]) == {"make"}
    assert (coordinator / "out").read_text() == "inin" and read_lock()["make"] == job_lock["make"]

    (coordinator / "rec.json").write_text("an earlier ok record")
    (coordinator / "extra.txt").write_text("edited while the job ran")
    verdict = commit_returned_stages({"probe": (job, job_lock["probe"])})
    assert verdict == {"probe": ["extra.txt"]}
    assert (coordinator / "rec.json").read_text() == "an earlier ok record" and "probe" not in read_lock()
    (coordinator / "extra.txt").write_text("extra")
    assert commit_returned_stages({"probe": (job, job_lock["probe"])}) == {"probe": []}
    assert (coordinator / "rec.json").read_text() == "ININ" and read_lock()["probe"] == job_lock["probe"]
    status = subprocess.run([*dvc, "status", "--json"], cwd=coordinator, env=env, capture_output=True, text=True)
    assert json.loads(status.stdout) == {}


def test_progress_counts_jobs_and_estimates_from_seconds_per_stage():
    from harness.executors.sbatch import JobState
    from harness.executors.slurm import Submitted, _progress, _seconds

    assert [_seconds(t) for t in ("0:05", "1:02:03", "2-00:00:01")] == [5, 3723, 172801]
    res = Resources(1, 1, 1, False)
    done = Submitted(Job("prepare-x", ["p"], [], res), Path("."), "1", JobState("1", "COMPLETED", elapsed="0:20"),
                     result="1/1 stages ok", ok=True)
    running = Submitted(Job("a", ["e", "c", "r"], [], res), Path("."), "2", JobState("2", "RUNNING", elapsed="0:15"))
    queued = Submitted(Job("b", ["e", "c", "r"], [], res), Path("."), "3",
                       JobState("3", "PENDING", reason="ReqNodeNotAvail, UnavailableNodes:n1"))
    line = _progress([done, running, queued], time.monotonic())
    # 20 s per stage: 3 × 20 − 15 for the running job, 3 × 20 for the queued one, one job running at a time
    assert line.startswith("slurm: 1 queued · 1 running · 1 done · 0 failed · ETA ~105s · pending because: "
                           "ReqNodeNotAvail, UnavailableNodes:n1 ("), line


def test_without_the_slurm_commands_the_executor_says_what_is_missing(monkeypatch):
    from harness.core.config import ConfigError
    from harness.executors import sbatch

    monkeypatch.setattr(sbatch.shutil, "which", lambda name: None if name == "sbatch" else f"/usr/bin/{name}")
    with pytest.raises(ConfigError, match=r"sbatch not found"):
        sbatch.require_slurm()


def test_a_machine_without_a_reachable_controller_is_a_one_line_error(monkeypatch):
    from harness.core.config import ConfigError
    from harness.executors import sbatch

    said = ("sinfo: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
            "sinfo: error: _establish_config_source: failed to fetch config\n"
            "sinfo: fatal: Could not establish a configuration source\n")  # what sinfo says with no slurm.conf
    monkeypatch.setattr(sbatch, "_run", lambda args: subprocess.CompletedProcess(args, 1, "", said))
    with pytest.raises(ConfigError) as error:
        sbatch.partition(None)
    assert "\n" not in str(error.value)
    assert "(sinfo: fatal: Could not establish a configuration source): this machine reaches no SLURM" in \
        str(error.value)


def test_failure_files_become_what_the_job_left(tmp_path, monkeypatch):
    from harness.core.paths import failure_path
    from harness.executors.restore import mirror_failure_files

    monkeypatch.chdir(tmp_path)
    files = tmp_path / "returned/files"
    for stage, text in [("fixed", "old failure"), ("failed-again", "old failure"), ("never-reached", "old failure")]:
        failure_path(stage).parent.mkdir(parents=True, exist_ok=True)
        failure_path(stage).write_text(text)
    (files / failure_path("failed-again")).parent.mkdir(parents=True)
    (files / failure_path("failed-again")).write_text("new failure")
    (files / failure_path("new-failure")).write_text("first failure")
    mirror_failure_files({"fixed": "ok", "failed-again": "failed", "never-reached": "failed", "new-failure": "failed"},
                         files)
    assert not failure_path("fixed").exists()
    assert failure_path("failed-again").read_text() == "new failure"
    assert failure_path("never-reached").read_text() == "old failure"
    assert failure_path("new-failure").read_text() == "first failure"


def test_the_job_pulls_cached_stages_and_runs_probes_without_pull(monkeypatch):
    """`repro --pull` only pulls a stage whose inputs are unchanged, and a probe's outputs are never in the remote:
    the probes run in a second `dvc repro` without --pull, and only those whose upstream stages are up to date."""
    from harness.executors import worker

    calls = []
    monkeypatch.setattr(worker, "_dvc", lambda args, stages: calls.append([*args, *stages]) or 0)
    monkeypatch.setattr(worker, "stale_stages", lambda stages: {"extract-b"} & set(stages))
    needs = {"probe-a": ["prepare-d", "extract-a"], "probe-b": ["prepare-d", "extract-b"]}
    assert worker.reproduce(["extract-a", "extract-b", "probe-a", "probe-b"], ["probe-a", "probe-b"], needs) == 0
    assert calls == [["repro", "--pull", "--keep-going", "extract-a", "extract-b"],
                     ["repro", "--keep-going", "probe-a"]]
    calls.clear()
    assert worker.reproduce(["prepare-d"], [], {}) == 0 and calls == [["repro", "--pull", "--keep-going", "prepare-d"]]


def test_a_handled_jobs_folder_goes_unless_the_job_failed(tmp_path):
    from harness.executors.sbatch import JobState
    from harness.executors.slurm import Submitted, clean_up

    res = Resources(1, 1, 1, False)

    def job(name: str, state: str, ok: bool, result: bool) -> Submitted:
        job_dir = tmp_path / name
        files = ["checkout/.dvc/cache/x", "job.sh", "spec.json", "job-1.log"] + ["returned/outcome.json"] * result
        for path in files:
            (job_dir / path).parent.mkdir(parents=True, exist_ok=True)
            (job_dir / path).write_text("")
        submitted = Submitted(Job(name, ["s"], [], res), job_dir, "1", JobState("1", state), result="x", ok=ok)
        clean_up(submitted)
        return submitted

    assert not job("ok", "COMPLETED", True, True).job_dir.exists()
    assert not job("cancelled", "CANCELLED", False, False).job_dir.exists()  # nothing measured: nothing to keep
    for failed in (job("stage-failed", "FAILED", False, True), job("timeout", "TIMEOUT", False, False)):
        kept = sorted(str(p.relative_to(failed.job_dir)) for p in failed.job_dir.rglob("*"))
        result = ["returned", "returned/outcome.json"] if failed.job.key == "stage-failed" else []
        assert kept == sorted(["job-1.log", "job.sh", "spec.json", *result])  # no checkout: its cache is large
