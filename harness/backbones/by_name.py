"""Any pretrained backbone of timm, open_clip or torchvision by name, pinned in a committed lock file.

`timm:<model>.<tag>` (any timm model with a pretrained tag), `open_clip:<model>/<tag>` (an open_clip vision
transformer whose tag is on the Hugging Face hub) and `torchvision:<WeightsEnum>.<MEMBER>` resolve through each
library's own loader and local cache: the Hugging Face hub cache (`HF_HOME`, `HF_HUB_OFFLINE`) for timm and
open_clip, torch.hub's checkpoint folder (`TORCH_HOME`) for torchvision. No network is needed when the file is
there; where it is not, the hub is tried unless `HF_HUB_OFFLINE` is set, and torchvision's file is never fetched.

Like a package lock, the first resolve (`visbench-harness pin backbone=SPEC`, or the first run naming SPEC)
writes a pin to `backbones.lock`: the repo or URL, the revision, the file's SHA-256 and the resolved
preprocessing. Every later build reads the lock, finds the file at that revision and refuses, in one line, a file
whose SHA-256 differs (`pin` refreshes an entry deliberately). Identity and cache keys come from the pin, never
from the name. Each locked spec is registered under a path-safe name (`timm:convnext_tiny.fb_in1k` →
`timm--convnext_tiny.fb_in1k`), which grids, pipelines and records use; `@random` is its seeded random-init
control. The field's standard rows (`STANDARD_ROWS`) are named aliases of such specs, with their pooling and
layer sets declared and their metadata (licence, training data) as data.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.backbones.base import Backbone, BackboneError, FeatureMaps, WeightsUnavailableError
from harness.backbones.cards import DATASET_IMAGES
from harness.backbones.lock import LOCK, LockEntry, read_lock, write_lock
from harness.backbones.registry import register_backbone
from harness.backbones.weights import (
    WeightsRequest,
    load_state_dict_file,
    own_weights_hint,
    random_weights,
    resolve_pinned_file,
    unloadable_checkpoint,
)
from harness.core.hashing import sha256_file
from harness.core.preprocessing import Preprocess

FAMILIES = ("timm", "open_clip", "torchvision")
GRAMMAR = ("timm:<model>.<tag>, open_clip:<model>/<tag> or torchvision:<WeightsEnum>.<MEMBER> "
           "(e.g. timm:convnext_tiny.fb_in1k, open_clip:ViT-B-32/laion2b_s34b_b79k, "
           "torchvision:ResNet50_Weights.IMAGENET1K_V2)")
SEPARATOR = "--"  # stands for ':' and '/' in the registered name: DVC addresses stages as FILE:STAGE@KEY

# What a pretrained tag says its weights were trained on, by the tag's tokens (timm's and open_clip's tags name
# their data; torchvision's enums name ImageNet-1k). Sizes: harness.backbones.cards.DATASET_IMAGES.
TAG_TOKENS = {"in1k": "ImageNet-1k", "imagenet1k": "ImageNet-1k", "in21k": "ImageNet-21k", "in22k": "ImageNet-21k",
              "lvd142m": "LVD-142M", "sa1b": "SA-1B", "webli": "WebLI", "openai": "OpenAI WIT",
              "dino": "ImageNet-1k", "mae": "ImageNet-1k"}  # DINO and MAE: ImageNet-1k's images, no labels
# tokens that name their data by prefix (`laion2b_s34b_b79k`'s first token is `laion2b`, `datacomp_xl`'s too)
TAG_PREFIXES = {"laion2b": "LAION-2B", "laion400m": "LAION-400M", "datacomp": "DataComp"}


@dataclass(frozen=True)
class Spec:
    """One backbone by its library's own name."""

    family: str
    model: str
    tag: str

    @classmethod
    def parse(cls, text: str) -> Spec:
        family, sep, rest = text.partition(":")
        if not sep or family not in FAMILIES:
            raise BackboneError(f"{text!r} is not a backbone by name; write {GRAMMAR}")
        split = {"timm": ".", "open_clip": "/", "torchvision": "."}[family]
        model, sep, tag = rest.rpartition(split) if family != "timm" else rest.partition(split)
        if not sep or not model or not tag:
            raise BackboneError(f"{text!r}: {family} names need a model and a pretrained tag; write {GRAMMAR}")
        return cls(family, model, tag)

    @property
    def text(self) -> str:
        return f"{self.family}:{self.model}{'/' if self.family == 'open_clip' else '.'}{self.tag}"

    @property
    def name(self) -> str:
        """The registered (path-safe) name: `timm--convnext_tiny.fb_in1k`."""
        return self.text.replace(":", SEPARATOR).replace("/", SEPARATOR)


