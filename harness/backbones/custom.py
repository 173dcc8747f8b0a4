"""Your own `nn.Module` as a backbone: wrap it in Python (`CustomBackbone`), or register it from a plugin
module listed under `plugins:` in params.yaml (`register_custom_backbone`, see docs/extend.md).

A registered module without weights is a random-init control only (`NAME@random`, never ranked): the
harness never calls an untrained module "pretrained". With `weights=` it runs on that file, pinned by the
file's SHA-256 like every built-in backbone, as `kind: checkpoint`: a file of your own is not a published
release, and boards and pages say so ("not the published weights").
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.backbones.base import Backbone, BackboneError, FeatureMaps, Precision
from harness.backbones.registry import register_backbone
from harness.backbones.weights import (
    CHECKPOINT_NOTE,
    WeightsPin,
    WeightsRequest,
    file_format,
    load_state_dict_file,
    random_weights,
    resolve_pinned_file,
)
from harness.core.hashing import hash_state_dict
from harness.core.preprocessing import IMAGENET_MEAN, IMAGENET_STD, Preprocess

ForwardMaps = Callable[[nn.Module, torch.Tensor], Sequence[torch.Tensor]]


class CustomBackbone(Backbone):
    """`forward_maps(module, images) -> list of (B,C,H,W)` is the user's; one entry per layer, last = deepest.

    Without `weights`, the identity hashes the module's state dict as it is at each call (a module wrapped
    in Python may be trained further after wrapping); a registered plugin passes its weights block.
    """

    pooling_modes = ("avg",)

    def __init__(
        self,
        name: str,
        model: nn.Module,
        preprocess: Preprocess,
        forward_maps: ForwardMaps | None = None,
        num_layers: int = 1,
        precision: Precision = "fp32",
        weights: dict[str, Any] | None = None,
    ) -> None:
        self._fixed_weights = weights is not None
        weights = weights or {"kind": "custom", "state_sha256": hash_state_dict(model.state_dict())}
        architecture = {"family": "custom", "class": f"{type(model).__module__}.{type(model).__qualname__}"}
        super().__init__(name, model, preprocess, weights, architecture, precision)
        self._forward_maps = forward_maps or (lambda module, x: [module(x)])
        self.num_layers = num_layers

    def identity_spec(self) -> dict:
        if not self._fixed_weights:
            self.weights = {"kind": "custom", "state_sha256": hash_state_dict(self.model.state_dict())}
        return super().identity_spec()

    def feature_maps(self, images: torch.Tensor, layers: list[int]) -> FeatureMaps:
        maps = list(self._forward_maps(self.model, images))
        if len(maps) != self.num_layers or any(m.ndim != 4 for m in maps):
            raise ValueError(
                f"{self.name}: forward_maps must return {self.num_layers} tensors of shape (B,C,H,W)"
            )
        return FeatureMaps(maps=[maps[i] for i in layers])


def _default_forward(module: nn.Module, images: torch.Tensor) -> Sequence[torch.Tensor]:
    out = module(images)
    return out if isinstance(out, list | tuple) else [out]


def register_custom_backbone(
    name: str,
    build: Callable[[], nn.Module],
    *,
    input_size: int,
    num_layers: int = 1,
    mean: tuple[float, float, float] = IMAGENET_MEAN,
    std: tuple[float, float, float] = IMAGENET_STD,
    forward_maps: ForwardMaps | None = None,
    weights: str | None = None,
    sha256: str | None = None,
) -> None:
    """Register `build()` (a fresh `nn.Module`) under `name`.

    The module's forward returns one (B,C,H,W) map, or a list of them (one per layer, deepest last), unless
    `forward_maps` says otherwise. Images arrive resized to `input_size`² and normalised with mean/std.
    `weights` (a state-dict file, relative to the project) makes `name` a pretrained backbone; its
    `sha256` is required, so the identity never depends on whatever file happens to be at that path.
    """
    if weights is not None and not sha256:
        raise BackboneError(f"register_custom_backbone({name!r}): weights={weights!r} needs sha256=… (run "
                            f"`sha256sum {weights}`), so a different file is refused instead of silently ranked")
    preprocess = Preprocess(crop=input_size, resize=input_size, mean=tuple(mean), std=tuple(std))
    forward = forward_maps or _default_forward

    def construct(request: WeightsRequest) -> Backbone:
        torch.manual_seed(request.seed)  # the control's init is a function of the seed
        model = build()
        if request.random:
            identity = random_weights(model, request, init=f"{type(model).__qualname__} defaults")
        else:
            pin = WeightsPin("file", str(weights), Path(str(weights)).name, "local", sha256)
            path, pinned = resolve_pinned_file(pin, replace(request, checkpoint=request.checkpoint or weights))
            model.load_state_dict(load_state_dict_file(path), strict=True)
            # the plugin's own file, pinned by its author: a checkpoint, never a published release
            identity = {"kind": "checkpoint", "file_sha256": pinned["file_sha256"], "filename": path.name,
                        "format": file_format(path), "pinned_by": "the plugin's sha256", "note": CHECKPOINT_NOTE}
        return CustomBackbone(request.name, model, preprocess, forward, num_layers, request.precision, identity)

    # the plugin that called us is the code DVC stages using `name` depend on, not this module
    caller = sys._getframe(1).f_globals.get("__name__")
    register_backbone(name, weights="custom", pretrained=weights is not None, module=caller,
                      preprocess=preprocess)(construct)
