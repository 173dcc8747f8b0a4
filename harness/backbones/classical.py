"""`sobel`: a fixed-filter control computed by the harness itself (a Sobel/Canny-style edge baseline).

No learned weights: the "model" is a grey conversion, Gaussian smoothing at a few scales and Sobel
derivatives, so every number it gets on a board is what plain image gradients already give. Its
identity is derived from the filter spec (`weights = {"kind": "fixed-filter", ...}`); `sobel@random`
would be the same filters under another name, so it is refused rather than aliased.

Dense features, on the 224×224 input (intensities in [0, 1], no normalisation):
    grey = 0.299 R + 0.587 G + 0.114 B (ITU-R BT.601, as PIL's "L" and MATLAB's rgb2gray)
    for σ in (1, 2, 4): G_σ = Gaussian(σ) * grey; |∇G_σ| from 3×3 Sobel kernels (scaled by 1/8: units of
        intensity per pixel)
    channels: |∇G_1|, |∇G_2|, |∇G_4|, ∂x G_1, ∂y G_1
averaged over 4×4 cells (stride 4: a 56×56 grid). Borders are padded by replication, so the image frame
itself is no edge. Pooled features are the spatial mean of that grid.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.backbones.base import Backbone, BackboneError, FeatureMaps
from harness.backbones.registry import register_backbone
from harness.backbones.weights import WeightsRequest
from harness.core.preprocessing import Preprocess

_GREY = (0.299, 0.587, 0.114)
_SIGMAS = (1.0, 2.0, 4.0)
_STRIDE = 4
_INPUT = 224
_CHANNELS = (*(f"grad_mag_sigma{s:g}" for s in _SIGMAS), f"grad_x_sigma{_SIGMAS[0]:g}", f"grad_y_sigma{_SIGMAS[0]:g}")
FILTER_SPEC: dict[str, Any] = {
    "kind": "fixed-filter",
    "grey": list(_GREY),
    "gaussian_sigmas": list(_SIGMAS),
    "gaussian_radius": "ceil(3 sigma)",
    "derivative": "sobel-3x3/8",
    "padding": "replicate",
    "channels": list(_CHANNELS),
    "stride": _STRIDE,
    "cell_pooling": "mean",
}


def _gaussian(sigma: float) -> torch.Tensor:
    radius = math.ceil(3 * sigma)
    x = torch.arange(-radius, radius + 1, dtype=torch.float64)
    kernel = torch.exp(-x * x / (2 * sigma * sigma))
    return (kernel / kernel.sum()).float()


class GradientFilters(nn.Module):
    """(B, 3, H, W) RGB in [0, 1] → (B, 5, H/4, W/4) gradient channels; buffers only, nothing to learn."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("grey", torch.tensor(_GREY).view(1, 3, 1, 1))
        for index, sigma in enumerate(_SIGMAS):
            self.register_buffer(f"gauss{index}", _gaussian(sigma))
        smooth, diff = torch.tensor([1.0, 2.0, 1.0]), torch.tensor([-1.0, 0.0, 1.0])
        sobel_x = torch.outer(smooth, diff) / 8
        self.register_buffer("sobel", torch.stack([sobel_x, sobel_x.T])[:, None])  # (2, 1, 3, 3): d/dx, d/dy

    def _smooth(self, grey: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
        r = (len(kernel) - 1) // 2
        x = F.conv2d(F.pad(grey, (r, r, 0, 0), mode="replicate"), kernel.view(1, 1, 1, -1))
        return F.conv2d(F.pad(x, (0, 0, r, r), mode="replicate"), kernel.view(1, 1, -1, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        grey = (images * self.grey.to(images.dtype)).sum(dim=1, keepdim=True)
        channels, first = [], None
        for index in range(len(_SIGMAS)):
            smoothed = self._smooth(grey, getattr(self, f"gauss{index}").to(images.dtype))
            gradient = F.conv2d(F.pad(smoothed, (1, 1, 1, 1), mode="replicate"), self.sobel.to(images.dtype))
            channels.append(gradient.pow(2).sum(dim=1, keepdim=True).sqrt())
            first = gradient if first is None else first
        return F.avg_pool2d(torch.cat([*channels, first], dim=1), _STRIDE)


class SobelBackbone(Backbone):
    pooling_modes = ("avg",)
    num_layers = 1

    @property
    def is_control(self) -> bool:  # no learned weights: a baseline, never ranked with pretrained models
        return True

    def feature_maps(self, images: torch.Tensor, layers: list[int]) -> FeatureMaps:
        return FeatureMaps(maps=[self.model(images)])


_SOBEL_PREPROCESS = Preprocess.from_crop_pct(_INPUT, 0.875, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))


@register_backbone("sobel", weights="none", random_control=False, preprocess=_SOBEL_PREPROCESS)
def _build_sobel(request: WeightsRequest) -> Backbone:
    if request.random:
        raise BackboneError(f"{request.name}: sobel has fixed filters and no weights to randomise; use 'sobel'")
    if request.checkpoint:
        raise BackboneError(f"{request.name}: sobel has fixed filters and takes no checkpoint")
    architecture = {"family": "classical", "variant": "sobel", "impl": "harness.backbones.classical"}
    return SobelBackbone(request.name, GradientFilters(), _SOBEL_PREPROCESS, dict(FILTER_SPEC), architecture,
                         request.precision)