@dataclass(frozen=True)
class StandardRow:
    """A named row of the field (what the peer corpus ranks), as the spec it is and what it reads by default."""

    spec: str
    pooling: str  # the default pooled feature
    layer_sets: tuple[str, ...] = ("last",)  # named sets a grid may ask for (Backbone.layer_sets)
    note: str = ""


STANDARD_ROWS: dict[str, StandardRow] = {
    "dinov2_vitl14": StandardRow("timm:vit_large_patch14_dinov2.lvd142m", "cls", ("last", "stride14")),
    "dino_vitb16": StandardRow("timm:vit_base_patch16_224.dino", "cls", ("last", "stride16")),
    "mae_vitb16": StandardRow("timm:vit_base_patch16_224.mae", "mean", ("last", "stride16"),
                              "MAE's encoder; mean of patch tokens (its class token is untrained for probing)"),
    "sam_vitb": StandardRow("timm:samvit_base_patch16.sa1b", "mean", ("last", "stride16"),
                            "SAM's image encoder at its native 1024 px"),
    "siglip_vitb16": StandardRow("timm:vit_base_patch16_siglip_224.webli", "mean", ("last", "stride16"),
                                 "SigLIP's image tower (no class token: attention-pool head dropped)"),
    "convnext_tiny": StandardRow("timm:convnext_tiny.fb_in1k", "avg", ("last", "stride16")),
    "vit_b16": StandardRow("timm:vit_base_patch16_224.augreg2_in21k_ft_in1k", "cls", ("last", "stride16")),
    "clip_vitb32_laion2b": StandardRow("open_clip:ViT-B-32/laion2b_s34b_b79k", "cls", ("last",)),
    "resnet50_tv2": StandardRow("torchvision:ResNet50_Weights.IMAGENET1K_V2", "avg", ("last", "stride16")),
}
# DINOv2 S/B and OpenAI's CLIP B/16, B/32 are registered by timm_models and openclip_models with their own pins.


def resolve_spec(text: str) -> Spec:
    """A spec from its text, a registered name (`timm--…`) or a standard row's alias."""
    if text in STANDARD_ROWS:
        return Spec.parse(STANDARD_ROWS[text].spec)
    if ":" not in text and SEPARATOR in text:
        family, _, rest = text.partition(SEPARATOR)
        if family == "open_clip":
            model, _, tag = rest.rpartition(SEPARATOR)
            return Spec(family, model, tag)
        return Spec.parse(f"{family}:{rest}")
    return Spec.parse(text)


def pin(text: str, path: Path = LOCK, refresh: bool = False) -> tuple[str, LockEntry, bool]:
    """The lock entry of `text` (a spec, registered name or alias): the committed one, or, when there is none or
    `refresh`, one resolved now from the local cache and written to the lock. (name, entry, whether written)."""
    spec = resolve_spec(text)
    entries = read_lock(path)
    name = text if text in STANDARD_ROWS else spec.name
    if name in entries and not refresh:
        return name, entries[name], False
    entry = _FAMILY_PINS[spec.family](spec)
    if text in STANDARD_ROWS:
        row = STANDARD_ROWS[text]
        entry = LockEntry(entry.spec, entry.pin, entry.preprocess,
                          {**entry.meta, "pooling": row.pooling, "layer_sets": list(row.layer_sets),
                           **({"note": row.note} if row.note else {})})
    entries[name] = entry
    write_lock(entries, path)
    _register(name, entry)
    return name, entry, True


