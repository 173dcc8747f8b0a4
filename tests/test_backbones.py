"""Backbones: real weights classify correctly, every family honours `extract_features`, identities are
derived from everything that changes features, and missing or wrong weights are refused, never replaced."""

from __future__ import annotations

import copy
import functools
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from harness.backbones import (
    Backbone,
    BackboneError,
    WeightsUnavailableError,
    create_backbone,
    list_backbones,
)
from harness.backbones.cifar_resnet import _CHECKPOINTS, WEIGHTS_DIR_ENV
from harness.backbones.custom import CustomBackbone
from harness.backbones.timm_models import TIMM_PINS
from harness.backbones.weights import WeightsPin
from harness.core.preprocessing import Preprocess

REPO = Path(__file__).resolve().parents[1]
CIFAR_WEIGHTS = REPO.parent / "shared" / "weights" / "resnet_cifar10"
CIFAR_TEST_JPEG = REPO.parent / "shared" / "data" / "cifar10-test-jpeg"
RESNET20_FILE, RESNET20_SHA256 = _CHECKPOINTS[20]
needs_cifar_weights = pytest.mark.skipif(
    not (CIFAR_WEIGHTS / RESNET20_FILE).is_file(), reason=f"{CIFAR_WEIGHTS / RESNET20_FILE} absent"
)

# One random control per family; clip_vitb32 stands for open_clip (ViT-B/16 takes ~5 s to build).
CONTROLS = [
    "efficientnet_lite0@random",
    "resnet18@random",
    "dinov2_vits14@random",
    "clip_vitb32@random",
    "cifar_resnet20@random",
]


@functools.cache
def built(name: str) -> Backbone:
    """A shared, read-only instance per name (building some of these takes seconds)."""
    return create_backbone(name)


@functools.cache
def images_for(name: str) -> torch.Tensor:
    crop = built(name).preprocess.crop
    return torch.randn(2, 3, crop, crop, generator=torch.Generator().manual_seed(0))


@functools.cache
def features(name: str, pooling: str = "default", layers: tuple[int, ...] | None = None) -> dict:
    """Memoised: each distinct request runs one forward pass per session (ViT forwards cost ~1 s on CPU)."""
    return built(name).extract_features(images_for(name), pooling, None if layers is None else list(layers))


# -- real pretrained weights ---------------------------------------------------------------------


def test_efficientnet_lite0_pretrained_classifies_coffee_as_espresso():
    import skimage.data

    backbone = built("efficientnet_lite0")
    assert backbone.weights["kind"] == "pretrained" and backbone.is_control is False
    pixels = backbone.preprocess(Image.fromarray(skimage.data.coffee()))
    assert tuple(pixels.shape) == (3, 224, 224)
    logits = backbone.classify(pixels[None])
    assert logits.shape == (1, 1000)
    assert int(logits.argmax()) == 967  # ImageNet "espresso"


# -- every family: shapes, pooling modes, layers, errors -----------------------------------------


@pytest.mark.parametrize("name", CONTROLS)
def test_extract_features_shapes(name):
    backbone = built(name)
    out = features(name)
    dense, pooled = out["dense"], out["pooled"]
    assert dense.ndim == 4 and dense.shape[0] == 2
    assert pooled.ndim == 2 and pooled.shape[0] == 2
    assert out["grid_hw"] == tuple(dense.shape[-2:])
    assert out["pooling"] == backbone.pooling_modes[0]
    assert dense.dtype == torch.float32 and pooled.dtype == torch.float32
    assert torch.isfinite(dense).all() and torch.isfinite(pooled).all()
    # the two images differ, so must their features (relative test: efficientnet_lite0@random's
    # activations shrink to ~1e-8 through its blocks, which is the control's nature, not an error)
    assert not torch.allclose(pooled[0], pooled[1], rtol=1e-3, atol=0.0)


