"""Zero-shot retrieval by cosine similarity of pooled features (protocol `cosine-retrieval/v1`).

Every query image ranks the whole gallery; an item is relevant when it shares the query's label.
mAP is the mean over queries of average precision over the full ranking; recall@k is the fraction of
queries with at least one relevant item in the top k. No training, so nothing here depends on a seed.
"""

from __future__ import annotations

import numpy as np

from harness.probes.base import ProbeInputs, ProbeSpec, register_probe


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def retrieval_metrics(
    queries: np.ndarray, q_labels: np.ndarray, gallery: np.ndarray, g_labels: np.ndarray, ks: list[int]
) -> dict[str, float]:
    similarity = _normalise(queries.astype(np.float64)) @ _normalise(gallery.astype(np.float64)).T
    order = np.argsort(-similarity, axis=1, kind="stable")
    relevant = g_labels[order] == q_labels[:, None]  # (Q, G) in ranked order
    hits = np.cumsum(relevant, axis=1)
    ranks = np.arange(1, relevant.shape[1] + 1)
    n_relevant = relevant.sum(axis=1)
    ap = (relevant * hits / ranks).sum(axis=1) / np.maximum(n_relevant, 1)
    if not (n_relevant > 0).any():
        raise ValueError("no query has a relevant gallery item (no shared labels between splits)")
    metrics = {"map": float(ap[n_relevant > 0].mean())}
    for k in ks:
        metrics[f"recall@{k}"] = float(relevant[:, :k].any(axis=1).mean())
    return metrics


def run_retrieval(inputs: ProbeInputs) -> dict[str, float]:
    p = inputs.params
    queries = inputs.manifest.split(p["query_split"])
    gallery = inputs.manifest.split(p["gallery_split"])
    return retrieval_metrics(
        inputs.stack(queries), np.array([i.label for i in queries]),
        inputs.stack(gallery), np.array([i.label for i in gallery]), list(p["recall_at"]),
    )


RETRIEVAL = register_probe(ProbeSpec(
    name="retrieval",
    level="high",
    protocol="cosine-retrieval/v1",
    feature_mode="pooled",
    headline="map",
    run=run_retrieval,
))
