# Placeholder until the container issue lands: that issue replaces this file with a CUDA base image
# pinned by digest, the hashed lock installed with --require-hashes, a non-root user and the CLI as
# entrypoint. Until then this CPU-only sketch documents the intended shape; it is not a supported build.
FROM python:3.11-slim-bookworm
WORKDIR /work
COPY . .
RUN apt-get update && apt-get install -y --no-install-recommends dataset-fashion-mnist git \
    && rm -rf /var/lib/apt/lists/* \
    && pip install --no-cache-dir --require-hashes -r requirements.lock \
    && pip install --no-cache-dir --no-deps -e .
ENTRYPOINT ["visbench-harness"]