def is_by_name(text: str) -> bool:
    """Whether `text` (a backbone as a user writes it, `@random` allowed) names a backbone of this module."""
    base = text.partition("@")[0]
    return base in STANDARD_ROWS or base.partition(":")[0] in FAMILIES or base.partition(SEPARATOR)[0] in FAMILIES


def registered_name(text: str) -> str:
    """The registered name of a spec, registered name or alias (`@random` kept), pinning it on first use: the
    run, the pipeline and the records use this name, and the lock holds what it is."""
    base, at, variant = text.partition("@")
    name, _, _ = pin(base)
    return name + at + variant


def training_data(tag: str) -> list[dict[str, Any]]:
    """The datasets a pretrained tag names (its tokens, TAG_TOKENS and TAG_PREFIXES), in the tag's order."""
    names: list[str] = []
    for token in tag.lower().replace("-", "_").split("_"):
        name = TAG_TOKENS.get(token) or next((n for p, n in TAG_PREFIXES.items() if token.startswith(p)), None)
        if name and name not in names:
            names.append(name)
    return [{"name": name, "images": DATASET_IMAGES[name]} for name in names]


# -- resolving a pin, per family -------------------------------------------------------------------------------


def _hub_file(repo: str, filenames: tuple[str, ...], spec: Spec) -> tuple[Path, str, str]:
    """The first of `filenames` that `repo` has in the local hub cache (or, online, on the hub): its path, name and
    the commit it was found at (the snapshot folder huggingface_hub keeps it under)."""
    from huggingface_hub import hf_hub_download

    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
    for local_only in (True, False) if not offline else (True,):
        for filename in filenames:
            try:
                path = Path(hf_hub_download(repo, filename, local_files_only=local_only))
            except Exception:  # not in the cache (or not on the hub): try the next name
                continue
            return path, filename, path.parent.name
    raise WeightsUnavailableError(
        f"{spec.text}: none of {', '.join(filenames)} of the hub repo {repo} is in the Hugging Face cache "
        f"({'HF_HUB_OFFLINE is set' if offline else 'nor could the hub be reached'}); fetch it where the hub is "
        f"reachable (`hf download {repo} {filenames[0]}`) and copy the cache (HF_HOME) here")


def _timm_pin(spec: Spec) -> LockEntry:
    import timm

    try:
        cfg = timm.models.get_pretrained_cfg(f"{spec.model}.{spec.tag}") if timm.is_model(spec.model) else None
    except RuntimeError:  # timm's word for a tag the model does not have
        cfg = None
    if cfg is None:
        raise BackboneError(f"{spec.text}: timm {timm.__version__} has no pretrained tag {spec.model}.{spec.tag}; "
                            f"its tags for the model: timm.list_pretrained('{spec.model}*')")
    if not cfg.hf_hub_id:
        raise BackboneError(f"{spec.text}: timm's tag is not on the Hugging Face hub (only {cfg.url}); "
                            "register it with a plugin (docs/extend.md) under a NAME and give it the file: "
                            f"{own_weights_hint('NAME')}")
    path, filename, revision = _hub_file(cfg.hf_hub_id, ("model.safetensors", "pytorch_model.bin"), spec)
    size = cfg.input_size[-1]
    preprocess = Preprocess.from_crop_pct(size, cfg.crop_pct or 1.0, mean=tuple(cfg.mean), std=tuple(cfg.std),
                                          interpolation=cfg.interpolation or "bicubic")
    meta = {"license": cfg.license, "input_size": size, "training_data": training_data(spec.tag),
            "library": f"timm {timm.__version__}"}
    return _entry(spec, "hf-hub", cfg.hf_hub_id, filename, revision, path, preprocess, meta)


