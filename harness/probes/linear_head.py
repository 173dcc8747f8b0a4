"""The linear head that pooled probes train on cached features (protocol `linear-probe-adamw/v3`), in NumPy.

One linear layer, softmax cross-entropy averaged over each mini-batch, AdamW (decoupled weight decay, betas 0.9
and 0.999, eps 1e-8, torch.optim.AdamW's update rule), float32, initialised as torch.nn.Linear initialises
(weight and bias uniform in ±1/√fan_in). Why NumPy and not torch: a cached classification stage did about
0.3 s of work inside 2.2 s, of which `import torch` took 1.6 s; without torch the stage takes well under a
second. The data order and the initial weights come from NumPy's PCG64 seeded with the record's seed, so v3's
numbers are not v2's (torch's generator) bit for bit; the recipe is the same.

Matrix products run single-threaded (threadpoolctl, OpenBLAS): they are small, and the trained head must not
depend on the machine's core count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class LinearHead:
    weight: np.ndarray  # (classes, features) float32
    bias: np.ndarray  # (classes,) float32

    def logits(self, x: np.ndarray) -> np.ndarray:
        return x.astype(np.float32, copy=False) @ self.weight.T + self.bias


def softmax_cross_entropy_grad(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """d(mean cross-entropy)/d(logits), (B, C) float32."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    grad = exp / exp.sum(axis=1, keepdims=True)
    grad[np.arange(len(labels)), labels] -= 1.0
    return grad / np.float32(len(labels))


class AdamW:
    """torch.optim.AdamW's CPU update for one array, in float32."""

    def __init__(self, param: np.ndarray, *, lr: float, weight_decay: float, betas=(0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.param, self.lr, self.weight_decay, self.eps = param, lr, weight_decay, eps
        self.beta1, self.beta2 = betas
        self.exp_avg = np.zeros_like(param)
        self.exp_avg_sq = np.zeros_like(param)
        self.steps = 0

    def step(self, grad: np.ndarray) -> None:
        self.steps += 1
        if self.weight_decay:
            self.param *= np.float32(1 - self.lr * self.weight_decay)
        self.exp_avg += (grad - self.exp_avg) * np.float32(1 - self.beta1)
        self.exp_avg_sq *= np.float32(self.beta2)
        self.exp_avg_sq += np.float32(1 - self.beta2) * grad * grad
        bias_correction1 = 1 - self.beta1**self.steps
        bias_correction2 = 1 - self.beta2**self.steps
        denom = np.sqrt(self.exp_avg_sq) / np.float32(bias_correction2**0.5) + np.float32(self.eps)
        self.param -= np.float32(self.lr / bias_correction1) * self.exp_avg / denom


def train_linear_head(x: np.ndarray, y: np.ndarray, num_classes: int, *, epochs: int, lr: float,
                      weight_decay: float, batch_size: int, seed: int) -> LinearHead:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _train(np.ascontiguousarray(x, dtype=np.float32), np.asarray(y, dtype=np.int64), num_classes,
                      epochs=epochs, lr=lr, weight_decay=weight_decay, batch_size=batch_size, seed=seed)


def _train(x: np.ndarray, y: np.ndarray, num_classes: int, *, epochs: int, lr: float, weight_decay: float,
           batch_size: int, seed: int) -> LinearHead:
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(x.shape[1])
    head = LinearHead(rng.uniform(-bound, bound, (num_classes, x.shape[1])).astype(np.float32),
                      rng.uniform(-bound, bound, num_classes).astype(np.float32))
    orders = (rng.permutation(len(y)) for _ in range(epochs))
    batches = (order[start: start + batch_size] for order in orders for start in range(0, len(y), batch_size))
    return fit(head, x, y, batches, lr=lr, weight_decay=weight_decay)


def fit(head: LinearHead, x: np.ndarray, y: np.ndarray, batches, *, lr: float, weight_decay: float) -> LinearHead:
    """One AdamW step per batch (an index array into x and y), updating `head` in place."""
    optimisers = (AdamW(head.weight, lr=lr, weight_decay=weight_decay),
                  AdamW(head.bias, lr=lr, weight_decay=weight_decay))
    for batch in batches:
        features = x[batch]
        grad = softmax_cross_entropy_grad(head.logits(features), y[batch])
        optimisers[0].step(grad.T @ features)
        optimisers[1].step(grad.sum(axis=0))
    # a diverged head predicts class 0 everywhere from NaN logits: finite, chance-level metrics that would
    # otherwise pass as an ok record
    if not (np.isfinite(head.weight).all() and np.isfinite(head.bias).all()):
        raise ValueError(f"the linear head diverged (non-finite weights after training at lr={lr:g}): lower "
                         "probes.<task>.lr")
    return head
