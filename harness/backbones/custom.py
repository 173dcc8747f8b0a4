"""Your own `nn.Module` as a backbone: wrap it in Python (`CustomBackbone`, which `harness.run` takes in place of
a name: `register_module_backbone`), or register it from a plugin module listed under `plugins:` in params.yaml
(`register_custom_backbone`, see docs/extend.md).

A registered module without weights is a random-init control only (`NAME@random`, never ranked): the
harness never calls an untrained module "pretrained". With `weights=` it runs on that file, pinned by the
file's SHA-256 like every built-in backbone, as `kind: checkpoint`: a file of your own is not a published
release, and boards and pages say so ("not the published weights").
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import sys
import types
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
from harness.core.hashing import hash_json, hash_state_dict
from harness.core.preprocessing import IMAGENET_MEAN, IMAGENET_STD, Preprocess

ForwardMaps = Callable[[nn.Module, torch.Tensor], Sequence[torch.Tensor]]
MODULE_NAME_PREFIX = "custom_"  # + 12 hex of what the module computes: `register_module_backbone`


def _single_map(module: nn.Module, images: torch.Tensor) -> Sequence[torch.Tensor]:
    return [module(images)]


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
        *,
        code: dict[str, Any] | None = None,
    ) -> None:
        """`code`, when given, enters the architecture (so the identity): fingerprints of the user's code that
        computes the features, which the state dict does not capture (`register_module_backbone`)."""
        self._fixed_weights = weights is not None
        weights = weights or {"kind": "custom", "state_sha256": hash_state_dict(model.state_dict())}
        architecture = {"family": "custom", "class": f"{type(model).__module__}.{type(model).__qualname__}"}
        if code is not None:
            architecture["code"] = code
        super().__init__(name, model, preprocess, weights, architecture, precision)
        self._forward_maps = forward_maps or _single_map
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
    pin = None if weights is None else WeightsPin("file", str(weights), Path(str(weights)).name, "local", sha256)

    def construct(request: WeightsRequest) -> Backbone:
        torch.manual_seed(request.seed)  # the control's init is a function of the seed
        model = build()
        if request.random:
            identity = random_weights(model, request, init=f"{type(model).__qualname__} defaults")
        else:
            path, pinned = resolve_pinned_file(pin, replace(request, checkpoint=request.checkpoint or weights))
            model.load_state_dict(load_state_dict_file(path), strict=True)
            # the plugin's own file, pinned by its author: a checkpoint, never a published release
            identity = {"kind": "checkpoint", "file_sha256": pinned["file_sha256"], "filename": path.name,
                        "format": file_format(path), "pinned_by": "the plugin's sha256", "note": CHECKPOINT_NOTE}
        return CustomBackbone(request.name, model, preprocess, forward, num_layers, request.precision, identity)

    # the plugin that called us is the code DVC stages using `name` depend on, not this module
    caller = sys._getframe(1).f_globals.get("__name__")
    register_backbone(name, weights="custom", pretrained=weights is not None, module=caller,
                      preprocess=preprocess, pin=pin)(construct)


def register_module_backbone(backbone: CustomBackbone) -> str:
    """Register a wrapped module as the backbone `custom_<12 hex>` and return that name, which then runs as every
    registered name does (`harness.run(backbone, ...)` calls this, in the process that extracts).

    The name and the identity are derived from what computes the features, never from the wrapper's name or
    the Python object: the state dict's SHA-256, the declared preprocessing, the number of layers and
    fingerprints of the module's class and the feature function. The same module wrapped twice gets the same
    name (so the same feature cache entries); a changed weight gets another. The module is copied as it is
    now: training it further changes nothing registered here; running it again registers the new weights.
    """
    snapshot = copy.deepcopy(backbone.model)
    weights = {"kind": "custom", "state_sha256": hash_state_dict(snapshot.state_dict())}
    code = {"module": code_fingerprint(type(snapshot)), "features": code_fingerprint(backbone._forward_maps),
            "num_layers": backbone.num_layers}
    architecture = {**backbone.architecture, "code": code}
    name = MODULE_NAME_PREFIX + hash_json(
        {"architecture": architecture, "weights": weights, "preprocess": backbone.preprocess.spec()}, length=12)
    forward, preprocess, num_layers = backbone._forward_maps, backbone.preprocess, backbone.num_layers

    def construct(request: WeightsRequest) -> Backbone:
        if request.checkpoint:
            raise BackboneError(f"{request.name} is a module object's backbone: its weights are the module's, "
                                "it takes no checkpoint")
        # a copy per build: moving it to a device or a precision never touches the registered snapshot
        return CustomBackbone(request.name, copy.deepcopy(snapshot), preprocess, forward, num_layers,
                              request.precision, weights, code=code)

    # this module is its code for the extract stage's `load_code`; a module object has no random-init control
    register_backbone(name, weights="custom", pretrained=True, random_control=False, module=__name__,
                      preprocess=preprocess)(construct)
    return name


def code_fingerprint(code: Callable | type) -> str:
    """What a function or class that computes features is, for an identity: `module.qualname`, and for the
    user's own code (not the harness's or torch's, which their versions pin) the SHA-256 of its source, or of
    its bytecode where Python keeps no source (a notebook cell, exec)."""
    module = getattr(code, "__module__", None) or type(code).__module__
    named = f"{module}.{getattr(code, '__qualname__', type(code).__qualname__)}"
    if module.partition(".")[0] in ("harness", "torch"):
        return named
    try:
        text = inspect.getsource(code).encode()
    except (OSError, TypeError):
        text = _bytecode(code)
    return f"{named}@sha256:{hashlib.sha256(text).hexdigest()[:16]}"


def _bytecode(code: Callable | type) -> bytes:
    """The bytecode of a function, of a class's own functions, or of a callable object's `__call__`."""
    if isinstance(code, type):
        members = [vars(code)[key] for key in sorted(vars(code))]
    else:
        members = [getattr(code, "__func__", code)]
        if not hasattr(members[0], "__code__"):
            members = [type(code).__call__]  # a callable object: its class's method
    parts = [_code_bytes(m.__code__) for m in members if hasattr(m, "__code__")]
    return b"\0".join(parts)


def _code_bytes(code: types.CodeType) -> bytes:
    constants = [_code_bytes(c) if isinstance(c, types.CodeType) else repr(c).encode() for c in code.co_consts]
    return b"|".join([code.co_code, repr(code.co_names).encode(), *constants])
