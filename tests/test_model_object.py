"""A model object is a backbone: `harness.run(CustomBackbone(...), ...)` runs your own `nn.Module` as the registered
name its state dict, preprocessing and code derive, never its Python id or the name typed for it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

import harness
from harness.backbones import create_backbone
from harness.backbones.custom import MODULE_NAME_PREFIX, CustomBackbone, register_module_backbone
from harness.core.config import ConfigError
from harness.core.hashing import hash_state_dict
from harness.core.preprocessing import Preprocess

PREPROCESS = Preprocess(crop=16, resize=16, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))


def tiny_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU())


def deepest_map(module: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    return [module(images)]


def wrapped(module: nn.Module, label: str = "my_net") -> CustomBackbone:
    return CustomBackbone(label, module, PREPROCESS, forward_maps=deepest_map)


def test_a_wrapped_module_runs_end_to_end_and_its_record_says_what_it_is(image_project):
    module = tiny_net()
    result = harness.run(wrapped(module), "classification", "tiny", epochs=5)
    record = result.record
    assert record.status == "ok" and 0.0 <= result.metrics["top1"] <= 1.0
    assert record.backbone.name.startswith(MODULE_NAME_PREFIX) and len(record.backbone.name) == len("custom_") + 12
    assert record.backbone.weights == {"kind": "custom", "state_sha256": hash_state_dict(module.state_dict())}
    assert record.backbone.control is False
    assert record.backbone.architecture["code"]["features"].startswith(f"{__name__}.deepest_map@sha256:")
    assert record.backbone.preprocess["crop"] == 16
    assert result.record_path.is_file() and result.record_path.is_relative_to(Path("user"))


def test_the_same_module_twice_is_one_backbone_with_one_cache(image_project):
    first = harness.run(wrapped(tiny_net(), "first"), "classification", "tiny", epochs=5)
    features = Path("user/features/tiny") / first.record.backbone.name / "tiny" / "entries"
    entries = sorted(features.rglob("*"))
    again = harness.run(wrapped(copy.deepcopy(tiny_net()), "second"), "classification", "tiny", epochs=5)
    assert again.record.backbone.name == first.record.backbone.name  # the typed label is not the identity
    assert again.record.backbone.identity == first.record.backbone.identity
    assert again.metrics == first.metrics
    assert entries and sorted(features.rglob("*")) == entries  # read from the cache, nothing new written


def test_a_changed_weight_is_another_backbone():
    module = tiny_net()
    name = register_module_backbone(wrapped(module))
    assert register_module_backbone(wrapped(copy.deepcopy(module))) == name
    changed = copy.deepcopy(module)
    with torch.no_grad():
        changed[0].weight[0, 0, 0, 0] += 1e-3
    other = register_module_backbone(wrapped(changed))
    assert other != name
    assert create_backbone(other).identity != create_backbone(name).identity
    # the registered backbone is the module as it was: training the user's module afterwards changes nothing there
    before = create_backbone(name).identity
    with torch.no_grad():
        module[0].bias.zero_()
    assert create_backbone(name).identity == before and register_module_backbone(wrapped(module)) != name


def test_the_declared_preprocessing_and_feature_function_are_part_of_the_identity():
    module = tiny_net()
    name = register_module_backbone(wrapped(module))
    resized = Preprocess(crop=24, resize=24, mean=PREPROCESS.mean, std=PREPROCESS.std)
    assert register_module_backbone(CustomBackbone("my_net", module, resized, deepest_map)) != name

    def pooled_map(module: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
        return [nn.functional.avg_pool2d(module(images), 2)]

    assert register_module_backbone(CustomBackbone("my_net", module, PREPROCESS, pooled_map)) != name


def test_a_bare_module_is_refused_before_any_work_naming_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as refused:
        harness.run(tiny_net(), "classification", "tiny")
    message = str(refused.value)
    assert "\n" not in message and "bare Sequential module" in message and "CustomBackbone(" in message
    assert not any(tmp_path.iterdir())  # no workspace, no data prepared
