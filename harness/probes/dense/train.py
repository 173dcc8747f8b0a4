"""The training loop every dense probe shares: AdamW for a fixed number of epochs, no early stopping.

No validation-based selection, so a record's number is a function of its hyperparameters alone. The
head is built under a seeded initialisation on the CPU, whatever the device, and then moved to the run's
device (`ProbeInputs.device`), so it starts from the same bits everywhere; batches follow it there. On the CPU
it trains with one torch thread (restored afterwards), so the result does not depend on the machine's core
count: `verify` compares at zero tolerance. `train_loss` is the mean batch loss of the last epoch, weighted by
batch size.

`train_dense_head` is the preamble every dense-feature head probe shares: standardise the training split with its
own per-channel statistics, then build and train the head on it.

The per-batch work (`train_step`: forward, loss, backward, optimiser step), an epoch of it (`train_epoch`) and
the prediction forward (`predict_logits`) convert nothing to Python numbers or NumPy: they run on any device, the
`meta` device included, which is how tests without a GPU check that no tensor is created on the wrong one. The
one read-back is the epoch's loss, once per epoch in `train_head`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from harness.datasets.manifest import Item
from harness.probes.dense.heads import split_layers
from harness.probes.dense.streaming import Batch, DenseStream, TargetLoader, channel_statistics, to_device

Loss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (logits, target, valid) -> scalar


@dataclass(frozen=True)
class TrainedHead:
    head: nn.Module  # on the device it trained on
    train_loss: float


@contextmanager
def cpu_threads(device: torch.device | str) -> Iterator[None]:
    """One torch thread while computing on the CPU, restored afterwards: oneDNN's reductions split work by thread
    count, and a CPU result must not depend on the machine's cores. A GPU's kernels do not depend on the host's
    threads, so on any other device they are left as they are."""
    if torch.device(device).type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def head_device(head: nn.Module) -> torch.device:
    """The device a head's parameters are on (every head here has parameters)."""
    return next(head.parameters()).device


def train_step(
    head: nn.Module, optimiser: torch.optim.Optimizer, batch: Batch, loss: Loss, *, size: int,
    layer_channels: Sequence[int] | None = None,
) -> torch.Tensor:
    """One AdamW step on `batch` (already on the head's device); its loss, detached, still on that device.

    Nothing here reads a value back to the host (a `float()` of the loss would wait for the GPU every batch):
    the caller accumulates the returned tensor on the device."""
    logits = head(split_layers(batch.features, layer_channels), size)
    value = loss(logits, batch.target, batch.valid)
    optimiser.zero_grad()
    value.backward()
    optimiser.step()
    return value.detach()


def train_epoch(
    head: nn.Module, optimiser: torch.optim.Optimizer, stream: DenseStream, loss: Loss, *, size: int, seed: int,
    epoch: int, layer_channels: Sequence[int] | None = None,
) -> tuple[torch.Tensor, int]:
    """One pass over `stream`'s batches in epoch `epoch`'s shuffled order, each moved to the head's device:
    (Σ batch loss × batch size, a float64 scalar on that device; the number of items seen)."""
    device = head_device(head)
    # accumulated on the device and read once per epoch by the caller: a `float()` per batch would wait for the GPU.
    # Bit for bit what summing Python floats gave: float32 → float64 is exact, and each product and sum is one IEEE
    # double operation.
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = 0
    for batch in stream.batches(shuffle=True, seed=seed, epoch=epoch):
        value = train_step(head, optimiser, batch.to(device), loss, size=size, layer_channels=layer_channels)
        total += value.double() * len(batch.items)
        count += len(batch.items)
    return total, count


def train_head(
    build: Callable[[], nn.Module], stream: DenseStream, loss: Loss, *, size: int, epochs: int, lr: float,
    weight_decay: float, seed: int, layer_channels: Sequence[int] | None = None,
    device: torch.device | str = "cpu",
) -> TrainedHead:
    """Build the head under `torch.manual_seed(seed)` (on the CPU), move it to `device` and train it there on
    `stream`'s shuffled batches (the order is the stream's, drawn on the CPU: the same on every device)."""
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1; got {epochs}")
    device = torch.device(device)
    with cpu_threads(device):
        torch.manual_seed(seed)
        # initialised on the CPU (by the generator the seed just set), then moved: the same starting bits whatever
        # the device; on the CPU `.to` is a no-op
        head = build().to(device)
        optimiser = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
        head.train()
        epoch_loss = 0.0
        for epoch in range(epochs):
            total, count = train_epoch(head, optimiser, stream, loss, size=size, seed=seed, epoch=epoch,
                                       layer_channels=layer_channels)
            epoch_loss = float(total) / count
        return TrainedHead(head.eval(), epoch_loss)


@dataclass(frozen=True)
class DenseTraining:
    """What `train_dense_head` leaves for scoring and saving: the trained head (on the device it trained on), the
    last epoch's mean loss, the training split's per-channel (mean, std) that the eval features are standardised
    with, the per-layer input channels and the output bias the head was built with."""

    head: nn.Module
    train_loss: float
    statistics: tuple[np.ndarray, np.ndarray]
    in_channels: list[int]
    bias: Any = None  # the output bias the head was built with (`output_bias`'s; None: PyTorch's default)


def train_dense_head(
    items: Sequence[Item], features: Callable[[Item], np.ndarray], load: TargetLoader,
    build: Callable[[list[int], Any], nn.Module], loss: Loss, *, batch_size: int, size: int, epochs: int, lr: float,
    weight_decay: float, seed: int, layer_channels: Sequence[int] | None = None, device: torch.device | str = "cpu",
    output_bias: Callable[[DenseStream], Any] | None = None,
) -> DenseTraining:
    """A head trained on `items` (the training split) by `train_head`, their features standardised per channel with
    their own statistics (`channel_statistics`, one streamed pass).

    `build(in_channels, bias)` makes a fresh head (called under the seed, inside `train_head`); `in_channels` is
    `layer_channels` where given, else the features' channel count as one layer. `bias` is what
    `output_bias(stream)` returns (None without it), computed before training on the standardised training stream
    (a prior over its targets, say), outside the seeded, single-threaded block the head is built in."""
    stream = DenseStream(items, features, batch_size, load)
    statistics = channel_statistics(stream)
    stream.statistics = statistics
    in_channels = list(layer_channels) if layer_channels else [len(statistics[0])]
    bias = output_bias(stream) if output_bias is not None else None
    trained = train_head(
        lambda: build(in_channels, bias), stream, loss, size=size, epochs=epochs, lr=lr, weight_decay=weight_decay,
        seed=seed, layer_channels=layer_channels, device=device)
    return DenseTraining(trained.head, trained.train_loss, statistics, in_channels, bias)


def predict_logits(
    head: nn.Module, features: torch.Tensor, *, size: int, layer_channels: Sequence[int] | None = None
) -> torch.Tensor:
    """The head's logits for a batch of (CPU) features, moved to the head's device and computed there; the logits
    stay on that device (callers bring what they keep back with `.cpu()` before it becomes NumPy)."""
    device = head_device(head)
    with cpu_threads(device), torch.no_grad():
        return head(split_layers(to_device(features, device), layer_channels), size)