def _open_clip_pin(spec: Spec) -> LockEntry:
    import open_clip

    cfg = open_clip.get_pretrained_cfg(spec.model, spec.tag)
    if not cfg:
        raise BackboneError(f"{spec.text}: open_clip {open_clip.__version__} has no pretrained tag {spec.tag} for "
                            f"{spec.model}; its tags: open_clip.list_pretrained_tags_by_model('{spec.model}')")
    if not cfg.get("hf_hub"):
        raise BackboneError(f"{spec.text}: open_clip's tag is a download URL, not a hub repo; OpenAI's release is "
                            f"clip_vitb16 / clip_vitb32, run from its file ({own_weights_hint('clip_vitb16')})")
    org, name, filename = [*cfg["hf_hub"].split("/", 2), ""][:3]  # "org/name/[file]"
    repo = f"{org}/{name}"
    names = (filename,) if filename else ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
    path, filename, revision = _hub_file(repo, names, spec)
    vision = open_clip.get_model_config(spec.model)["vision_cfg"]
    size = vision["image_size"] if isinstance(vision["image_size"], int) else vision["image_size"][0]
    preprocess = Preprocess(crop=size, resize=size, mean=tuple(cfg["mean"]), std=tuple(cfg["std"]),
                            interpolation=cfg.get("interpolation", "bicubic"))
    meta = {"license": "see the hub repo's model card", "input_size": size,
            "training_data": training_data(spec.tag), "library": f"open_clip {open_clip.__version__}",
            "resize_mode": cfg.get("resize_mode", "shortest")}
    return _entry(spec, "hf-hub", repo, filename, revision, path, preprocess, meta)


def _torchvision_pin(spec: Spec) -> LockEntry:
    import torchvision
    from torchvision.models import get_weight

    try:
        weights = get_weight(f"{spec.model}.{spec.tag}")
    except (ValueError, KeyError, AttributeError):
        raise BackboneError(f"{spec.text}: torchvision {torchvision.__version__} has no weights "
                            f"{spec.model}.{spec.tag}; torchvision.models.list_models() names them") from None
    path = _torchvision_file(weights.url, spec)
    transform = weights.transforms()
    preprocess = Preprocess(crop=int(transform.crop_size[0]), resize=int(transform.resize_size[0]),
                            mean=tuple(transform.mean), std=tuple(transform.std),
                            interpolation=transform.interpolation.value)
    meta = {"license": "BSD-3-Clause (torchvision)", "input_size": int(transform.crop_size[0]),
            "training_data": training_data(spec.tag), "library": f"torchvision {torchvision.__version__}",
            "params": weights.meta.get("num_params"), "gflops": weights.meta.get("_ops")}
    # torchvision names each file by the first hex digits of its SHA-256: that prefix is its revision
    revision = Path(weights.url).stem.rpartition("-")[2]
    return _entry(spec, "url", weights.url, Path(weights.url).name, revision, path, preprocess, meta)


def _torchvision_file(url: str, spec: Spec) -> Path:
    """torch.hub's copy of `url` (where torchvision's loader looks first); never downloaded here."""
    path = Path(torch.hub.get_dir()) / "checkpoints" / Path(url).name
    if not path.is_file():
        raise WeightsUnavailableError(f"{spec.text}: {path} is missing; download {url} there (or point TORCH_HOME "
                                      "at a folder whose hub/checkpoints holds it)")
    return path


def _entry(spec: Spec, source: str, location: str, filename: str, revision: str, path: Path,
           preprocess: Preprocess, meta: dict[str, Any]) -> LockEntry:
    pinned = {"source": source, "location": location, "filename": filename, "revision": revision,
              "sha256": sha256_file(path)}
    values = asdict(preprocess)
    return LockEntry(spec.text, pinned, {**values, "mean": list(values["mean"]), "std": list(values["std"])},
                     {k: v for k, v in meta.items() if v is not None})


