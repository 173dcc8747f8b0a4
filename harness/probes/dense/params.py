"""The params.yaml schema shared by probes that train a head on dense features (dense tasks, BSDS boundaries,
detection): what every such block must say, each value checked before any work starts."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from harness.probes.base import Layers, ProbeParams

Split = Annotated[str, Field(min_length=1)]


class HeadTrainingParams(ProbeParams):
    layers: Layers = None  # None: the last layer; several: concatenated (linear) or per layer (dpt)
    eval_split: Split
    epochs: PositiveInt
    lr: PositiveFloat
    weight_decay: NonNegativeFloat
    batch_size: PositiveInt
    # channels of each layer in `layers`, for heads that read the layers apart (dpt, detection)
    layer_channels: list[PositiveInt] | None = None


class DenseParams(HeadTrainingParams):
    head: Literal["linear", "dpt"]
    train_split: Split
    target_size: PositiveInt  # targets are encoded and scored at target_size² pixels
