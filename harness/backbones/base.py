"""The one interface every backbone answers to: `extract_features(images, pooling, layers)`.

A backbone adapter supplies `feature_maps` (dense maps for chosen layers, plus the class token where
the architecture has one). Pooling, layer concatenation, precision and identity live here, once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from harness.core.hashing import hash_json
from harness.core.preprocessing import Preprocess

Precision = Literal["fp32", "bf16"]
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class BackboneError(RuntimeError):
    """A backbone cannot be built as asked (missing weights, bad layer, unknown pooling)."""


class WeightsUnavailableError(BackboneError):
    """Pretrained weights cannot be found or fetched; the message says what to download and pass."""


@dataclass
class FeatureMaps:
    maps: list[torch.Tensor]  # one (B, C_l, H_l, W_l) per requested layer
    cls: torch.Tensor | None = None  # (B, C) class token of the last requested layer, if any
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # e.g. CLIP's projected embedding


class Backbone(nn.Module, ABC):
    """A frozen feature extractor with a derived identity.

    Subclasses set `pooling_modes` (first is the default), `num_layers`, and implement `feature_maps`.
    `weights` describes where the parameters came from (pretrained pin + file SHA-256, random seed, or
    a custom module's state-dict hash); it is part of the identity, as are the resolved preprocessing,
    the architecture variant and the precision.
    """

    pooling_modes: tuple[str, ...] = ("avg",)
    num_layers: int = 1
    # Images per forward pass (at most `settings.batch_size`), by precision: the fastest size that gives
    # bit-identical features to every other size, measured by benchmarks/batch_size.py. Depthwise CNNs run
    # fastest in small batches that stay in cache (EfficientNet-Lite0: ~3x at 4 than at 32, same bits).
    batch_sizes: ClassVar[dict[str, int]] = {"fp32": 32, "bf16": 32}
    # On a GPU the forward pass is cheap next to its launch overhead at CPU batch sizes: start here (capped by
    # `settings.cuda_batch_size`), halved on an out-of-memory error (`harness.runs.extract`).
    cuda_batch_size: ClassVar[int] = 256
    # Convolutions run fastest with NHWC inputs on cuDNN (and oneDNN): families whose models are channels_last
    # set it, and the extraction hands them channels_last batches on CUDA.
    channels_last: ClassVar[bool] = False

    def __init__(
        self,
        name: str,
        model: nn.Module,
        preprocess: Preprocess,
        weights: dict[str, Any],
        architecture: dict[str, Any],
        precision: Precision = "fp32",
    ) -> None:
        super().__init__()
        if precision not in _DTYPES:
            raise BackboneError(f"unknown precision {precision!r}; valid: {', '.join(_DTYPES)}")
        self.name = name
        self.model = model.eval().requires_grad_(False)
        self.preprocess = preprocess
        self.weights = weights
        self.architecture = architecture
        self.precision: Precision = precision
        self.model.to(_DTYPES[precision])
        self.device = torch.device("cpu")

    def to_device(self, device: torch.device | str) -> Backbone:
        """Move the model to `device` (in place). A CUDA device enters the identity: features computed there
        are other bits than the CPU's and never share a cache entry with them; the CPU, the reference every
        committed record was computed on, adds nothing (its identities stay those of before devices existed)."""
        self.device = torch.device(device)
        self.model.to(self.device)
        self._layer_strides = None
        return self

    @property
    def device_identity(self) -> str | None:
        """`cuda:<GPU model>` on a GPU (what decides its kernels), None on the CPU."""
        if self.device.type == "cpu":
            return None
        if self.device.type == "cuda":
            return f"cuda:{torch.cuda.get_device_name(self.device)}"
        return self.device.type

    @property
    def batch_size(self) -> int:
        """The family's measured batch size for this precision (see `batch_sizes`)."""
        return self.batch_sizes.get(self.precision, 32)

    # -- identity -------------------------------------------------------------------------------
    @property
    def is_control(self) -> bool:
        return self.weights.get("kind") == "random"

    def identity_spec(self) -> dict[str, Any]:
        spec = {
            "architecture": self.architecture,
            "weights": self.weights,
            "preprocess": self.preprocess.spec(),
            "precision": self.precision,
        }
        if self.device_identity is not None:
            spec["device"] = self.device_identity
        return spec

    @property
    def identity(self) -> str:
        return hash_json(self.identity_spec())

    # -- features -------------------------------------------------------------------------------
    def resolve_pooling(self, pooling: str) -> str:
        if pooling == "default":
            return self.pooling_modes[0]
        if pooling not in self.pooling_modes:
            raise BackboneError(
                f"{self.name} has no pooling {pooling!r}; valid: default, {', '.join(self.pooling_modes)}"
            )
        return pooling

    def layer_strides(self) -> list[int]:
        """Each layer's stride in input pixels, measured once by a forward pass of a blank image."""
        if getattr(self, "_layer_strides", None) is None:
            size = self.preprocess.crop
            with torch.inference_mode():
                blank = torch.zeros(1, 3, size, size, dtype=_DTYPES[self.precision], device=self.device)
                maps = self.feature_maps(blank, list(range(self.num_layers))).maps
            self._layer_strides = [max(1, round(size / m.shape[-2])) for m in maps]
        return self._layer_strides

    def layer_sets(self) -> dict[str, list[int]]:
        """Layer sets named by what they are, so one grid can ask every backbone for "its" stride-16 layer:
        `last`, and `strideN` = the deepest layer whose stride is at most N (N each stride the backbone has)."""
        strides = self.layer_strides()
        sets = {"last": [self.num_layers - 1]}
        for stride in sorted(set(strides)):
            sets[f"stride{stride}"] = [max(i for i, s in enumerate(strides) if s <= stride)]
        return sets

    def resolve_layers(self, layers: Sequence[int] | str | None) -> list[int]:
        if isinstance(layers, str):
            sets = self.layer_sets()
            if layers not in sets:
                raise BackboneError(f"{self.name} has no layer set {layers!r}; its sets: {', '.join(sets)} "
                                    f"(layer strides {self.layer_strides()})")
            return sets[layers]
        if layers is None or len(layers) == 0:
            return [self.num_layers - 1]
        resolved = []
        for layer in layers:
            index = layer + self.num_layers if layer < 0 else layer
            if not 0 <= index < self.num_layers:
                raise BackboneError(
                    f"{self.name} has layers 0..{self.num_layers - 1} (or -{self.num_layers}..-1); "
                    f"got {layer}"
                )
            resolved.append(index)
        return sorted(set(resolved))

    @abstractmethod
    def feature_maps(self, images: torch.Tensor, layers: list[int]) -> FeatureMaps:
        """Run the frozen model once and return the maps of `layers` (sorted, non-negative)."""

    @torch.inference_mode()
    def extract_features(
        self, images: torch.Tensor, pooling: str = "default", layers: Sequence[int] | None = None
    ) -> dict[str, Any]:
        """Dense (B,C,H,W) and pooled (B,C) features of preprocessed images, as float32.

        With several layers, dense maps are resized (bilinear) to the last layer's grid and concatenated
        along channels; pooled features are pooled from that concatenation, or the last layer's class
        token for `cls`.
        """
        mode = self.resolve_pooling(pooling)
        indices = self.resolve_layers(layers)
        out = self.feature_maps(images.to(self.device, _DTYPES[self.precision], non_blocking=True), indices)
        grid_hw = tuple(out.maps[-1].shape[-2:])
        maps = [
            m if tuple(m.shape[-2:]) == grid_hw else F.interpolate(m.float(), grid_hw, mode="bilinear")
            for m in out.maps
        ]
        dense = torch.cat([m.float() for m in maps], dim=1)
        pooled = self._pool(dense, out, mode)
        return {"dense": dense, "pooled": pooled.float(), "grid_hw": grid_hw, "pooling": mode}

    def _pool(self, dense: torch.Tensor, out: FeatureMaps, mode: str) -> torch.Tensor:
        if mode in ("avg", "mean"):
            return dense.mean(dim=(2, 3))
        if mode == "cls":
            if out.cls is None:
                raise BackboneError(f"{self.name} returned no class token")
            return out.cls
        if mode in out.extra:
            return out.extra[mode]
        raise BackboneError(f"{self.name} cannot pool {mode!r}")

    def finetune_suffix(self, blocks: int) -> nn.Module:
        """A trainable copy of the last `blocks` layer units (what `layers` indexes) that maps the dense map of
        layer `num_layers - blocks - 1` to the pooled feature: what `finetune-last-n` trains on a cached
        frozen prefix. Families that can be cut this way override it."""
        raise BackboneError(f"{self.name} cannot be fine-tuned block by block (its family has no suffix split); "
                            "families that can: cifar_resnet")

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "identity": self.identity,
            "control": self.is_control,
            "pooling_modes": list(self.pooling_modes),
            "num_layers": self.num_layers,
            **self.identity_spec(),
        }
