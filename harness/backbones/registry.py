"""The backbone registry: `name` → pretrained weights, `name@random` → a seeded random-init control."""

from __future__ import annotations

from collections.abc import Callable

from harness.backbones.base import Backbone, BackboneError
from harness.backbones.weights import WeightsRequest
from harness.registry import Registry, unknown_name_message

BACKBONES: Registry[Backbone] = Registry("backbone")
CONTROL_SUFFIX = "@random"


def register_backbone(name: str) -> Callable:
    return BACKBONES.register(name)


def parse_backbone_name(name: str) -> tuple[str, bool]:
    """`resnet18` → ("resnet18", False); `resnet18@random` → ("resnet18", True)."""
    arch, sep, variant = name.partition("@")
    if sep and variant != "random":
        raise BackboneError(f"unknown weights variant {variant!r} in {name!r}; the only variant is @random")
    if arch not in BACKBONES:
        raise BackboneError(unknown_name_message("backbone", name, list_backbones()))
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
    return [n for arch in BACKBONES.names() for n in (arch, arch + CONTROL_SUFFIX)]
