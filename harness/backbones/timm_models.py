"""timm backbones: DINOv2 ViT-S/14 and ViT-B/14, ResNet-18/50 (`a1_in1k`).

DINOv2 runs as timm's `vit_*_patch14_dinov2` with the `lvd142m` file of timm's hub repos, at 224 px: timm's
checkpoint filter resamples the 37×37 position embedding of the 518 px file to 16×16 once, at load (bicubic,
antialiased, no `interpolate_offset`), where Meta's hub code interpolates at every forward with
`interpolate_offset=0.1`. Those are different computations, and this module's features were never compared with
Meta's hub model here; the identity names the resampling (`pos_embed`), so a Meta-hub run can never share a
cache entry or a board with it.

What the tests check (tests/test_hub_weights.py), with seeded random tensors in the upstream layout (a Hugging
Face hub cache holding timm's `model.safetensors` at the pinned revision), not the real weights: the file is
found offline through `hf_hub_download`, loaded by timm's own loader (`pretrained=True` with the file as
`pretrained_cfg_overlay`), its tensors are the model's, and the position embedding is timm's resampling of the
file's. A file given as a checkpoint (`checkpoints: {NAME: PATH}` in params.yaml) that is not the pinned one
runs as `kind: checkpoint`, its own identity.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from harness.backbones.base import Backbone, FeatureMaps
from harness.backbones.registry import register_backbone
from harness.backbones.weights import (
    WeightsPin,
    WeightsRequest,
    random_weights,
    resolve_pinned_file,
    unloadable_checkpoint,
)
from harness.core.preprocessing import IMAGENET_MEAN, IMAGENET_STD, Preprocess

# Pins: Hugging Face revisions and file SHA-256s recorded from public projects; the hub cannot be reached from
# this project's machines, so no file was downloaded and hashed here to confirm them. A file fetched from the hub
# (or found in its cache) must match the SHA-256, or the run is refused; a file given as a checkpoint that does
# not match runs as `kind: checkpoint` under its own identity.
_DINOV2 = {"kind": "vit", "crop_pct": 224 / 256, "create_kwargs": {"img_size": 224},
           "architecture": {"pos_embed": "timm resample at load (bicubic, no interpolate_offset)"}}
_RESNET = {"kind": "cnn", "crop_pct": 0.95}
TIMM_PINS: dict[str, dict[str, Any]] = {
    "dinov2_vits14": {**_DINOV2, "timm_model": "vit_small_patch14_dinov2", "pin": {
        "source": "hf-hub", "location": "timm/vit_small_patch14_dinov2.lvd142m", "filename": "model.safetensors",
        "revision": "4610ca143709d58a633b6397a74412c2c3842454",
        "sha256": "04d27f3400d059fc0cfd7d17dd1909a75bf3ea8fb3eeb48b97cb99e57ee20081"}},
    "dinov2_vitb14": {**_DINOV2, "timm_model": "vit_base_patch14_dinov2", "pin": {
        "source": "hf-hub", "location": "timm/vit_base_patch14_dinov2.lvd142m", "filename": "model.safetensors",
        "revision": "4685c99dabffe5affac90bd99dbffd25801ae58d",
        "sha256": "55cbb5d887b336d430e649c277b85a1429e724871f9d02ac16203235886d8c7b"}},
    "resnet18": {**_RESNET, "timm_model": "resnet18", "pin": {
        "source": "hf-hub", "location": "timm/resnet18.a1_in1k", "filename": "model.safetensors",
        "revision": "491b427b45c94c7fb0e78b5474cc919aff584bbf",
        "sha256": "80c49dee3da4822c009c5a7fe591e9223c5a2cfcf95a4067ca4dfb5a7b89c612"}},
    "resnet50": {**_RESNET, "timm_model": "resnet50", "pin": {
        "source": "hf-hub", "location": "timm/resnet50.a1_in1k", "filename": "model.safetensors",
        "revision": "767268603ca0cb0bfe326fa87277f19c419566ef",
        "sha256": "773525d5821de224f8f30c33377b7a795d7863e08522698200d3217d3f2a41bb"}},
}


class TimmViTBackbone(Backbone):
    pooling_modes = ("cls", "mean")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.num_layers = len(self.model.blocks)

    def feature_maps(self, images: torch.Tensor, layers: list[int]) -> FeatureMaps:
        # norm=True applies the final LayerNorm to every returned layer, as DINOv2's linear eval does.
        inters = self.model.forward_intermediates(
            images, indices=layers, norm=True, return_prefix_tokens=True, stop_early=True,
            output_fmt="NCHW", intermediates_only=True,
        )
        return FeatureMaps(maps=[spatial for spatial, _ in inters], cls=inters[-1][1][:, 0])


class TimmCNNBackbone(Backbone):
    pooling_modes = ("avg",)
    channels_last = True  # its model is converted to channels_last; on CUDA its batches follow
    # benchmarks/batch_size.py, ResNet-18 img/s at 2/4/8/16/32: fp32 49/54/55/53/53, bf16 88/99/105/110/98
    batch_sizes: ClassVar[dict[str, int]] = {"fp32": 8, "bf16": 16}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.num_layers = len(self.model.feature_info)  # stem, layer1..layer4

    def feature_maps(self, images: torch.Tensor, layers: list[int]) -> FeatureMaps:
        inters = self.model.forward_intermediates(
            images, indices=layers, stop_early=True, intermediates_only=True
        )
        return FeatureMaps(maps=list(inters))


def _build(name: str, request: WeightsRequest) -> Backbone:
    import timm

    spec: dict[str, Any] = TIMM_PINS[name]
    kwargs = dict(spec.get("create_kwargs", {}))
    architecture = {"family": "timm", "model": spec["timm_model"], **spec.get("architecture", {}), **kwargs}
    if request.random:
        torch.manual_seed(request.seed)
        model = timm.create_model(spec["timm_model"], pretrained=False, **kwargs)
        weights = random_weights(model, request, init=f"timm {timm.__version__} defaults")
    else:
        pin = _pin(name)
        path, weights = resolve_pinned_file(pin, request, formats=("safetensors", "torch-state-dict"))
        # timm's own loader reads the file and its checkpoint filter adapts it (resamples DINOv2's position
        # embedding, converts Meta's key names); a file it cannot load is the user's to fix, so one line, no trace.
        try:
            model = timm.create_model(
                spec["timm_model"], pretrained=True, pretrained_cfg_overlay={"file": str(path)}, **kwargs
            )
        except Exception as error:
            raise unloadable_checkpoint(path, request.name, f"timm's {spec['timm_model']} state dict", error) from None
    if spec["kind"] == "cnn":
        model = model.to(memory_format=torch.channels_last)  # oneDNN's fast path for CPU convolutions
    cls = TimmViTBackbone if spec["kind"] == "vit" else TimmCNNBackbone
    return cls(request.name, model, _preprocess(name), weights, architecture, request.precision)


def _pin(name: str) -> WeightsPin:
    return WeightsPin(**TIMM_PINS[name]["pin"], accepts_checkpoints=True)


def _preprocess(name: str) -> Preprocess:
    return Preprocess.from_crop_pct(224, TIMM_PINS[name]["crop_pct"], mean=IMAGENET_MEAN, std=IMAGENET_STD)


for _name in TIMM_PINS:
    register_backbone(_name, weights="hub", preprocess=_preprocess(_name), pin=_pin(_name))(
        lambda request, _n=_name: _build(_n, request))
