"""Backbones: one registry, one `extract_features` interface for ViTs and CNNs.

Importing this package registers nothing and imports no model library: `create_backbone` and
`list_backbones` import the family modules of this package (and their heavy libraries only when one of
their backbones is built). A DVC extract stage imports just the one family module it names. Your own
module registers a backbone with `harness.backbones.custom.register_custom_backbone` (docs/extend.md).
"""

from harness.backbones.base import Backbone, BackboneError, FeatureMaps, WeightsUnavailableError
from harness.backbones.registry import (
    BACKBONES,
    backbone_entry,
    create_backbone,
    describe_weights,
    list_backbones,
    parse_backbone_name,
    register_backbone,
)

__all__ = [
    "BACKBONES",
    "Backbone",
    "BackboneError",
    "FeatureMaps",
    "WeightsUnavailableError",
    "backbone_entry",
    "create_backbone",
    "describe_weights",
    "list_backbones",
    "parse_backbone_name",
    "register_backbone",
]