_FAMILY_PINS = {"timm": _timm_pin, "open_clip": _open_clip_pin, "torchvision": _torchvision_pin}


# -- building a locked backbone --------------------------------------------------------------------------------


class TimmAnyBackbone(Backbone):
    """Any timm model through `forward_intermediates`: ViTs with a class token pool it (or the mean of the patch
    tokens), the rest average their map. Every block (ViTs) or stage (CNNs) is a layer (`feature_info`)."""

    pooling_modes = ("avg",)

    def __init__(self, *args, pooling: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.num_layers = len(self.model.feature_info)
        self.prefix_tokens = int(getattr(self.model, "num_prefix_tokens", 0) or 0)
        has_cls = getattr(self.model, "cls_token", None) is not None
        modes = ("cls", "mean") if has_cls else ("mean",) if hasattr(self.model, "blocks") else ("avg",)
        self.pooling_modes = (pooling, *[m for m in modes if m != pooling]) if pooling in modes else modes

    def feature_maps(self, images: torch.Tensor, layers: list[int]) -> FeatureMaps:
        if self.prefix_tokens:
            inters = self.model.forward_intermediates(
                images, indices=layers, norm=True, return_prefix_tokens=True, stop_early=True,
                output_fmt="NCHW", intermediates_only=True)
            return FeatureMaps(maps=[spatial for spatial, _ in inters], cls=inters[-1][1][:, 0])
        inters = self.model.forward_intermediates(images, indices=layers, stop_early=True, intermediates_only=True)
        return FeatureMaps(maps=list(inters))


class TorchvisionCNNBackbone(Backbone):
    """A torchvision CNN read stage by stage: ResNets' stem and layer1..4, or each block of `features`."""

    pooling_modes = ("avg",)
    channels_last = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stages = _torchvision_stages(self.model)
        self.num_layers = len(self.stages)

    def feature_maps(self, images: torch.Tensor, layers: list[int]) -> FeatureMaps:
        maps, x = [], images
        for index, stage in enumerate(self.stages[: layers[-1] + 1]):
            x = stage(x)
            if index in layers:
                maps.append(x)
        return FeatureMaps(maps=maps)


def _torchvision_stages(model: nn.Module) -> list[nn.Module]:
    if all(hasattr(model, f"layer{i}") for i in range(1, 5)):
        stem = nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
        return [stem, model.layer1, model.layer2, model.layer3, model.layer4]
    if isinstance(getattr(model, "features", None), nn.Sequential):
        return list(model.features)
    raise BackboneError(f"torchvision's {type(model).__name__} has no stage map here (ResNets and `features` "
                        "CNNs do); name its timm counterpart instead (timm:<model>.<tag>)")


def build(name: str, entry: LockEntry, request: WeightsRequest) -> Backbone:
    """The backbone of a lock entry, from the pinned file (or a seeded random init for `@random`)."""
    spec = Spec.parse(entry.spec)
    preprocess = entry.preprocessing()
    architecture = {"family": spec.family, "model": spec.model, "spec": entry.spec}
    pooling = entry.meta.get("pooling")
    if request.random:
        torch.manual_seed(request.seed)
        model = _BUILDERS[spec.family](spec, None, preprocess)
        weights = random_weights(model, request, init=f"{entry.meta.get('library', spec.family)} defaults")
    else:
        local = None if request.checkpoint else _locked_file(spec, entry)
        try:
            path, weights = resolve_pinned_file(entry.weights_pin(), request, local_file=local,
                                                formats=("safetensors", "torch-state-dict"))
        except WeightsUnavailableError as error:
            if request.checkpoint:
                raise
            raise WeightsUnavailableError(f"{error}; or, to take this file as {name}'s pin from now on, "
                                          f"`visbench-harness pin backbone={entry.spec}`") from None
        model = _BUILDERS[spec.family](spec, path, preprocess)
    if spec.family == "open_clip":
        from harness.backbones.openclip_models import OpenClipViTBackbone

        return OpenClipViTBackbone(request.name, model, preprocess, weights, architecture, request.precision)
    if spec.family == "torchvision":
        model = model.to(memory_format=torch.channels_last)
        return TorchvisionCNNBackbone(request.name, model, preprocess, weights, architecture, request.precision)
    return TimmAnyBackbone(request.name, model, preprocess, weights, architecture, request.precision,
                           pooling=pooling)


def _locked_file(spec: Spec, entry: LockEntry) -> Path:
    """The pinned file in the local cache, at the locked revision; one line naming the fix when it is not."""
    pinned = entry.weights_pin()
    if spec.family == "torchvision":
        return _torchvision_file(pinned.location, spec)
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(pinned.location, pinned.filename, revision=pinned.revision,
                                    local_files_only=True))
    except Exception:
        raise WeightsUnavailableError(
            f"{spec.text}: {pinned.filename} of {pinned.location} at revision {pinned.revision} (backbones.lock) "
            f"is not in the Hugging Face cache; `hf download {pinned.location} {pinned.filename} --revision "
            f"{pinned.revision}` where the hub is reachable, and copy the cache (HF_HOME) here") from None


