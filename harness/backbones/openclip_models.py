"""OpenAI CLIP ViT-B/16 and ViT-B/32 through open_clip.

Pooled features default to the pre-projection class token (after `ln_post`), the usual choice for
probing CLIP's image tower; `pooling=proj` gives the projected embedding that CLIP's text side is
trained against. The pin is OpenAI's content-addressed release URL, whose path is the file's SHA-256, and
the weights block of every pretrained identity names open_clip's pretrained tag (`openai`).

`clip_vitb16_proj` / `clip_vitb32_proj` are the same towers with `use_projection` (its own identity: the flag
is in the architecture): the default pooled feature is the 512-d image–text embedding, and the last layer's
dense tokens are projected into that space too (after `ln_post`, as the class token is; MaskCLIP's dense
features without its attention change). Earlier layers are not projected: the projection was trained on
the last. Same weights file, so its checkpoint is the same file (`checkpoints.clip_vitb32_proj: PATH`).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import torch

from harness.backbones.base import Backbone, FeatureMaps
from harness.backbones.registry import register_backbone
from harness.backbones.weights import WeightsPin, WeightsRequest, random_weights, resolve_pinned_file
from harness.preprocessing import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, Preprocess

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


def _is_torchscript(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(n.endswith("constants.pkl") for n in archive.namelist())


def _build(name: str, request: WeightsRequest, use_projection: bool = False) -> Backbone:
    import open_clip

    config, filename, sha256 = _MODELS[name]
    architecture = {"family": "open_clip", "config": config, "tower": "visual"}
    if use_projection:  # only then: the identity of the plain towers (and their cached features) stays as it was
        architecture["use_projection"] = True
    if request.random:
        torch.manual_seed(request.seed)
        model = open_clip.create_model(config, pretrained=None)
        weights = random_weights(model.visual, request, init=f"open_clip {open_clip.__version__} defaults")
    else:
        pin = WeightsPin("url", _OPENAI.format(sha=sha256, file=filename), filename, "openai", sha256)
        path, weights = resolve_pinned_file(pin, request)
        weights = {**weights, "pretrained_tag": PRETRAINED_TAG}
        if _is_torchscript(path):  # OpenAI's own release is a TorchScript archive
            model = open_clip.load_openai_model(str(path), device="cpu", jit=False)
        else:  # open_clip's re-packaged state dict (.bin / .safetensors)
            model = open_clip.create_model(config, pretrained=str(path))
    return OpenClipViTBackbone(request.name, model.visual, _PREPROCESS, weights, architecture, request.precision,
                               use_projection=use_projection)


_PREPROCESS = Preprocess(crop=224, resize=224, mean=OPENAI_CLIP_MEAN, std=OPENAI_CLIP_STD)
for _name in _MODELS:
    register_backbone(_name, weights="hub", preprocess=_PREPROCESS)(lambda request, _n=_name: _build(_n, request))
    register_backbone(_name + PROJECTED_SUFFIX, weights="hub", preprocess=_PREPROCESS)(
        lambda request, _n=_name: _build(_n, request, use_projection=True))
