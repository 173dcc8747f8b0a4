"""Relative depth: which of two points is farther from the camera (protocol `relative-depth-pairs/v1`).

Targets are exact: the scenes' metric depth map. Per image, `pairs_per_image` pairs of pixels with valid depth
are drawn (uniformly, seeded by the image's path and `pairs_seed`, which defaults to the run's seed, so every
backbone is scored on the same pairs; a seed sweep sets `pairs_seed: 0` so that its replicates re-train the head on
seed 0's pairs and are scored on them: the same evaluation, another head). A pair's truth is ordinal, with ties as
WHDR defines them (Bell, Bala & Snavely, "Intrinsic Images in the Wild", SIGGRAPH 2014, for reflectance; Chen et
al., "Single-Image Depth Perception in the Wild", NeurIPS 2016, for depth): with r = depth(a) / depth(b),
`farther` (+1) when r > 1 + δ, `closer` (−1) when r < 1 / (1 + δ), else `equal` (0); δ is `equal_ratio`.

Features: the frozen dense map (`fit: squash`, the layers asked for), read at each point by bilinear
interpolation (the point's pixel centre mapped onto the map's cell centres, edges clamped), standardised with the
training points' statistics. The head is a linear depth *scorer* s(f) = w·f: a pair's score is s(f_a) − s(f_b),
trained as two-class logistic regression on the difference f_a − f_b of the training split's unequal pairs, each
also presented swapped (−(f_a − f_b), the other label), so the scorer is antisymmetric by construction (the shared
NumPy AdamW head, `harness.probes.linear_head`). A pair is predicted `equal` when |s(f_a) − s(f_b)| is below a
tie threshold, chosen on the training pairs as the value that minimises their disagreement rate (the smallest
such value); otherwise by the score's sign.

Metrics, each the mean of a per-image column (unit "image"; every image has the same number of pairs, so the
mean over images is the pooled rate): `whdr` (headline, lower is better), the share of the image's pairs whose
predicted relation differs from the truth, ties included; `ordinal_error`, the share of its pairs that are
unequal in truth and whose score orders them the wrong way (the tie band ignored). Also `train_whdr` (no column)
on the training pairs.
"""

from __future__ import annotations

import hashlib

import numpy as np
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from harness.datasets.manifest import Item
from harness.probes.base import (
    Layers,
    ProbeInputs,
    ProbeParams,
    ProbeResult,
    ProbeSpec,
    column_means,
    floored_std,
    register_probe,
)
from harness.probes.dense.targets import load_target
from harness.probes.linear_head import train_linear_head

DEPTH = "depth"  # the scenes' metric depth map (harness.datasets.scenes)


class RelativeDepthParams(ProbeParams):
    layers: Layers = None
    train_split: str = Field(min_length=1)
    eval_split: str = Field(min_length=1)
    pairs_per_image: PositiveInt = 100
    equal_ratio: NonNegativeFloat = 0.1  # δ: depths within a factor 1 + δ are equal
    epochs: PositiveInt = 30
    lr: PositiveFloat = 0.001
    weight_decay: NonNegativeFloat = 0.0001
    batch_size: PositiveInt = 256
    # The pairs' draw, apart from the head's init: unset, the run's seed draws both (and a record leaves it out)
    pairs_seed: NonNegativeInt | None = None


def ordinal(depth_a: np.ndarray, depth_b: np.ndarray, equal_ratio: float) -> np.ndarray:
    """+1 where a is farther than b by more than the ratio 1 + δ, −1 where closer, 0 within it."""
    ratio = np.asarray(depth_a, dtype=np.float64) / np.asarray(depth_b, dtype=np.float64)
    return np.where(ratio > 1.0 + equal_ratio, 1, np.where(ratio < 1.0 / (1.0 + equal_ratio), -1, 0))


def predicted_relation(scores: np.ndarray, tie: float) -> np.ndarray:
    """The relation a pair's score difference predicts: equal within the tie band, else its sign."""
    return np.where(np.abs(scores) < tie, 0, np.sign(scores)).astype(np.int64)


