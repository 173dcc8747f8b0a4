"""harness.probes.adamw against torch.optim.AdamW, and the classification probe's macro-F1 against sklearn: the
restatements exist only to skip two imports, so they must give the libraries' numbers exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score

from harness.probes.adamw import AdamW
from harness.probes.classification import macro_f1, train_linear_probe


def _train(optimiser_class, weight_decay: float) -> torch.nn.Linear:
    torch.manual_seed(3)
    head = torch.nn.Linear(17, 5)
    x, y = torch.randn(64, 17), torch.randint(0, 5, (64,))
    optimiser = optimiser_class(head.parameters(), lr=0.01, weight_decay=weight_decay)
    for start in range(0, 64 * 40, 16):  # 160 steps of batch 16
        batch = slice(start % 64, start % 64 + 16)
        loss = torch.nn.functional.cross_entropy(head(x[batch]), y[batch])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return head


@pytest.mark.parametrize("weight_decay", [0.0, 1e-4, 0.05])
def test_adamw_is_torch_optim_adamw_bit_for_bit(weight_decay):
    ours, theirs = _train(AdamW, weight_decay), _train(torch.optim.AdamW, weight_decay)
    assert torch.equal(ours.weight, theirs.weight) and torch.equal(ours.bias, theirs.bias)
    assert not torch.equal(ours.weight, torch.nn.Linear(17, 5).weight)  # it trained


def test_the_linear_probe_trains_reproducibly_with_it():
    x = np.random.default_rng(0).normal(size=(40, 8)).astype(np.float32)
    y = np.arange(40) % 4
    first, second = (train_linear_probe(x, y, 4, epochs=3, lr=0.01, weight_decay=1e-4, batch_size=8, seed=0)
                     for _ in range(2))
    assert torch.equal(first.weight, second.weight)


@pytest.mark.parametrize("seed", range(6))
def test_macro_f1_equals_sklearn_including_absent_classes(seed):
    rng = np.random.default_rng(seed)
    classes = 7
    labels = rng.integers(0, classes - 2, size=50)  # the last two classes never occur in the labels …
    predictions = np.where(rng.random(50) < 0.5, labels, rng.integers(0, classes - 1, size=50))  # … one predicted
    expected = f1_score(labels, predictions, average="macro", labels=np.arange(classes), zero_division=0)
    assert macro_f1(labels, predictions, classes) == pytest.approx(expected, rel=1e-15, abs=0)
