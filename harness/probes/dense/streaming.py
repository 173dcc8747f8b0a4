"""Batches of dense features and targets, read a batch at a time.

A split of dense features does not fit in memory at scale (2,000 images × 384×16×16 float32 = 786 MB),
so nothing here holds more than one batch: features come from the probe's lookup (the feature cache),
targets from their files, both per batch. The shuffle order is `default_rng([seed, epoch])`, a function
of the seed and epoch alone, independent of torch's global state, of the thread count and of the device: batches
are built on the CPU (from NumPy) and moved to the device the head trains on by `Batch.to`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from harness.datasets.manifest import Item
from harness.probes.base import floored_std

TargetLoader = Callable[[Item], tuple[np.ndarray, np.ndarray]]


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`tensor` (built on the CPU from NumPy) on `device`; on the CPU itself, the same tensor (no copy).

    For a CUDA device the tensor is first copied into pinned (page-locked) memory, so the host-to-device copy is
    asynchronous (`non_blocking`) and overlaps the previous step's kernels; torch keeps a pinned buffer alive
    until its copy has completed. Pinning elsewhere would only cost a copy.
    """
    if tensor.device == device:
        return tensor
    if device.type == "cuda" and tensor.device.type == "cpu":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


@dataclass(frozen=True)
class Batch:
    items: list[Item]
    features: torch.Tensor  # (B, C, h, w) float32, standardised when the stream has statistics
    target: torch.Tensor | None  # (B, ...) encoded targets
    valid: torch.Tensor | None  # (B, S, S) bool

    def to(self, device: torch.device) -> Batch:
        """This batch with its tensors on `device` (see `to_device`); itself when they are already there."""
        if self.features.device == device:
            return self
        return Batch(self.items, to_device(self.features, device),
                     None if self.target is None else to_device(self.target, device),
                     None if self.valid is None else to_device(self.valid, device))


class DenseStream:
    """Items of one split, their feature lookup and (optionally) their target loader, batched lazily."""

    def __init__(
        self, items: Sequence[Item], features: Callable[[Item], np.ndarray], batch_size: int,
        load_target: TargetLoader | None = None,
        statistics: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive; got {batch_size}")
        self.items = list(items)
        self.features = features
        self.batch_size = batch_size
        self.load_target = load_target
        self.statistics = statistics

    def __len__(self) -> int:
        return len(self.items)

    def order(self, *, shuffle: bool, seed: int = 0, epoch: int = 0) -> np.ndarray:
        if not shuffle:
            return np.arange(len(self.items))
        return np.random.default_rng([seed, epoch]).permutation(len(self.items))

    def batches(self, *, shuffle: bool = False, seed: int = 0, epoch: int = 0) -> Iterator[Batch]:
        order = self.order(shuffle=shuffle, seed=seed, epoch=epoch)
        for start in range(0, len(order), self.batch_size):
            items = [self.items[i] for i in order[start: start + self.batch_size]]
            x = np.stack([np.asarray(self.features(item), dtype=np.float32) for item in items])
            if self.statistics is not None:
                mean, std = self.statistics
                x = (x - mean[None, :, None, None]) / std[None, :, None, None]
            target = valid = None
            if self.load_target is not None:
                pairs = [self.load_target(item) for item in items]
                target = torch.from_numpy(np.stack([t for t, _ in pairs]))
                valid = torch.from_numpy(np.stack([v for _, v in pairs]))
            yield Batch(items, torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), target, valid)


def channel_statistics(stream: DenseStream) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and floored std (`floored_std`) over every cell of every item, accumulated in
    float64 per batch."""
    total = squares = None
    count = 0
    plain = DenseStream(stream.items, stream.features, stream.batch_size)  # no targets, no standardising
    for batch in plain.batches():
        x = batch.features.double()
        s, q = x.sum(dim=(0, 2, 3)), (x * x).sum(dim=(0, 2, 3))
        total, squares = (s, q) if total is None else (total + s, squares + q)
        count += x.shape[0] * x.shape[2] * x.shape[3]
    if total is None:
        raise ValueError("cannot standardise an empty split")
    mean = total / count
    var = (squares / count - mean * mean).clamp_min(0.0)
    return mean.numpy().astype(np.float32), floored_std(var.sqrt().numpy())
