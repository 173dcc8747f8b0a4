"""Backbones: one registry, one `extract_features` interface for ViTs and CNNs.

Importing this package registers every built-in backbone; each family's module imports its heavy
library (timm, open_clip) only when one of its backbones is built.
"""

from harness.backbones import cifar_resnet, classical, efficientnet_lite, openclip_models, timm_models  # noqa: F401
from harness.backbones.base import Backbone, BackboneError, FeatureMaps, WeightsUnavailableError
from harness.backbones.custom import CustomBackbone
from harness.backbones.registry import BACKBONES, create_backbone, list_backbones, parse_backbone_name

__all__ = [
    "BACKBONES",
    "Backbone",
    "BackboneError",
    "CustomBackbone",
    "FeatureMaps",
    "WeightsUnavailableError",
    "create_backbone",
    "list_backbones",
    "parse_backbone_name",
]
