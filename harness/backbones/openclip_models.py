"""OpenAI CLIP ViT-B/16 and ViT-B/32 through open_clip.

Pooled features default to the pre-projection class token (after `ln_post`), the usual choice for
probing CLIP's image tower; `pooling=proj` gives the projected embedding that CLIP's text side is
trained against. The pin is OpenAI's content-addressed release URL, whose path is the file's SHA-256, and
the weights block of every pretrained identity names open_clip's pretrained tag (`openai`).

OpenAI's URL is not a hub repo: the weights are always a file the user gives (`checkpoints: {NAME: PATH}` in
params.yaml). OpenAI's TorchScript release loads through `open_clip.load_openai_model`, any other file as
open_clip's state dict (`.bin` / `.safetensors`, open_clip's key names) through
`open_clip.create_model(config, pretrained=PATH)`. A file that is not the pinned one (open_clip's
re-packaged state dict is never byte-equal to OpenAI's archive) runs as `kind: checkpoint`, without the tag.
tests/test_hub_weights.py loads seeded random weights written in both formats.

`clip_vitb16_proj` / `clip_vitb32_proj` are the same towers with `use_projection` (its own identity: the flag
is in the architecture): the default pooled feature is the 512-d image–text embedding, and the last layer's
dense tokens are projected into that space too (after `ln_post`, as the class token is; MaskCLIP's dense
features without its attention change). Earlier layers are not projected: the projection was trained on
the last. Same weights file, so its checkpoint is the same file (`checkpoints.clip_vitb32_proj: PATH`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.backbones.base import Backbone, BackboneError, FeatureMaps
from harness.backbones.registry import register_backbone
from harness.backbones.weights import (
    WeightsPin,
    WeightsRequest,
    file_format,
    random_weights,
    resolve_pinned_file,
    unloadable_checkpoint,
)
from harness.core.preprocessing import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, Preprocess

_OPENAI = "https://openaipublic.azureedge.net/clip/models/{sha}/{file}"
# name → (open_clip model config, OpenAI release file, its SHA-256 as published in the URL)
_MODELS = {
    "clip_vitb16": ("ViT-B-16-quickgelu", "ViT-B-16.pt",
                    "5806e77cd80f8b59890b7e101eabd078d9fb84e6937f9e85e4ecb61988df416f"),
    "clip_vitb32": ("ViT-B-32-quickgelu", "ViT-B-32.pt",
                    "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af"),
}


PRETRAINED_TAG = "openai"  # open_clip's tag for OpenAI's release, the one every pin here is
PROJECTED_SUFFIX = "_proj"


class OpenClipViTBackbone(Backbone):
    pooling_modes = ("cls", "mean", "proj")

    def __init__(self, *args, use_projection: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.num_layers = len(self.model.transformer.resblocks)
        self.use_projection = use_projection
        if use_projection:  # the image–text embedding is what this variant is for: its default
            self.pooling_modes = ("proj", "cls", "mean")

    def feature_maps(self, images: torch.Tensor, layers: list[int]) -> FeatureMaps:
        out = self.model.forward_intermediates(
            images, indices=layers, stop_early=True, normalize_intermediates=True,
            intermediates_only=True, output_fmt="NCHW", output_extra_tokens=True,
        )
        cls = out["image_intermediates_prefix"][-1][:, 0]
        extra = {}
        if layers[-1] == self.num_layers - 1 and self.model.proj is not None:
            extra["proj"] = cls @ self.model.proj
        maps = list(out["image_intermediates"])
        if self.use_projection and layers[-1] == self.num_layers - 1:
            maps[-1] = torch.einsum("bchw,cd->bdhw", maps[-1], self.model.proj)
        return FeatureMaps(maps=maps, cls=cls, extra=extra)


def _load(config: str, path: Path, name: str) -> nn.Module:
    """The CLIP model in `path`, OpenAI's TorchScript archive or open_clip's state dict, checked to be `config`."""
    import open_clip

    torchscript = file_format(path) == "torchscript"
    expected = "OpenAI's TorchScript CLIP" if torchscript else f"open_clip's {config} state dict"
    try:
        if torchscript:  # OpenAI's own release; the architecture is read off the state dict's shapes
            with warnings.catch_warnings():  # torch.jit is deprecated, and still the format OpenAI published
                warnings.filterwarnings("ignore", r"`torch\.jit\.load` is deprecated", FutureWarning)
                model = open_clip.load_openai_model(str(path), device="cpu")
        else:  # open_clip's re-packaged state dict (.bin / .safetensors), loaded strictly into `config`
            model = open_clip.create_model(config, pretrained=str(path))
    except Exception as error:
        raise unloadable_checkpoint(path, name, expected, error) from None
    _check_vision_tower(model.visual, config, path, name)
    return model


def _check_vision_tower(visual: nn.Module, config: str, path: Path, name: str) -> None:
    """`load_openai_model` builds whatever architecture the archive's shapes say: a ViT-B/16 file given to
    clip_vitb32 would otherwise run under ViT-B/32's identity."""
    import open_clip

    model_cfg: dict[str, Any] = open_clip.get_model_config(config)
    vision = model_cfg["vision_cfg"]
    want = {"width": vision["width"], "layers": vision["layers"], "patch": vision["patch_size"],
            "image_size": vision["image_size"], "embed_dim": model_cfg["embed_dim"]}
    proj = getattr(visual, "proj", None)
    got = {"width": visual.conv1.weight.shape[0], "layers": len(visual.transformer.resblocks),
           "patch": visual.conv1.weight.shape[-1], "image_size": visual.image_size[0],
           "embed_dim": None if proj is None else proj.shape[1]}
    if got != want:
        raise BackboneError(f"{path} is not a checkpoint {name} can load (expected {config}'s vision tower "
                            f"{want}): its vision tower is {got}")


