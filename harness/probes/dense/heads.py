"""Heads that map frozen dense features to per-pixel outputs: linear (probe3d's default) and a light DPT.

Both take a list of (B, C_l, H_l, W_l) maps, one per backbone layer, and return (B, K, S, S) logits
bilinearly upsampled to the target size S.

The feature cache stores multi-layer features as ONE `dense` map: the backbone resizes every layer's
map to the last layer's grid and concatenates them along channels in layer order (see
`harness.backbones.base`). `split_layers` undoes that with the per-layer channel counts
(`layer_channels` in the probe's params, e.g. [384, 384] for two ViT-S layers); without them the map is
treated as one layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def split_layers(dense: torch.Tensor, layer_channels: Sequence[int] | None = None) -> list[torch.Tensor]:
    """(B, ΣC_l, H, W) → [(B, C_l, H, W), ...] in layer order; one layer when `layer_channels` is None."""
    if not layer_channels:
        return [dense]
    if sum(layer_channels) != dense.shape[1]:
        raise ValueError(f"layer_channels {list(layer_channels)} sum to {sum(layer_channels)}, "
                         f"but the dense map has {dense.shape[1]} channels")
    return list(torch.split(dense, list(layer_channels), dim=1))


def _common_grid(features: Sequence[torch.Tensor]) -> tuple[int, int]:
    return max(f.shape[-2] for f in features), max(f.shape[-1] for f in features)


def _resample(x: torch.Tensor, hw: tuple[int, int]) -> torch.Tensor:
    if tuple(x.shape[-2:]) == hw:
        return x
    return F.interpolate(x, size=hw, mode="bilinear", align_corners=False)


class LinearHead(nn.Module):
    """A 1×1 convolution on the channel-concatenated layers (at the finest grid), logits upsampled.

    A 1×1 conv on the concatenation equals the sum of per-layer 1×1 convs: the head stays linear in
    the features, as probe3d's linear probe is.
    """

    def __init__(self, in_channels: Sequence[int], out_channels: int) -> None:
        super().__init__()
        self.in_channels = list(in_channels)
        self.conv = nn.Conv2d(sum(self.in_channels), out_channels, kernel_size=1)

    @property
    def output_layer(self) -> nn.Conv2d:
        return self.conv

    def forward(self, features: Sequence[torch.Tensor], size: int) -> torch.Tensor:
        grid = _common_grid(features)
        x = torch.cat([_resample(f, grid) for f in features], dim=1)
        return F.interpolate(self.conv(x), size=(size, size), mode="bilinear", align_corners=False)


class DPTHead(nn.Module):
    """A small DPT-style decoder: project each layer (1×1) to `width`, resample to the finest grid, sum,
    refine with a 3×3 conv + ReLU, then a 1×1 conv to the outputs, upsampled bilinearly.

    DPT proper builds a four-level pyramid with residual fusion blocks; this keeps its two ideas
    (per-layer reassembly, fusion by summation and convolution) at a size a CPU trains in seconds.
    """

    def __init__(self, in_channels: Sequence[int], out_channels: int, width: int = 32) -> None:
        super().__init__()
        self.in_channels = list(in_channels)
        self.project = nn.ModuleList(nn.Conv2d(c, width, kernel_size=1) for c in self.in_channels)
        self.fuse = nn.Conv2d(width, width, kernel_size=3, padding=1)
        self.out = nn.Conv2d(width, out_channels, kernel_size=1)

    @property
    def output_layer(self) -> nn.Conv2d:
        return self.out

    def forward(self, features: Sequence[torch.Tensor], size: int) -> torch.Tensor:
        if len(features) != len(self.project):
            raise ValueError(f"DPTHead built for {len(self.project)} layers, got {len(features)}")
        grid = _common_grid(features)
        fused = sum(_resample(proj(f), grid) for proj, f in zip(self.project, features, strict=True))
        x = F.relu(self.fuse(fused))
        return F.interpolate(self.out(x), size=(size, size), mode="bilinear", align_corners=False)


HEADS = {"linear": LinearHead, "dpt": DPTHead}


@overload
def logit(p: float) -> float: ...
@overload
def logit(p: np.ndarray) -> np.ndarray: ...
def logit(p: float | np.ndarray) -> float | np.ndarray:
    """log(p / (1 − p)) with p clamped to [1e-4, 1 − 1e-4]: the output bias at which a sigmoid head starts at a
    training split's prior share `p` (the clamp keeps an empty or full split's bias finite). A float for a number,
    an array for an array."""
    p = np.clip(p, 1e-4, 1 - 1e-4)
    value = np.log(p / (1 - p))
    return float(value) if np.ndim(value) == 0 else value


def build_head(
    kind: str, in_channels: Sequence[int], out_channels: int, output_bias: Sequence[float] | None = None
) -> nn.Module:
    """A head of `kind`; `output_bias` starts the output at the training targets' prior (see `probes`)."""
    if kind not in HEADS:
        raise ValueError(f"unknown head {kind!r}; valid: {', '.join(sorted(HEADS))}")
    head = HEADS[kind](in_channels, out_channels)
    if output_bias is not None:
        with torch.no_grad():
            head.output_layer.bias.copy_(torch.as_tensor(output_bias, dtype=torch.float32))
    return head
