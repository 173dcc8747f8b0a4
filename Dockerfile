# syntax=docker/dockerfile:1
# visbench-harness on a GPU: the hashed lock on CPython 3.11 over a CUDA 13.0 userspace, the CLI as entrypoint.
#
#   docker build -t visbench-harness --build-arg GIT_COMMIT=$(git rev-parse HEAD) .
#   docker run --rm --gpus all visbench-harness task=classification      # arguments go straight to the CLI
#
# The project's machines have no Docker engine, so this file has not been built there. tests/test_container.py
# lints it with hadolint and checks its pins and install commands, and CI runs the commands it runs
# (docker/README.md). docker/Dockerfile.cpu is the same image without CUDA.
#
# Base images, pinned by multi-arch index digest (docker picks the platform's manifest from it). Neither digest
# was read from a registry here (no registry is reachable from the project's machines): each was taken from
# public Dockerfiles and build notes found with code search, several independent projects giving the same
# digest for the tag. Re-check or bump with `docker buildx imagetools inspect <image>:<tag>`.
# - nvidia/cuda:13.0.1-runtime-ubuntu24.04: CUDA 13.0, the CUDA torch 2.14.1 is built against. torch loads the
#   CUDA libraries of the lock's nvidia-* wheels; the base brings the driver check (NVIDIA_REQUIRE_CUDA=cuda>=13.0)
#   and the NVIDIA container settings. Seen in 7+ files across projects, amd64 and arm64 builds alike. The lock's
#   cuda-toolkit is 13.0.3, but a 13.0.3 runtime digest turned up in one project only, so 13.0.1 is used.
# - python:3.11-slim-bookworm (CPython 3.11.16): the interpreter, see the `python` stage; used in 9+ files.