def _build(name: str, request: WeightsRequest, use_projection: bool = False) -> Backbone:
    import open_clip

    config = _MODELS[name][0]
    architecture = {"family": "open_clip", "config": config, "tower": "visual"}
    if use_projection:  # only then: the identity of the plain towers (and their cached features) stays as it was
        architecture["use_projection"] = True
    if request.random:
        torch.manual_seed(request.seed)
        model = open_clip.create_model(config, pretrained=None)
        weights = random_weights(model.visual, request, init=f"open_clip {open_clip.__version__} defaults")
    else:
        pin = _pin(name)
        # TorchScript only as OpenAI's pinned release (its SHA-256 checked first): torch.jit.load runs an archive's
        # code (`__setstate__`) as it loads, so anyone else's is refused before open_clip sees it
        path, weights = resolve_pinned_file(pin, request, formats=("safetensors", "torch-state-dict"))
        if weights["kind"] == "pretrained":  # the tag names OpenAI's release: not said of anyone else's file
            weights = {**weights, "pretrained_tag": PRETRAINED_TAG}
        model = _load(config, path, request.name)
    return OpenClipViTBackbone(request.name, model.visual, _PREPROCESS, weights, architecture, request.precision,
                               use_projection=use_projection)


def _pin(name: str) -> WeightsPin:
    _, filename, sha256 = _MODELS[name]
    return WeightsPin("url", _OPENAI.format(sha=sha256, file=filename), filename, "openai", sha256,
                      accepts_checkpoints=True)


_PREPROCESS = Preprocess(crop=224, resize=224, mean=OPENAI_CLIP_MEAN, std=OPENAI_CLIP_STD)
for _name in _MODELS:
    register_backbone(_name, weights="hub", preprocess=_PREPROCESS, pin=_pin(_name))(
        lambda request, _n=_name: _build(_n, request))
    register_backbone(_name + PROJECTED_SUFFIX, weights="hub", preprocess=_PREPROCESS, pin=_pin(_name))(
        lambda request, _n=_name: _build(_n, request, use_projection=True))
