"""The training-free class-overlap probe and the head-family sweep, against independent references: sklearn's
neighbour search and kNN classifier, loops written from the definitions, and torch's autograd for the MLP."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.neighbors import KNeighborsClassifier, NearestNeighbors

from harness.probes import class_overlap, neighbours
from harness.probes.base import get_probe
from harness.probes.mlp_head import MLPHead, gradients, train_mlp_head

RECIPE = {"epochs": 40, "lr": 0.01, "weight_decay": 0.0001, "batch_size": 32}


def _clusters(rng: np.random.Generator, n: int, classes: int, dims: int, spread: float):
    centres = rng.normal(size=(classes, dims)) * 2
    labels = np.arange(n) % classes
    return (centres[labels] + rng.normal(scale=spread, size=(n, dims))).astype(np.float32), labels


def test_overlap_is_k_disagreeing_neighbours_over_sklearns_neighbour_search():
    rng = np.random.default_rng(0)
    reference, reference_labels = _clusters(rng, 120, 4, 6, 1.5)
    queries, query_labels = _clusters(rng, 50, 4, 6, 1.5)
    scores, auxiliary = class_overlap.overlap_columns(reference, reference_labels, queries, query_labels, 4, k=7)
    ref, q = neighbours.standardised(reference, queries)
    _, index = NearestNeighbors(n_neighbors=7, algorithm="brute").fit(ref).kneighbors(q)
    expected = np.array([np.mean(reference_labels[row] != label) for row, label in zip(index, query_labels,
                                                                                       strict=True)])
    np.testing.assert_array_equal(scores["overlap"], expected)
    for c in range(4):
        np.testing.assert_array_equal(auxiliary[f"neighbours_{c}"], (reference_labels[index] == c).sum(axis=1))
    # k odd and two classes per vote at most would avoid ties; here a tie goes to the nearer class, so compare
    # with sklearn only where the vote is not tied
    predicted = KNeighborsClassifier(n_neighbors=7, algorithm="brute").fit(ref, reference_labels).predict(q)
    counts = np.stack([auxiliary[f"neighbours_{c}"] for c in range(4)], axis=1)
    untied = (counts == counts.max(axis=1, keepdims=True)).sum(axis=1) == 1
    assert untied.sum() > 40
    np.testing.assert_array_equal(scores["knn_top1"][untied], (predicted == query_labels)[untied])


def test_a_tied_vote_goes_to_the_class_whose_member_is_nearest():
    labels = np.array([[2, 1, 1, 2], [0, 3, 3, 0], [1, 1, 0, 2]])
    np.testing.assert_array_equal(neighbours.vote(labels, 4), [2, 0, 1])


def test_per_class_and_pairwise_overlap_follow_their_definitions():
    rng = np.random.default_rng(1)
    reference, reference_labels = _clusters(rng, 90, 3, 5, 2.0)
    queries, query_labels = _clusters(rng, 30, 3, 5, 2.0)
    scores, auxiliary = class_overlap.overlap_columns(reference, reference_labels, queries, query_labels, 3, k=5)
    columns = {**scores, **auxiliary}
    table = class_overlap.pairwise(columns)
    for a in range(3):
        mine = query_labels == a
        assert class_overlap.per_class(columns)[a] == pytest.approx(scores["overlap"][mine].mean(), abs=1e-15)
        for b in range(3):
            share = np.mean([auxiliary[f"neighbours_{b}"][i] / 5 for i in np.flatnonzero(mine)])
            assert table[a, b] == pytest.approx(share, abs=1e-15)
        # a class's off-diagonal shares are its images' mean overlap
        assert 1 - table[a, a] == pytest.approx(class_overlap.per_class(columns)[a], abs=1e-12)


def test_separable_classes_do_not_overlap_and_shuffled_labels_do():
    rng = np.random.default_rng(2)
    x, y = _clusters(rng, 200, 5, 8, 0.05)
    probe = get_probe("class_overlap")
    separate = probe.evaluate({"train": x[:150], "val": x[150:]}, {"train": y[:150], "val": y[150:]},
                              reference_split="train", eval_split="val", k=5)
    assert separate.metrics["overlap"] == 0.0 and separate.metrics["knn_top1"] == 1.0
    shuffled = rng.permutation(y)
    mixed = probe.evaluate({"train": x[:150], "val": x[150:]}, {"train": shuffled[:150], "val": shuffled[150:]},
                           reference_split="train", eval_split="val", k=5)
    assert mixed.metrics["overlap"] > 0.6  # chance: 4 of 5 classes are other classes


def test_overlap_refuses_more_neighbours_than_reference_items():
    x = np.zeros((6, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="give k between 1 and 3"):
        get_probe("class_overlap").evaluate({"train": x[:3], "val": x[3:]}, {"train": np.arange(3),
                                            "val": np.arange(3)}, reference_split="train", eval_split="val", k=4)


def test_mlp_gradients_are_torchs_autograd():
    rng = np.random.default_rng(3)
    head = MLPHead(*(rng.normal(size=shape).astype(np.float32) for shape in ((16, 8), (16,), (3, 16), (3,))))
    x, y = rng.normal(size=(12, 8)).astype(np.float32), rng.integers(0, 3, 12)
    tensors = [torch.tensor(a, requires_grad=True) for a in head.arrays()]
    hidden = torch.relu(torch.tensor(x) @ tensors[0].T + tensors[1])
    torch.nn.functional.cross_entropy(hidden @ tensors[2].T + tensors[3], torch.tensor(y)).backward()
    for mine, tensor in zip(gradients(head, x, y), tensors, strict=True):
        np.testing.assert_allclose(mine, tensor.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_the_mlp_draws_a_boundary_no_hyperplane_can():
    """Concentric rings: a linear head is at chance, one hidden layer separates them."""
    rng = np.random.default_rng(4)
    radius = np.where(np.arange(400) % 2 == 0, 1.0, 3.0) + rng.normal(scale=0.2, size=400)
    angle = rng.uniform(0, 2 * np.pi, 400)
    x = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1).astype(np.float32)
    y = np.arange(400) % 2
    result = get_probe("head_family").evaluate({"train": x[:300], "val": x[300:]}, {"train": y[:300], "val": y[300:]},
                                               train_split="train", eval_split="val", k=5, hidden=32, **RECIPE)
    assert result.metrics["linear_top1"] < 0.7
    assert result.metrics["mlp_top1"] > 0.95 and result.metrics["knn_top1"] > 0.95
    assert result.metrics["mlp_minus_linear"] == pytest.approx(
        result.metrics["mlp_top1"] - result.metrics["linear_top1"], abs=1e-12)


def test_the_sweeps_linear_head_is_the_classification_probe():
    rng = np.random.default_rng(5)
    x, y = _clusters(rng, 160, 4, 12, 2.5)
    features, targets = {"train": x[:100], "val": x[100:]}, {"train": y[:100], "val": y[100:]}
    sweep = get_probe("head_family").evaluate(features, targets, train_split="train", eval_split="val", **RECIPE)
    linear = get_probe("classification").evaluate(features, targets, train_split="train", eval_split="val",
                                                  **RECIPE)
    np.testing.assert_array_equal(sweep.samples["linear_top1"], linear.samples["top1"])
    overlap = get_probe("class_overlap").evaluate(features, targets, reference_split="train", eval_split="val")
    np.testing.assert_array_equal(sweep.samples["knn_top1"], overlap.samples["knn_top1"])


def test_mlp_training_is_a_function_of_the_seed():
    rng = np.random.default_rng(6)
    x, y = _clusters(rng, 64, 3, 5, 1.0)
    first, again = (train_mlp_head(x, y, 3, hidden=8, seed=1, **RECIPE) for _ in range(2))
    other = train_mlp_head(x, y, 3, hidden=8, seed=2, **RECIPE)
    assert all(np.array_equal(a, b) for a, b in zip(first.arrays(), again.arrays(), strict=True))
    assert not np.array_equal(first.weight, other.weight)
