"""The small MLP of the head-family sweep (`head-family-sweep/v1`), in NumPy: the linear head's recipe
(`harness.probes.linear_head`: mini-batch AdamW on softmax cross-entropy, float32, torch.nn.Linear's uniform
initialisation, single-threaded BLAS) with one hidden layer of ReLU units in front of the read-out.

One hidden layer is what "a small MLP" means in the probing literature's head comparisons: enough to draw a
non-linear boundary in the frozen features, too little to learn new features. Nothing else differs from the
linear head, so a gap between the two is the non-linearity's, not the recipe's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.probes.linear_head import AdamW, softmax_cross_entropy_grad


@dataclass
class MLPHead:
    hidden_weight: np.ndarray  # (hidden, features) float32
    hidden_bias: np.ndarray  # (hidden,)
    weight: np.ndarray  # (classes, hidden)
    bias: np.ndarray  # (classes,)

    def hidden(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(x.astype(np.float32, copy=False) @ self.hidden_weight.T + self.hidden_bias, 0)

    def logits(self, x: np.ndarray) -> np.ndarray:
        return self.hidden(x) @ self.weight.T + self.bias

    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.hidden_weight, self.hidden_bias, self.weight, self.bias


def _uniform(rng: np.random.Generator, fan_in: int, shape: tuple[int, ...]) -> np.ndarray:
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def gradients(head: MLPHead, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """d(mean cross-entropy)/d(each of `head.arrays()`) on the batch (x, y)."""
    hidden = head.hidden(x)
    grad = softmax_cross_entropy_grad(hidden @ head.weight.T + head.bias, y)
    grad_hidden = (grad @ head.weight) * (hidden > 0)
    return grad_hidden.T @ x, grad_hidden.sum(axis=0), grad.T @ hidden, grad.sum(axis=0)


def train_mlp_head(x: np.ndarray, y: np.ndarray, num_classes: int, *, hidden: int, epochs: int, lr: float,
                   weight_decay: float, batch_size: int, seed: int) -> MLPHead:
    from threadpoolctl import threadpool_limits

    x, y = np.ascontiguousarray(x, dtype=np.float32), np.asarray(y, dtype=np.int64)
    rng = np.random.default_rng(seed)
    head = MLPHead(_uniform(rng, x.shape[1], (hidden, x.shape[1])), _uniform(rng, x.shape[1], (hidden,)),
                   _uniform(rng, hidden, (num_classes, hidden)), _uniform(rng, hidden, (num_classes,)))
    optimisers = [AdamW(array, lr=lr, weight_decay=weight_decay) for array in head.arrays()]
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(epochs):
            order = rng.permutation(len(y))
            for start in range(0, len(y), batch_size):
                batch = order[start: start + batch_size]
                for optimiser, gradient in zip(optimisers, gradients(head, x[batch], y[batch]), strict=True):
                    optimiser.step(gradient)
    if not all(np.isfinite(array).all() for array in head.arrays()):
        raise ValueError(f"the MLP head diverged (non-finite weights after training at lr={lr:g}): lower "
                         "probes.head_family.lr")
    return head