def _build_timm(spec: Spec, path: Path | None, preprocess: Preprocess) -> nn.Module:
    import timm

    kwargs: dict[str, Any] = {"num_classes": 0}
    cfg = timm.models.get_pretrained_cfg(f"{spec.model}.{spec.tag}")
    if cfg is not None and cfg.input_size[-1] != preprocess.crop:  # a locked input size other than the tag's
        kwargs["img_size"] = preprocess.crop
    if path is None:
        return timm.create_model(spec.model, pretrained=False, **kwargs)
    try:
        return timm.create_model(f"{spec.model}.{spec.tag}", pretrained=True,
                                 pretrained_cfg_overlay={"file": str(path)}, **kwargs)
    except Exception as error:
        raise unloadable_checkpoint(path, spec.text, f"timm's {spec.model} state dict", error) from None


def _build_open_clip(spec: Spec, path: Path | None, preprocess: Preprocess) -> nn.Module:
    import open_clip

    try:
        model = open_clip.create_model(spec.model, pretrained=None if path is None else str(path))
    except Exception as error:
        raise unloadable_checkpoint(Path(str(path)), spec.text, f"open_clip's {spec.model} state dict",
                                    error) from None
    if not hasattr(model.visual, "transformer"):
        raise BackboneError(f"{spec.text}: its vision tower is {type(model.visual).__name__}, not open_clip's "
                            "VisionTransformer; name the timm model it wraps (timm:<model>.<tag>) instead")
    return model.visual


def _build_torchvision(spec: Spec, path: Path | None, preprocess: Preprocess) -> nn.Module:
    from torchvision.models import get_model, get_weight, list_models
    from torchvision.models import get_model_weights as weights_of

    enum = type(get_weight(f"{spec.model}.{spec.tag}"))
    names = [n for n in list_models() if weights_of(n) is enum]
    model = get_model(names[0], weights=None)
    if path is not None:
        try:
            model.load_state_dict(load_state_dict_file(path))
        except Exception as error:
            raise unloadable_checkpoint(path, spec.text, f"torchvision's {names[0]} state dict", error) from None
    return model


_BUILDERS = {"timm": _build_timm, "open_clip": _build_open_clip, "torchvision": _build_torchvision}


# -- registration ----------------------------------------------------------------------------------------------

def _register(name: str, entry: LockEntry) -> None:
    """Register a locked name to build `entry`; a re-pin registers it again (same module, so allowed), with the
    new entry's file and preprocessing."""
    register_backbone(name, weights="hub", preprocess=entry.preprocessing(), module=__name__, pin=entry.weights_pin())(
        lambda request, _n=name, _e=entry: build(_n, _e, request))


for _locked_name, _locked_entry in read_lock().items():
    _register(_locked_name, _locked_entry)
