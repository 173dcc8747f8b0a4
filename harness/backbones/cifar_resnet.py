"""CIFAR-10 ResNet-20/32/44/56 (He et al. 2016, §4.2), written here to load akamaster's checkpoints.

Layout: 3×3 conv (16) + BN + ReLU, three stages of n basic blocks (16/32/64 channels, stride 1/2/2),
option-A shortcuts (stride-2 subsampling with zero-padded channels, no parameters), global average
pooling, linear 64 → 10. Depth = 6n + 2.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from harness.backbones.base import Backbone, FeatureMaps, WeightsUnavailableError
from harness.backbones.registry import register_backbone
from harness.backbones.weights import (
    WeightsPin,
    WeightsRequest,
    own_weights_hint,
    random_weights,
    resolve_pinned_file,
    unloadable_checkpoint,
)
from harness.core.preprocessing import IMAGENET_MEAN, IMAGENET_STD, Preprocess

# SHA-256 of akamaster/pytorch_resnet_cifar10's released files; the file names carry their first 8 hex digits.
_CHECKPOINTS = {
    20: ("resnet20-12fca82f.th", "12fca82f0bebc4135bf1f32f6e3710e61d5108578464b84fd6d7f5c1b04036c8"),
    32: ("resnet32-d509ac18.th", "d509ac1820d7f25398913559d7e81a13229b1e7adc5648e3bfa5e22dc137f850"),
    44: ("resnet44-014dd654.th", "014dd6541728a1c700b1642ab640e211dc6eb8ed507d70697458dc8f8a0ae2e4"),
    56: ("resnet56-4bfd9763.th", "4bfd97631478d6b638d2764fd2baff3edb1d7d82252d54439343b6596b9b5367"),
}
_RELEASE = "https://github.com/akamaster/pytorch_resnet_cifar10/raw/master/pretrained_models/"
WEIGHTS_DIR_ENV = "VISBENCH_CIFAR_RESNET_DIR"


class _ShortcutA(nn.Module):
    def __init__(self, planes: int) -> None:
        super().__init__()
        self.pad = planes // 4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad))


class _BasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = (
            _ShortcutA(planes) if stride != 1 or in_planes != planes else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, depth: int, num_classes: int = 10) -> None:
        super().__init__()
        if (depth - 2) % 6:
            raise ValueError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = self._stage(16, 16, n, 1)
        self.layer2 = self._stage(16, 32, n, 2)
        self.layer3 = self._stage(32, 64, n, 2)
        self.linear = nn.Linear(64, num_classes)
        for module in self.modules():  # the released models' init: Kaiming-normal convs and linear
            if isinstance(module, nn.Conv2d | nn.Linear):
                nn.init.kaiming_normal_(module.weight)

    @staticmethod
    def _stage(in_planes: int, planes: int, blocks: int, stride: int) -> nn.Sequential:
        layers = [_BasicBlock(in_planes, planes, stride)]
        layers += [_BasicBlock(planes, planes, 1) for _ in range(blocks - 1)]
        return nn.Sequential(*layers)

    def stages(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = F.relu(self.bn1(self.conv1(x)))
        outs = []
        for stage in (self.layer1, self.layer2, self.layer3):
            x = stage(x)
            outs.append(x)
        return outs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.stages(x)[-1].mean(dim=(2, 3)))


class _Suffix(nn.Module):
    """The last stages and the global average pool: stage outputs are the next stage's inputs as they are."""

    def __init__(self, stages: list[nn.Module]) -> None:
        super().__init__()
        self.stages = nn.Sequential(*stages)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(x).mean(dim=(2, 3))


class CifarResNetBackbone(Backbone):
    pooling_modes = ("avg",)
    num_layers = 3  # layer1, layer2, layer3

    def feature_maps(self, images: torch.Tensor, layers: list[int]) -> FeatureMaps:
        outs = self.model.stages(images)
        return FeatureMaps(maps=[outs[i] for i in layers])

    def finetune_suffix(self, blocks: int) -> nn.Module:
        if not 1 <= blocks < self.num_layers:
            raise ValueError(f"{self.name} fine-tunes 1..{self.num_layers - 1} of its {self.num_layers} stages "
                             f"(the stem and first stage stay frozen); got {blocks}")
        stages = [self.model.layer1, self.model.layer2, self.model.layer3][-blocks:]
        return copy.deepcopy(_Suffix(stages)).float().requires_grad_(True)


def _cifar_preprocess() -> Preprocess:
    # akamaster's training normalised CIFAR with the ImageNet mean/std; CIFAR images are already 32 px.
    return Preprocess(crop=32, resize=32, mean=IMAGENET_MEAN, std=IMAGENET_STD, interpolation="bilinear")


def _pin(depth: int) -> WeightsPin:
    filename, sha256 = _CHECKPOINTS[depth]
    return WeightsPin("url", _RELEASE + filename, filename, "akamaster/pytorch_resnet_cifar10@master", sha256,
                      accepts_checkpoints=True)


def _build(depth: int, request: WeightsRequest) -> Backbone:
    architecture = {"family": "cifar_resnet", "depth": depth, "shortcut": "A"}
    if request.random:
        torch.manual_seed(request.seed)
        model = CifarResNet(depth)
        weights = random_weights(model, request, init="kaiming_normal (as the released models)")
    else:
        filename, sha256 = _CHECKPOINTS[depth]
        weights_dir = Path(os.environ.get(WEIGHTS_DIR_ENV, "../shared/weights/resnet_cifar10"))
        pin = _pin(depth)
        checkpoint = request.checkpoint or str(weights_dir / filename)
        if not Path(checkpoint).is_file():
            raise WeightsUnavailableError(
                f"{request.name}: checkpoint {checkpoint} not found. Download {pin.url} (SHA-256 {sha256}) "
                f"into a folder and set {WEIGHTS_DIR_ENV}=FOLDER, or {own_weights_hint(request.name)}."
            )
        # The weights folder holds the release (a different file there is refused); a checkpoint the user gives
        # may be their own training (then `kind: checkpoint`).
        path, weights = resolve_pinned_file(pin, request, local_file=weights_dir / filename,
                                            formats=("torch-state-dict",))
        model = CifarResNet(depth)
        try:  # akamaster's layout: {"state_dict": ...} saved from nn.DataParallel, hence `module.`
            state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
            model.load_state_dict({k.removeprefix("module."): v for k, v in state.items()}, strict=True)
        except Exception as error:
            expected = f'a torch.save of {{"state_dict": ...}} of a CIFAR ResNet-{depth} (akamaster\'s layout)'
            raise unloadable_checkpoint(path, request.name, expected, error) from None
    return CifarResNetBackbone(request.name, model, _cifar_preprocess(), weights, architecture, request.precision)


for _depth in _CHECKPOINTS:
    register_backbone(f"cifar_resnet{_depth}", weights="file", preprocess=_cifar_preprocess(), pin=_pin(_depth))(
        lambda request, _d=_depth: _build(_d, request))