def disagreement(truth: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Per pair: 1.0 where the predicted relation is not the true one (WHDR with unit weights)."""
    return (np.asarray(truth) != np.asarray(predicted)).astype(np.float64)


def tie_threshold(scores: np.ndarray, truth: np.ndarray) -> float:
    """The tie band's half-width minimising the training pairs' disagreement: the smallest such value among 0 and
    the midpoints between consecutive |score|s (a band edge between two pairs, never on one)."""
    magnitudes = np.sort(np.abs(scores))
    candidates = np.concatenate([[0.0], (magnitudes[:-1] + magnitudes[1:]) / 2, [magnitudes[-1] * 2 + 1.0]])
    rates = [disagreement(truth, predicted_relation(scores, t)).mean() for t in candidates]
    return float(candidates[int(np.argmin(rates))])


def pair_points(item: Item, shape: tuple[int, int], valid: np.ndarray, count: int, seed: int) -> np.ndarray:
    """(count, 2, 2) pixel (row, column) pairs of valid pixels, drawn by a generator seeded from `seed` and the
    item's path: the same pairs for every backbone."""
    digest = hashlib.sha256(f"{seed}\x1f{item.path}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
    rows, cols = np.nonzero(valid)
    if len(rows) < 2:
        raise ValueError(f"{item.path}: fewer than two pixels with valid depth")
    first = rng.integers(0, len(rows), size=count)
    second = (first + rng.integers(1, len(rows), size=count)) % len(rows)  # never the same pixel twice
    return np.stack([np.stack([rows[first], cols[first]], axis=-1), np.stack([rows[second], cols[second]], axis=-1)],
                    axis=1)


def sample_features(dense: np.ndarray, points: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """(N, C) features of a (C, h, w) map at (N, 2) pixel (row, column) points of an image of `shape`: each pixel
    centre mapped onto the map's cell centres (align_corners=False), bilinear, clamped at the edges."""
    channels, h, w = dense.shape
    height, width = shape
    y = np.clip((points[:, 0] + 0.5) * h / height - 0.5, 0.0, h - 1.0)
    x = np.clip((points[:, 1] + 0.5) * w / width - 0.5, 0.0, w - 1.0)
    y0, x0 = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    wy, wx = (y - y0)[:, None], (x - x0)[:, None]
    grid = np.asarray(dense, dtype=np.float64).reshape(channels, -1).T  # (h·w, C)
    def at(r, c):
        return grid[r * w + c]
    return ((1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x1)) + wy * ((1 - wx) * at(y1, x0) + wx * at(y1, x1)))


def _pairs(inputs: ProbeInputs, p: RelativeDepthParams, items: list[Item]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features (N, 2, C), truth (N,) and the image index of each pair, over `items`."""
    draw = inputs.seed if p.pairs_seed is None else p.pairs_seed
    features, truth, owner = [], [], []
    for index, item in enumerate(items):
        depth = np.asarray(load_target(inputs.manifest, item, DEPTH), dtype=np.float64)
        if depth.ndim != 2:
            raise ValueError(f"{item.path}: depth must be (H, W); got shape {depth.shape}")
        valid = np.isfinite(depth) & (depth > 0)
        points = pair_points(item, depth.shape, valid, p.pairs_per_image, draw)
        dense = np.asarray(inputs.features(item))
        both = sample_features(dense, points.reshape(-1, 2), depth.shape).reshape(len(points), 2, -1)
        features.append(both)
        truth.append(ordinal(depth[points[:, 0, 0], points[:, 0, 1]], depth[points[:, 1, 0], points[:, 1, 1]],
                             p.equal_ratio))
        owner.append(np.full(len(points), index))
    return np.concatenate(features), np.concatenate(truth), np.concatenate(owner)


def run_relative_depth(inputs: ProbeInputs) -> ProbeResult:
    p = RelativeDepthParams(**inputs.params)  # with the defaults params.yaml leaves out
    train_items, test_items = inputs.manifest.split(p.train_split), inputs.manifest.split(p.eval_split)
    if not train_items or not test_items:
        raise ValueError(f"relative_depth needs {p.train_split} and {p.eval_split} images; got "
                         f"{len(train_items)} and {len(test_items)}")
    train, train_truth, _ = _pairs(inputs, p, train_items)
    test, test_truth, owner = _pairs(inputs, p, test_items)
    points = train.reshape(-1, train.shape[-1])
    mean, std = points.mean(axis=0), floored_std(points.std(axis=0)).astype(np.float64)
    train_diff = ((train[:, 0] - mean) / std - (train[:, 1] - mean) / std).astype(np.float32)
    test_diff = ((test[:, 0] - mean) / std - (test[:, 1] - mean) / std).astype(np.float32)
    unequal = train_truth != 0
    if not unequal.any():
        raise ValueError(f"no training pair differs in depth by more than the ratio 1 + {p.equal_ratio}")
    x = np.concatenate([train_diff[unequal], -train_diff[unequal]])
    y = np.concatenate([(train_truth[unequal] > 0), (train_truth[unequal] < 0)]).astype(np.int64)
    head = train_linear_head(x, y, 2, epochs=p.epochs, lr=p.lr, weight_decay=p.weight_decay,
                             batch_size=p.batch_size, seed=inputs.seed)

    def scores(diff: np.ndarray) -> np.ndarray:
        logits = head.logits(diff).astype(np.float64)
        return logits[:, 1] - logits[:, 0]

    train_scores, test_scores = scores(train_diff), scores(test_diff)
    tie = tie_threshold(train_scores, train_truth)
    wrong = disagreement(test_truth, predicted_relation(test_scores, tie))
    misordered = ((test_truth != 0) & (np.sign(test_scores) != test_truth)).astype(np.float64)
    columns = {"whdr": np.array([wrong[owner == i].mean() for i in range(len(test_items))]),
               "ordinal_error": np.array([misordered[owner == i].mean() for i in range(len(test_items))])}
    metrics = column_means(columns)
    metrics["train_whdr"] = float(disagreement(train_truth, predicted_relation(train_scores, tie)).mean())
    return ProbeResult(metrics, [item.path for item in test_items], columns, unit="image")


RELATIVE_DEPTH = register_probe(ProbeSpec(
    name="relative_depth",
    level="mid",
    protocol="relative-depth-pairs/v1",
    feature_mode="dense",
    headline="whdr",
    run=run_relative_depth,
    params=RelativeDepthParams,
    lower_is_better=frozenset({"whdr", "ordinal_error", "train_whdr"}),
    fit="squash",  # the dense probes' read of the scenes: one extraction serves every task
))