# Stage `python`: the official CPython 3.11 build, and the Debian data package the embedded default reads.
FROM python:3.11-slim-bookworm@sha256:528257d48c1da0dcecc2e725d1ae34498d60c965f1241e39cd6a85a8859bdf84 AS python
# Debian's dataset-fashion-mnist, the version the project's Debian machines install, so the files under the DVC dep
# /usr/share/datasets/fashion-mnist are the bytes dvc.lock hashed. It is copied into the Ubuntu stage below
# rather than installed there from Ubuntu's universe, which would be another build of the package.
RUN apt-get update \
    && apt-get install -y --no-install-recommends dataset-fashion-mnist=0.0~git20200523.55506a9-1 \
    && rm -rf /var/lib/apt/lists/*

FROM nvidia/cuda:13.0.1-runtime-ubuntu24.04@sha256:c3fde347d52d578c84fd644bc177bc7ec333feaf11550d990da4084d7612e4c7
ARG DEBIAN_FRONTEND=noninteractive
# Python 3.11, as the lock requires: Ubuntu 24.04 ships only 3.12 and no PPA is reachable, so the official CPython
# build is copied from the `python` stage (the same interpreter build docker/Dockerfile.cpu runs), and the shared
# libraries its modules link against are installed under their Ubuntu 24.04 names; the RUN after the COPY imports
# the modules that need them, so a missing one fails the build. git: the fingerprint reads the commit of a
# bind-mounted checkout, and `dvc repro` needs it there. g++: the lock's pyEdgeEval (the BSDS scorer's test
# reference) ships only as a Cython sdist.
# Apt versions are left to the base: its digest fixes the Ubuntu release, the archive keeps only the current
# version of a package (a pin breaks every rebuild after an update), and what decides a number is the hashed lock.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        ca-certificates g++ git libbz2-1.0 libexpat1 libffi8 liblzma5 libncursesw6 libreadline8t64 \
        libsqlite3-0 libssl3t64 libuuid1 tzdata zlib1g \
    && rm -rf /var/lib/apt/lists/*
COPY --from=python /usr/local/bin/ /usr/local/bin/
COPY --from=python /usr/local/include/ /usr/local/include/
COPY --from=python /usr/local/lib/ /usr/local/lib/
COPY --from=python /usr/share/datasets/fashion-mnist/ /usr/share/datasets/fashion-mnist/
COPY --from=python /usr/share/doc/dataset-fashion-mnist/copyright /usr/share/doc/dataset-fashion-mnist/copyright

# Runtime settings. Caches live under /workspace/.cache (writable by any uid, mount a volume to keep them) because
# `--user $(id -u):$(id -g)` runs without a home directory. HF_HUB_OFFLINE=1 makes pinned hub downloads fail at
# once with a record naming the file (README, "Using it"); pass it with --build-arg or -e.
# USER: under --user UID:GID the uid has no passwd entry, and getpass.getuser() (DVC names its site cache
# with it) then fails on Python 3.11 unless $USER is set.
ARG HF_HUB_OFFLINE=0
ENV LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    USER=visbench \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=${HF_HUB_OFFLINE} \
    HF_HUB_DISABLE_TELEMETRY=1 \
    DVC_NO_ANALYTICS=1 \
    XDG_CACHE_HOME=/workspace/.cache \
    HF_HOME=/workspace/.cache/huggingface \
    TORCH_HOME=/workspace/.cache/torch

# uid 10001: Ubuntu 24.04 images already hold uid 1000 (`ubuntu`). pip is pinned to the release scripts/setup's
# upgrade resolved to when the lock was generated, so a rebuild installs with the same installer.
RUN ldconfig \
    && python3.11 -c "import bz2, ctypes, lzma, pyexpat, readline, sqlite3, ssl, uuid, zlib" \
    && groupadd --system --gid 10001 visbench \
    && useradd --system --no-log-init --uid 10001 --gid visbench --create-home --home-dir /home/visbench visbench \
    && python3.11 -m venv /opt/venv \
    && python -m pip install --no-cache-dir --quiet pip==26.3

# The project lives at /workspace/visbench-harness so that ../shared (the cifar10 grid's data) is /workspace/shared.
WORKDIR /workspace/visbench-harness
# The same install as scripts/setup: the hashed lock, then the project itself, editable and without dependencies.
# Dependencies first, in their own layer, so a code change does not reinstall torch.
COPY requirements.lock ./
RUN python -m pip install --no-cache-dir --require-hashes -r requirements.lock
COPY --chown=visbench:visbench . .
COPY --chown=visbench:visbench docker/dvc-no-scm.config .dvc/config.local
# Editable, as in scripts/setup: a checkout bind-mounted over this directory (`dvc repro` in the container) is then
# the code both the CLI and the DVC stages (`python -m harness.stages`, run from here) import.
# The tree is writable by every uid: compose runs as the host user (`user: UID:GID`) so that what lands in the
# bind-mounted outputs is the user's own, while the DVC state the run writes here (.dvc/tmp, data/) stays inside.
# safe.directory: git refuses a bind-mounted checkout owned by another uid, and the fingerprint needs its commit.
RUN python -m pip install --no-cache-dir --no-deps --no-build-isolation -e . \
    && git config --system --add safe.directory /workspace/visbench-harness \
    && mkdir -p /workspace/shared /workspace/.cache data features results leaderboard docs .dvc/cache .dvc/tmp \
    && chmod 1777 /workspace/.cache \
    && chmod -R a+rwX /workspace/visbench-harness

# Numeric, so a runtime that checks runAsNonRoot (Kubernetes) can tell it is not root.
USER 10001:10001
# Smoke test at build time: the CLI imports torch and every registry and reads params.yaml.
RUN visbench-harness list > /dev/null

# What the records say about the image (harness/environment.py): the commit it was built from, and its digest,
# which exists only after the build: pass it at run time, -e VISBENCH_IMAGE_DIGEST=$(docker image inspect
# --format '{{.Id}}' visbench-harness), or as IMAGE_DIGEST when rebuilding from a known image.
ARG GIT_COMMIT=""
ARG IMAGE_DIGEST=""
ARG SOURCE_URL=""
LABEL org.opencontainers.image.title="visbench-harness" \
      org.opencontainers.image.description="Reproducible probes of frozen vision backbones (CUDA 13.0, Python 3.11)" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.base.name="docker.io/nvidia/cuda:13.0.1-runtime-ubuntu24.04" \
      org.opencontainers.image.base.digest="sha256:c3fde347d52d578c84fd644bc177bc7ec333feaf11550d990da4084d7612e4c7"
ENV VISBENCH_GIT_COMMIT=${GIT_COMMIT} \
    VISBENCH_IMAGE=visbench-harness \
    VISBENCH_IMAGE_DIGEST=${IMAGE_DIGEST}

# `docker run IMAGE task=edge` runs `visbench-harness task=edge`; with no arguments, the embedded default grid.
ENTRYPOINT ["visbench-harness"]
CMD ["grid=default"]