@pytest.mark.parametrize("name", CONTROLS)
def test_every_pooling_mode(name):
    """Each mode on layer 0 (a cheap early-stopped forward), except CLIP's `proj`, which needs the last."""
    backbone = built(name)
    dense = features(name, "default", (0,))["dense"]
    pooled = {}
    for mode in backbone.pooling_modes:
        out = features(name, mode, (-1,) if mode == "proj" else (0,))
        assert out["pooling"] == mode
        assert out["pooled"].shape[0] == 2 and out["pooled"].ndim == 2
        assert torch.isfinite(out["pooled"]).all()
        pooled[mode] = out["pooled"]
        if mode == "proj":
            assert out["pooled"].shape[1] == backbone.model.proj.shape[1]
            continue
        torch.testing.assert_close(out["dense"], dense)  # pooling never changes the dense map
        if mode in ("avg", "mean"):
            torch.testing.assert_close(out["pooled"], dense.mean(dim=(2, 3)))
    torch.testing.assert_close(features(name, "default", (0,))["pooled"], pooled[backbone.pooling_modes[0]])
    if "cls" in pooled and "mean" in pooled:  # distinct modes must give distinct features
        assert pooled["cls"].shape == pooled["mean"].shape
        assert not torch.allclose(pooled["cls"], pooled["mean"])


@pytest.mark.parametrize("name", CONTROLS)
def test_two_layers_concatenate_channels(name):
    backbone = built(name)
    last = features(name)["dense"]
    first = features(name, "default", (0,))["dense"]
    both = features(name, "default", (0, -1))
    dense = both["dense"]
    assert dense.shape[1] == first.shape[1] + last.shape[1]
    assert both["grid_hw"] == tuple(last.shape[-2:]) == tuple(dense.shape[-2:])
    # order is shallow then deep; the shallow map is resized to the deep layer's grid
    torch.testing.assert_close(dense[:, first.shape[1]:], last)
    expected_first = first if first.shape[-2:] == last.shape[-2:] else F.interpolate(
        first, tuple(last.shape[-2:]), mode="bilinear"
    )
    torch.testing.assert_close(dense[:, : first.shape[1]], expected_first, rtol=1e-4, atol=1e-4)
    if both["pooling"] in ("avg", "mean"):  # pooled from the concatenation
        torch.testing.assert_close(both["pooled"], dense.mean(dim=(2, 3)))
    # negative and positive spellings of the same layers are the same request
    assert backbone.resolve_layers([0, -1]) == backbone.resolve_layers([backbone.num_layers - 1, 0])


@pytest.mark.parametrize("name", CONTROLS)
def test_bad_layer_and_unknown_pooling_name_the_valid_ones(name):
    backbone = built(name)
    x = images_for(name)
    n = backbone.num_layers
    for bad in (n, -n - 1):
        with pytest.raises(BackboneError) as error:
            backbone.extract_features(x, layers=[bad])
        assert f"0..{n - 1}" in str(error.value) and f"-{n}..-1" in str(error.value)
        assert str(bad) in str(error.value)
    with pytest.raises(BackboneError) as error:
        backbone.extract_features(x, pooling="bogus")
    message = str(error.value)
    assert "bogus" in message
    for mode in ("default", *backbone.pooling_modes):
        assert mode in message


def test_clip_proj_pooling_needs_the_last_layer():
    backbone = built("clip_vitb32@random")
    x = images_for("clip_vitb32@random")
    with pytest.raises(BackboneError, match="proj"):
        backbone.extract_features(x, pooling="proj", layers=[0])


# -- identity ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cifar_resnet20@random", "efficientnet_lite0@random"])
def test_random_control_identity(name):
    a, b = create_backbone(name, seed=0), create_backbone(name, seed=0)
    other = create_backbone(name, seed=1)
    assert a.identity == b.identity
    assert a.weights["state_sha256"] == b.weights["state_sha256"]
    assert other.identity != a.identity
    # a different seed must give different parameters, not merely a different label
    assert other.weights["state_sha256"] != a.weights["state_sha256"]
    for backbone, seed in ((a, 0), (other, 1)):
        assert backbone.weights["kind"] == "random"
        assert backbone.weights["seed"] == seed
        assert backbone.is_control is True
        assert backbone.describe()["control"] is True
        assert backbone.describe()["identity"] == backbone.identity


def test_random_control_identity_differs_from_pretrained():
    pretrained, control = built("efficientnet_lite0"), built("efficientnet_lite0@random")
    assert pretrained.identity != control.identity
    assert pretrained.describe()["control"] is False


