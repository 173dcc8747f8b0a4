"""Zero-shot retrieval by cosine similarity of pooled features (protocol `cosine-retrieval/v1`).

Every query image ranks the whole gallery; an item is relevant when it shares the query's label.
mAP is the mean over queries of average precision over the full ranking; recall@k is the fraction of
queries with at least one relevant item in the top k. No training, so nothing here depends on a seed.

Every query must have at least one relevant gallery item (otherwise its AP is undefined and mAP would
average over a different set of queries than recall@k): such a query fails the run.

Per-sample scores (unit "query", id = the query item's path): `map` (that query's AP) and `recall@k`
(1.0 where a relevant item is in the top k); each metric is exactly its column's mean.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, PositiveInt

from harness.probes.arrays import LABELLED_ARRAYS
from harness.probes.base import PooledParams, ProbeInputs, ProbeResult, ProbeSpec, column_means, register_probe


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def retrieval_scores(
    queries: np.ndarray, q_labels: np.ndarray, gallery: np.ndarray, g_labels: np.ndarray, ks: list[int]
) -> dict[str, np.ndarray]:
    """Per-query (Q,) float64 columns: `map` (average precision) and `recall@k` (0/1)."""
    similarity = _normalise(queries.astype(np.float64)) @ _normalise(gallery.astype(np.float64)).T
    order = np.argsort(-similarity, axis=1, kind="stable")
    relevant = g_labels[order] == q_labels[:, None]  # (Q, G) in ranked order
    n_relevant = relevant.sum(axis=1)
    if not (n_relevant > 0).all():
        missing = sorted({str(label) for label in q_labels[n_relevant == 0]})
        raise ValueError(f"{int((n_relevant == 0).sum())} of {len(q_labels)} queries have no relevant gallery "
                         f"item (labels absent from the gallery: {', '.join(missing)})")
    hits = np.cumsum(relevant, axis=1)
    ranks = np.arange(1, relevant.shape[1] + 1)
    columns = {"map": (relevant * hits / ranks).sum(axis=1) / n_relevant}
    for k in ks:
        columns[f"recall@{k}"] = relevant[:, :k].any(axis=1).astype(np.float64)
    return columns


def retrieval_metrics(
    queries: np.ndarray, q_labels: np.ndarray, gallery: np.ndarray, g_labels: np.ndarray, ks: list[int]
) -> dict[str, float]:
    columns = retrieval_scores(queries, q_labels, gallery, g_labels, ks)
    return column_means(columns)


class RetrievalParams(PooledParams):
    query_split: str = Field(min_length=1)
    gallery_split: str = Field(min_length=1)
    recall_at: list[PositiveInt] = Field(min_length=1)


def run_retrieval(inputs: ProbeInputs) -> ProbeResult:
    p = inputs.params
    queries = inputs.manifest.split(p["query_split"])
    gallery = inputs.manifest.split(p["gallery_split"])
    columns = retrieval_scores(
        inputs.stack(queries), np.array([i.label for i in queries]),
        inputs.stack(gallery), np.array([i.label for i in gallery]), list(p["recall_at"]),
    )
    metrics = column_means(columns)
    return ProbeResult(metrics, [item.path for item in queries], columns, unit="query")


RETRIEVAL = register_probe(ProbeSpec(
    name="retrieval",
    level="high",
    protocol="cosine-retrieval/v1",
    feature_mode="pooled",
    headline="map",
    run=run_retrieval,
    params=RetrievalParams,
    arrays=LABELLED_ARRAYS,
    eval_split_param="query_split",
    train_split_param=None,  # the gallery is searched, not trained on
    folder_layout="class_folders",
))
