"""The training loop every dense probe shares: AdamW for a fixed number of epochs, no early stopping.

No validation-based selection, so a record's number is a function of its hyperparameters alone. The
head is built and trained with one torch thread (restored afterwards) and a seeded initialisation, so
the result does not depend on the machine's core count: `verify` compares at zero tolerance.
`train_loss` is the mean batch loss of the last epoch, weighted by batch size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from harness.probes.dense.heads import split_layers
from harness.probes.dense.streaming import DenseStream

Loss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (logits, target, valid) -> scalar


@dataclass(frozen=True)
class TrainedHead:
    head: nn.Module
    train_loss: float


def train_head(
    build: Callable[[], nn.Module], stream: DenseStream, loss: Loss, *, size: int, epochs: int, lr: float,
    weight_decay: float, seed: int, layer_channels: Sequence[int] | None = None,
) -> TrainedHead:
    """Build the head under `torch.manual_seed(seed)` and train it on `stream`'s shuffled batches."""
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1; got {epochs}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        head = build()
        optimiser = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
        head.train()
        epoch_loss = 0.0
        for epoch in range(epochs):
            total, count = 0.0, 0
            for batch in stream.batches(shuffle=True, seed=seed, epoch=epoch):
                logits = head(split_layers(batch.features, layer_channels), size)
                value = loss(logits, batch.target, batch.valid)
                optimiser.zero_grad()
                value.backward()
                optimiser.step()
                total += float(value.detach()) * len(batch.items)
                count += len(batch.items)
            epoch_loss = total / count
        return TrainedHead(head.eval(), epoch_loss)
    finally:
        torch.set_num_threads(threads)


def predict_logits(
    head: nn.Module, features: torch.Tensor, *, size: int, layer_channels: Sequence[int] | None = None
) -> torch.Tensor:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            return head(split_layers(features, layer_channels), size)
    finally:
        torch.set_num_threads(threads)