def test_precision_is_part_of_identity_and_features_stay_float32():
    fp32 = create_backbone("cifar_resnet20@random")
    bf16 = create_backbone("cifar_resnet20@random", precision="bf16")
    assert bf16.precision == "bf16"
    assert bf16.identity != fp32.identity
    assert next(bf16.model.parameters()).dtype == torch.bfloat16
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    out, ref = bf16.extract_features(x), fp32.extract_features(x)
    assert out["dense"].dtype == torch.float32 and out["pooled"].dtype == torch.float32
    torch.testing.assert_close(out["pooled"], ref["pooled"], rtol=0.1, atol=0.1)
    with pytest.raises(BackboneError, match="fp32"):
        create_backbone("cifar_resnet20@random", precision="fp16")


def test_preprocessing_is_part_of_identity():
    backbone = create_backbone("cifar_resnet20@random")
    before, spec_before = backbone.identity, backbone.identity_spec()
    backbone.preprocess = replace(backbone.preprocess, interpolation="bicubic")
    assert backbone.identity != before
    assert backbone.identity_spec()["preprocess"] != spec_before["preprocess"]
    # every field of the preprocessing counts, not only some
    base = Preprocess(crop=32, resize=36, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    variants = [base, replace(base, crop=30), replace(base, resize=40), replace(base, mean=(0.4, 0.5, 0.5)),
                replace(base, std=(0.2, 0.25, 0.25)), replace(base, interpolation="bilinear")]
    model = nn.Conv2d(3, 4, 1)
    identities = {CustomBackbone("tiny", model, p).identity for p in variants}
    assert len(identities) == len(variants)


# -- CIFAR ResNet with the real checkpoint ------------------------------------------------------


@needs_cifar_weights
def test_cifar_resnet20_checkpoint_loads_and_is_pinned(monkeypatch):
    monkeypatch.setenv(WEIGHTS_DIR_ENV, str(CIFAR_WEIGHTS))
    backbone = create_backbone("cifar_resnet20")
    assert backbone.weights["kind"] == "pretrained"
    assert backbone.weights["file_sha256"] == RESNET20_SHA256
    assert backbone.is_control is False
    assert backbone.identity != create_backbone("cifar_resnet20@random").identity
    explicit = create_backbone("cifar_resnet20", checkpoint=str(CIFAR_WEIGHTS / RESNET20_FILE))
    assert explicit.identity == backbone.identity


@needs_cifar_weights
@pytest.mark.skipif(not CIFAR_TEST_JPEG.is_dir(), reason=f"{CIFAR_TEST_JPEG} absent")
def test_cifar_resnet20_checkpoint_classifies_cifar(monkeypatch):
    """The loaded weights are the trained ones: its own head is far above chance (SOURCE.md: 0.81)."""
    monkeypatch.setenv(WEIGHTS_DIR_ENV, str(CIFAR_WEIGHTS))
    backbone = create_backbone("cifar_resnet20")
    classes = sorted(p.name for p in CIFAR_TEST_JPEG.iterdir() if p.is_dir())
    assert len(classes) == 10
    pixels, labels = [], []
    for label, name in enumerate(classes):  # alphabetical order is CIFAR-10's class order
        for path in sorted((CIFAR_TEST_JPEG / name).iterdir())[:10]:
            with Image.open(path) as image:
                pixels.append(backbone.preprocess(image))
            labels.append(label)
    with torch.inference_mode():
        predictions = backbone.model(torch.stack(pixels)).argmax(dim=1).numpy()
    assert (predictions == np.array(labels)).mean() >= 0.65


@needs_cifar_weights
def test_cifar_resnet20_changed_checkpoint_is_its_own_identity_never_the_pin(tmp_path):
    """A file passed as checkpoint= that is not the pinned release (here one bit flipped in a tensor) runs as what it
    is: `kind: checkpoint` with its own SHA-256 and the pin it is not, never labelled pretrained."""
    tampered = tmp_path / RESNET20_FILE
    shutil.copyfile(CIFAR_WEIGHTS / RESNET20_FILE, tampered)
    data = bytearray(tampered.read_bytes())
    data[len(data) // 2] ^= 0x01
    tampered.write_bytes(bytes(data))
    mine = create_backbone("cifar_resnet20", checkpoint=str(tampered))
    published = create_backbone("cifar_resnet20", checkpoint=str(CIFAR_WEIGHTS / RESNET20_FILE))
    assert mine.weights["kind"] == "checkpoint" and published.weights["kind"] == "pretrained"
    assert mine.weights["published_pin"]["sha256"] == RESNET20_SHA256 != mine.weights["file_sha256"]
    assert mine.weights["note"] == "not the published weights" and mine.identity != published.identity


def test_cifar_resnet_missing_checkpoint_says_where_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv(WEIGHTS_DIR_ENV, str(tmp_path))
    with pytest.raises(WeightsUnavailableError) as error:
        create_backbone("cifar_resnet20")
    message = str(error.value)
    assert RESNET20_FILE in message and "https://" in message
    assert WEIGHTS_DIR_ENV in message and "`checkpoints: {cifar_resnet20: PATH}` in params.yaml" in message


# -- pretrained weights that are not here ---------------------------------------------------------


def _expected_url(name: str) -> str:
    if name in TIMM_PINS:
        return WeightsPin(**TIMM_PINS[name]["pin"]).url
    from harness.backbones.openclip_models import _MODELS, _OPENAI

    _, filename, sha256 = _MODELS[name]
    return _OPENAI.format(sha=sha256, file=filename)


@pytest.mark.parametrize("name", ["dinov2_vits14", "resnet18", "clip_vitb16"])
def test_pretrained_hub_backbone_without_weights_is_refused_with_instructions(name):
    with pytest.raises(WeightsUnavailableError) as error:
        create_backbone(name)
    message = str(error.value)
    assert _expected_url(name) in message
    assert f"`checkpoints: {{{name}: PATH}}` in params.yaml" in message  # what the CLI reads; it takes no checkpoint=


@pytest.mark.parametrize("name", ["resnet18", "efficientnet_lite0", "clip_vitb16"])
def test_nonexistent_checkpoint_is_refused(name, tmp_path):
    missing = tmp_path / "nope.safetensors"
    with pytest.raises(WeightsUnavailableError, match="not found"):
        create_backbone(name, checkpoint=str(missing))


def test_a_file_that_is_no_weights_file_is_refused_in_one_line(tmp_path):
    wrong = tmp_path / "model.safetensors"
    wrong.write_bytes(b"not the pinned weights")
    with pytest.raises(BackboneError, match="not a weights file") as error:
        create_backbone("resnet18", checkpoint=str(wrong))
    assert "\n" not in str(error.value)


def test_random_control_takes_no_checkpoint(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"x")
    with pytest.raises(BackboneError, match="takes no checkpoint"):
        create_backbone("resnet18@random", checkpoint=str(path))


def test_unknown_backbone_lists_valid_names():
    with pytest.raises(BackboneError) as error:
        create_backbone("resnet19")
    message = str(error.value)
    assert "resnet19" in message and "Did you mean 'resnet18'" in message
    for valid in ("resnet18", "resnet18@random", "efficientnet_lite0@random", "clip_vitb32"):
        assert valid in message


def test_unknown_variant_is_refused():
    with pytest.raises(BackboneError) as error:
        create_backbone("resnet18@foo")
    assert "'foo'" in str(error.value) and "@random" in str(error.value)


def test_list_backbones_lists_exactly_the_names_that_construct():
    """Every architecture with weights and its @random control; fixed filters (sobel) have no control."""
    names = list_backbones()
    archs = [n for n in names if "@" not in n]
    assert {"efficientnet_lite0", "resnet18", "dinov2_vits14", "clip_vitb16", "cifar_resnet20", "sobel"} <= set(archs)
    assert sorted(names) == sorted(archs + [a + "@random" for a in archs if a != "sobel"])
    with pytest.raises(BackboneError, match="no @random control"):
        create_backbone("sobel@random")


# -- custom modules --------------------------------------------------------------------------------

TINY_PREPROCESS = Preprocess(crop=8, resize=8, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))


def _tiny_conv(seed: int = 0) -> nn.Conv2d:
    torch.manual_seed(seed)
    return nn.Conv2d(3, 4, 3, padding=1)


def test_custom_backbone_extracts_features():
    conv = _tiny_conv()
    backbone = CustomBackbone("tiny", conv, TINY_PREPROCESS)
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    out = backbone.extract_features(x)
    with torch.no_grad():
        expected = conv(x)
    torch.testing.assert_close(out["dense"], expected)
    torch.testing.assert_close(out["pooled"], expected.mean(dim=(2, 3)))
    assert out["grid_hw"] == (8, 8) and out["pooling"] == "avg"
    assert backbone.weights["kind"] == "custom" and backbone.is_control is False


def test_custom_backbone_several_layers():
    conv = _tiny_conv()
    pool = nn.AvgPool2d(2)

    def forward_maps(module, x):
        shallow = module(x)
        return [shallow, pool(shallow)]

    backbone = CustomBackbone("tiny2", conv, TINY_PREPROCESS, forward_maps=forward_maps, num_layers=2)
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    out = backbone.extract_features(x, layers=[0, -1])
    assert out["dense"].shape == (2, 8, 4, 4) and out["grid_hw"] == (4, 4)
    with pytest.raises(BackboneError, match=r"0\.\.1"):
        backbone.extract_features(x, layers=[2])


def test_custom_backbone_identity_follows_the_weights():
    conv = _tiny_conv()
    same = copy.deepcopy(conv)
    changed = copy.deepcopy(conv)
    with torch.no_grad():
        changed.weight[0, 0, 0, 0] += 1.0
    identity = CustomBackbone("tiny", conv, TINY_PREPROCESS).identity
    assert CustomBackbone("tiny", same, TINY_PREPROCESS).identity == identity
    assert CustomBackbone("tiny", changed, TINY_PREPROCESS).identity != identity
    assert CustomBackbone("tiny", same, TINY_PREPROCESS, precision="bf16").identity != identity


def test_custom_backbone_identity_follows_weights_changed_after_wrapping():
    """The user keeps a reference to the module they wrapped and may change it afterwards (train on,
    `load_state_dict`). Either the wrapper is unaffected (it holds its own copy) or its identity, and so
    every feature-cache key, must change with it: equal identities must mean equal features."""
    conv = _tiny_conv()
    backbone = CustomBackbone("tiny", conv, TINY_PREPROCESS)
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    before_identity, before_features = backbone.identity, backbone.extract_features(x)["dense"]
    with torch.no_grad():
        conv.weight[0, 0, 0, 0] += 1.0
    features_changed = not torch.equal(backbone.extract_features(x)["dense"], before_features)
    assert not (features_changed and backbone.identity == before_identity), (
        "features changed but the identity did not: cached features of the old weights would be served"
    )


def test_named_layer_sets_resolve_per_backbone_by_stride():
    """`stride16` is each backbone's own deepest layer of stride ≤ 16: one grid asks every backbone for it."""
    lite0 = create_backbone("efficientnet_lite0@random")
    assert lite0.layer_strides() == [2, 4, 8, 16, 16, 32, 32, 32]
    assert lite0.resolve_layers("stride16") == [4] and lite0.resolve_layers("last") == [7]
    resnet = create_backbone("cifar_resnet20@random")
    assert resnet.layer_strides() == [1, 2, 4] and resnet.resolve_layers("stride2") == [1]
    with pytest.raises(BackboneError, match=r"no layer set 'stride16'.*stride1, stride2, stride4"):
        resnet.resolve_layers("stride16")
    features = lite0.extract_features(torch.zeros(1, 3, 224, 224), layers=lite0.resolve_layers("stride16"))
    assert features["grid_hw"] == (14, 14)


def test_a_plugins_own_weights_run_as_its_checkpoint_never_as_published_weights(tmp_path, monkeypatch):
    """A plugin registers a module with a weights file pinned by its sha256: a file of the user's own, so
    `kind: checkpoint` (rows say "not the published weights"); another file at that path is refused."""
    from harness.backbones.custom import register_custom_backbone
    from harness.core.hashing import sha256_file

    monkeypatch.chdir(tmp_path)
    torch.save(_tiny_conv().state_dict(), tmp_path / "tiny.pt")
    register_custom_backbone("tiny_with_weights_for_test", _tiny_conv, input_size=8, weights="tiny.pt",
                             sha256=sha256_file(tmp_path / "tiny.pt"))
    backbone = create_backbone("tiny_with_weights_for_test")
    assert backbone.weights == {"kind": "checkpoint", "file_sha256": sha256_file(tmp_path / "tiny.pt"),
                                "filename": "tiny.pt", "format": "torch-state-dict",
                                "pinned_by": "the plugin's sha256", "note": "not the published weights"}
    assert not backbone.is_control
    torch.save(_tiny_conv(seed=1).state_dict(), tmp_path / "tiny.pt")  # another file at the pinned path
    with pytest.raises(BackboneError, match="refusing to run on different weights"):
        create_backbone("tiny_with_weights_for_test")
