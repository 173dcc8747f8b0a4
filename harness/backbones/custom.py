"""Wrap any user `nn.Module` as a backbone; its identity hashes the module's state dict."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from harness.backbones.base import Backbone, FeatureMaps, Precision
from harness.hashing import hash_state_dict
from harness.preprocessing import Preprocess


class CustomBackbone(Backbone):
    """`forward_maps(images) -> list of (B,C,H,W)` is the user's; one entry per layer, last = deepest."""

    pooling_modes = ("avg",)

    def __init__(
        self,
        name: str,
        model: nn.Module,
        preprocess: Preprocess,
        forward_maps: Callable[[nn.Module, torch.Tensor], list[torch.Tensor]] | None = None,
        num_layers: int = 1,
        precision: Precision = "fp32",
    ) -> None:
        weights = {"kind": "custom", "state_sha256": hash_state_dict(model.state_dict())}
        architecture = {"family": "custom", "class": f"{type(model).__module__}.{type(model).__qualname__}"}
        super().__init__(name, model, preprocess, weights, architecture, precision)
        self._forward_maps = forward_maps or (lambda module, x: [module(x)])
        self.num_layers = num_layers

    def identity_spec(self) -> dict:
        # The wrapped module is the user's and may change after wrapping (more training,
        # load_state_dict): hash the weights as they are now, never a stale snapshot.
        self.weights = {"kind": "custom", "state_sha256": hash_state_dict(self.model.state_dict())}
        return super().identity_spec()

    def feature_maps(self, images: torch.Tensor, layers: list[int]) -> FeatureMaps:
        maps = self._forward_maps(self.model, images)
        if len(maps) != self.num_layers or any(m.ndim != 4 for m in maps):
            raise ValueError(
                f"{self.name}: forward_maps must return {self.num_layers} tensors of shape (B,C,H,W)"
            )
        return FeatureMaps(maps=[maps[i] for i in layers])
