"""The pretrained-weight loaders, run for real and offline, on seeded random tensors in the upstream formats.

A Hugging Face hub cache in a temporary folder holds timm's `model.safetensors` for DINOv2 ViT-S/14 (at its native
518 px) and ResNet-18 at the pinned commits; CLIP's weights are OpenAI's TorchScript release format and open_clip's
state dict. The fixtures' SHA-256s cannot be the real pins, so the tests that mean "the published file" patch the
pin to the fixture's digest, and the others keep the real pin: a downloaded file that differs is refused, a
user's file that differs runs as `kind: checkpoint` under its own identity.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from hub_fixtures import (
    seeded_openai_clip,
    write_cifar_th,
    write_hub_file,
    write_openai_torchscript,
    write_timm_safetensors,
)

from harness.backbones import BackboneError, WeightsUnavailableError, create_backbone
from harness.backbones.cifar_resnet import _CHECKPOINTS, _RELEASE, WEIGHTS_DIR_ENV
from harness.backbones.openclip_models import _MODELS, _OPENAI
from harness.backbones.timm_models import TIMM_PINS
from harness.core.hashing import sha256_file

DINO, RESNET, CLIP = "dinov2_vits14", "resnet18", "clip_vitb32"
CLIP_CONFIG, CLIP_FILE, CLIP_SHA256 = _MODELS[CLIP]


class HubFile(NamedTuple):
    snapshot: Path  # where hf_hub_download finds it: hub/models--.../snapshots/<revision>/model.safetensors
    state: dict[str, torch.Tensor]  # the tensors written
    sha256: str


class ClipFiles(NamedTuple):
    torchscript: Path  # OpenAI's release format
    state_dict: Path  # open_clip's, the same tensors
    reference: torch.nn.Module  # the fixture model in float32 (float16 tensors widened exactly)


# -- fixtures: written once per session (ViT-B/32's archive is 354 MB) ------------------------------------------


@pytest.fixture(scope="session")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """HF_HUB_CACHE of the session: the DINOv2 and ResNet-18 fixtures at their pinned repos and commits."""
    return tmp_path_factory.mktemp("hf") / "hub"


def _hub_file(hub: Path, tmp_path_factory: pytest.TempPathFactory, name: str) -> HubFile:
    pin = TIMM_PINS[name]["pin"]
    written = tmp_path_factory.mktemp(name) / pin["filename"]
    state = write_timm_safetensors(TIMM_PINS[name]["timm_model"], written, seed=0)
    snapshot = write_hub_file(hub, pin["location"], pin["revision"], pin["filename"], written)
    written.unlink()
    return HubFile(snapshot, state, sha256_file(snapshot))


@pytest.fixture(scope="session")
def dinov2(hub: Path, tmp_path_factory: pytest.TempPathFactory) -> HubFile:
    return _hub_file(hub, tmp_path_factory, DINO)


@pytest.fixture(scope="session")
def resnet18(hub: Path, tmp_path_factory: pytest.TempPathFactory) -> HubFile:
    return _hub_file(hub, tmp_path_factory, RESNET)


@pytest.fixture(scope="session")
def clip_files(tmp_path_factory: pytest.TempPathFactory) -> ClipFiles:
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("clip")
    model = seeded_openai_clip(CLIP_CONFIG, seed=0)
    state = model.state_dict()
    write_openai_torchscript(state, folder / CLIP_FILE)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "open_clip_model.safetensors"))
    return ClipFiles(folder / CLIP_FILE, folder / "open_clip_model.safetensors", model.float().requires_grad_(False))


@pytest.fixture
def offline_hub(hub: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The session's hub cache as HF_HOME's, offline. huggingface_hub read HF_HUB_CACHE and HF_HUB_OFFLINE when
    conftest first imported it (an empty cache), so its constants are patched along with the environment."""
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HOME", str(hub.parent))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return hub


def _pin_to(monkeypatch: pytest.MonkeyPatch, name: str, sha256: str) -> None:
    """Make the fixture file `name`'s published one: the pin's SHA-256 becomes the fixture's digest."""
    monkeypatch.setitem(TIMM_PINS[name]["pin"], "sha256", sha256)


def _images(size: int, count: int = 2) -> torch.Tensor:
    return torch.randn(count, 3, size, size, generator=torch.Generator().manual_seed(0))


def _create_model_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Record the keyword arguments of every timm.create_model call, which still runs."""
    import timm

    calls: list[dict[str, Any]] = []
    real: Callable[..., torch.nn.Module] = timm.create_model

    def spy(name: str, *args: Any, **kwargs: Any) -> torch.nn.Module:
        calls.append({"model": name, **kwargs})
        return real(name, *args, **kwargs)

    monkeypatch.setattr(timm, "create_model", spy)
    return calls


def _one_line_backbone_error(error: pytest.ExceptionInfo[BaseException], *needles: str) -> str:
    message = str(error.value)
    assert "\n" not in message  # one line, and no chained traceback from deep inside a loader
    assert error.value.__cause__ is None and (error.value.__context__ is None or error.value.__suppress_context__)
    for needle in needles:
        assert needle in message, (needle, message)
    return message


# -- the hub cache fixture is what huggingface_hub reads ------------------------------------------------------


def test_the_fixture_hub_cache_resolves_through_huggingface_hub(offline_hub, dinov2):
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    pin = TIMM_PINS[DINO]["pin"]
    found = hf_hub_download(pin["location"], pin["filename"], revision=pin["revision"], local_files_only=True)
    assert Path(found) == dinov2.snapshot and dinov2.snapshot.is_symlink()
    assert dinov2.snapshot.resolve().parent.name == "blobs" and dinov2.snapshot.resolve().name == dinov2.sha256
    assert try_to_load_from_cache(pin["location"], pin["filename"], revision=pin["revision"]) == found
    # the branch resolves through refs/main too, offline
    assert hf_hub_download(pin["location"], pin["filename"], revision="main") == found


# -- DINOv2: hub download, pinned ------------------------------------------------------------------------------


def test_dinov2_loads_from_the_hub_cache_through_timm(offline_hub, dinov2, monkeypatch):
    from timm.layers import resample_abs_pos_embed

    _pin_to(monkeypatch, DINO, dinov2.sha256)
    calls = _create_model_calls(monkeypatch)
    backbone = create_backbone(DINO)
    pin = TIMM_PINS[DINO]["pin"]
    assert backbone.weights == {"kind": "pretrained", "source": "hf-hub", "location": pin["location"],
                                "revision": pin["revision"], "filename": "model.safetensors",
                                "file_sha256": dinov2.sha256}
    assert backbone.is_control is False
    # timm's own loader read the hub file (no other create_model call, no random init)
    assert calls == [{"model": "vit_small_patch14_dinov2", "pretrained": True,
                      "pretrained_cfg_overlay": {"file": str(dinov2.snapshot)}, "img_size": 224}]

    model, file = backbone.model, dinov2.state
    for key in ("patch_embed.proj.weight", "cls_token", "blocks.0.attn.qkv.weight", "blocks.11.mlp.fc2.bias",
                "norm.weight"):
        assert torch.equal(model.state_dict()[key], file[key]), key
    # the 518 px file's 37×37 position embedding, resampled to 224 px's 16×16 by timm's checkpoint filter
    assert file["pos_embed"].shape == (1, 1 + 37 * 37, 384) and model.pos_embed.shape == (1, 1 + 16 * 16, 384)
    resampled = resample_abs_pos_embed(file["pos_embed"], new_size=(16, 16), num_prefix_tokens=1,
                                       interpolation="bicubic", antialias=True)
    assert torch.equal(model.pos_embed, resampled)

    images = _images(224)
    out = backbone.extract_features(images)
    assert out["pooling"] == "cls" and out["grid_hw"] == (16, 16)
    assert out["dense"].shape == (2, 384, 16, 16) and out["pooled"].shape == (2, 384)
    assert torch.isfinite(out["dense"]).all() and torch.isfinite(out["pooled"]).all()
    again = backbone.extract_features(images)
    assert torch.equal(out["dense"], again["dense"]) and torch.equal(out["pooled"], again["pooled"])
    with torch.inference_mode():  # the class token and patch tokens after the final LayerNorm, by timm's forward
        tokens = model.forward_features(images)
    torch.testing.assert_close(out["pooled"], tokens[:, 0])
    torch.testing.assert_close(out["dense"], tokens[:, 1:].reshape(2, 16, 16, 384).permute(0, 3, 1, 2))
    mean = backbone.extract_features(images, pooling="mean")
    torch.testing.assert_close(mean["pooled"], out["dense"].mean(dim=(2, 3)))

    # the same file passed as checkpoint=PATH is the same published weights: the same block, the same identity
    explicit = create_backbone(DINO, checkpoint=str(dinov2.snapshot))
    assert explicit.weights == backbone.weights and explicit.identity == backbone.identity


def test_a_hub_file_that_differs_from_the_pin_is_refused(offline_hub, dinov2):
    pin = TIMM_PINS[DINO]["pin"]  # the real pin: the fixture is not the published file
    with pytest.raises(WeightsUnavailableError) as error:
        create_backbone(DINO)
    _one_line_backbone_error(error, str(dinov2.snapshot), dinov2.sha256, pin["sha256"], "refused",
                             f"hf download {pin['location']} model.safetensors --revision {pin['revision']} "
                             "--force-download", f"`checkpoints: {{{DINO}: PATH}}` in params.yaml")


def test_resnet18_loads_from_the_hub_cache(offline_hub, resnet18, monkeypatch):
    _pin_to(monkeypatch, RESNET, resnet18.sha256)
    backbone = create_backbone(RESNET)
    assert backbone.weights["kind"] == "pretrained" and backbone.weights["file_sha256"] == resnet18.sha256
    assert backbone.weights["revision"] == TIMM_PINS[RESNET]["pin"]["revision"]
    loaded = backbone.model.state_dict()
    assert loaded.keys() == resnet18.state.keys()
    assert all(torch.equal(loaded[k], v) for k, v in resnet18.state.items())
    out = backbone.extract_features(_images(224))
    assert out["dense"].shape == (2, 512, 7, 7) and out["pooled"].shape == (2, 512)
    assert torch.isfinite(out["dense"]).all()
    torch.testing.assert_close(out["pooled"], out["dense"].mean(dim=(2, 3)))


# -- a user's own checkpoint -----------------------------------------------------------------------------------


def test_a_different_dinov2_file_is_its_own_checkpoint_identity(offline_hub, dinov2, tmp_path, monkeypatch):
    from safetensors.torch import save_file

    mine = tmp_path / "my_dinov2.safetensors"  # "fine-tuned": the fixture with one tensor changed
    state = dict(dinov2.state)
    state["blocks.11.mlp.fc2.bias"] = state["blocks.11.mlp.fc2.bias"] + 0.5
    save_file(state, str(mine))
    pin = TIMM_PINS[DINO]["pin"]

    own = create_backbone(DINO, checkpoint=str(mine))
    assert own.weights == {"kind": "checkpoint", "file_sha256": sha256_file(mine), "filename": "my_dinov2.safetensors",
                           "format": "safetensors",
                           "published_pin": {"location": pin["location"], "revision": pin["revision"],
                                             "sha256": pin["sha256"]},
                           "note": "not the published weights"}
    assert own.is_control is False
    assert torch.equal(own.model.blocks[11].mlp.fc2.bias, state["blocks.11.mlp.fc2.bias"])
    assert torch.equal(own.model.patch_embed.proj.weight, state["patch_embed.proj.weight"])

    _pin_to(monkeypatch, DINO, dinov2.sha256)
    published = create_backbone(DINO)  # the pinned release, from the hub cache
    assert published.weights["kind"] == "pretrained"
    assert own.identity != published.identity
    assert own.architecture == published.architecture and own.preprocess.spec() == published.preprocess.spec()


def test_a_checkpoint_the_family_cannot_load_is_one_line(dinov2, resnet18, clip_files, tmp_path):
    # ResNet-18's tensors are not a ViT-S/14's, nor a ResNet-50's: timm's strict load fails, said in one line
    with pytest.raises(BackboneError) as error:
        create_backbone(DINO, checkpoint=str(resnet18.snapshot))
    _one_line_backbone_error(error, str(resnet18.snapshot), "timm's vit_small_patch14_dinov2 state dict",
                             "174 missing keys (cls_token, pos_embed, patch_embed.proj.weight, ...)", "unexpected keys")
    with pytest.raises(BackboneError) as error:
        create_backbone("resnet50", checkpoint=str(resnet18.snapshot))
    _one_line_backbone_error(error, "timm's resnet50 state dict", "size mismatch for layer1.0.conv1.weight")
    garbage = tmp_path / "model.safetensors"
    garbage.write_bytes(b"not a weights file at all")
    with pytest.raises(BackboneError) as error:
        create_backbone(RESNET, checkpoint=str(garbage))
    _one_line_backbone_error(error, str(garbage), "expected safetensors, a torch state dict or TorchScript")
    with pytest.raises(BackboneError) as error:
        create_backbone(DINO, checkpoint=str(clip_files.torchscript))
    _one_line_backbone_error(error, "torchscript file", "safetensors or torch-state-dict")
    with pytest.raises(BackboneError) as error:
        create_backbone(CLIP, checkpoint=str(dinov2.snapshot))
    _one_line_backbone_error(error, str(dinov2.snapshot), f"open_clip's {CLIP_CONFIG} state dict")


# -- CLIP: OpenAI's TorchScript release and open_clip's state dict ----------------------------------------------


def _clip_cls_by_hand(visual: torch.nn.Module, image: torch.Tensor) -> torch.Tensor:
    """CLIP's image tower up to the pre-projection class token, step by step."""
    with torch.inference_mode():
        x = visual.conv1(image).flatten(2).transpose(1, 2)  # (B, 49, 768) patch tokens
        x = torch.cat([visual.class_embedding.expand(x.shape[0], 1, -1), x], dim=1) + visual.positional_embedding
        x = visual.ln_pre(x)
        x = x if visual.transformer.batch_first else x.transpose(0, 1)
        for block in visual.transformer.resblocks:
            x = block(x)
        x = x if visual.transformer.batch_first else x.transpose(0, 1)
        return visual.ln_post(x[:, 0])


def _assert_clip_tower(backbone: Any, reference: torch.nn.Module) -> None:
    loaded, expected = backbone.model.state_dict(), reference.visual.state_dict()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], v) for k, v in expected.items())
    image = _images(224, count=1)
    cls = backbone.extract_features(image)
    assert cls["pooling"] == "cls" and cls["pooled"].shape == (1, 768) and cls["dense"].shape == (1, 768, 7, 7)
    by_hand = _clip_cls_by_hand(reference.visual, image)
    torch.testing.assert_close(cls["pooled"], by_hand)
    proj = backbone.extract_features(image, pooling="proj")["pooled"]
    assert proj.shape == (1, 512)
    torch.testing.assert_close(proj, by_hand @ reference.visual.proj)
    with torch.inference_mode():  # and open_clip's own forward of the fixture's tower
        torch.testing.assert_close(proj, reference.visual(image))


def test_openai_torchscript_release_is_the_pinned_clip(clip_files, monkeypatch):
    digest = sha256_file(clip_files.torchscript)
    monkeypatch.setitem(_MODELS, CLIP, (CLIP_CONFIG, CLIP_FILE, digest))
    backbone = create_backbone(CLIP, checkpoint=str(clip_files.torchscript))
    assert backbone.weights == {"kind": "pretrained", "source": "url",
                                "location": _OPENAI.format(sha=digest, file=CLIP_FILE), "revision": "openai",
                                "filename": CLIP_FILE, "file_sha256": digest, "pretrained_tag": "openai"}
    _assert_clip_tower(backbone, clip_files.reference)


def test_open_clip_state_dict_is_a_checkpoint_not_openais_release(clip_files):
    backbone = create_backbone(CLIP, checkpoint=str(clip_files.state_dict))
    assert backbone.weights == {"kind": "checkpoint", "file_sha256": sha256_file(clip_files.state_dict),
                                "filename": "open_clip_model.safetensors", "format": "safetensors",
                                "published_pin": {"location": _OPENAI.format(sha=CLIP_SHA256, file=CLIP_FILE),
                                                  "revision": "openai", "sha256": CLIP_SHA256},
                                "note": "not the published weights"}
    _assert_clip_tower(backbone, clip_files.reference)


def test_an_openai_archive_of_another_clip_is_refused(clip_files, monkeypatch):
    """load_openai_model builds whatever the archive's shapes say: ViT-B/32's file must not run as ViT-B/16 (were it
    ViT-B/16's pinned release: anyone else's TorchScript is refused before it loads, as the next test shows)."""
    config, filename, _ = _MODELS["clip_vitb16"]
    monkeypatch.setitem(_MODELS, "clip_vitb16", (config, filename, sha256_file(clip_files.torchscript)))
    with pytest.raises(BackboneError) as error:
        create_backbone("clip_vitb16", checkpoint=str(clip_files.torchscript))
    _one_line_backbone_error(error, str(clip_files.torchscript), f"expected {config}'s vision tower", "'patch': 16",
                             "'patch': 32")


def test_a_torchscript_file_not_the_pinned_release_is_refused_before_it_loads(tmp_path, monkeypatch):
    """torch.jit.load runs an archive's code (`__setstate__`) as it loads: a TorchScript checkpoint that is not
    OpenAI's pinned release never reaches open_clip or torch.jit, and the refusal is one line naming the file."""
    import warnings

    import open_clip

    path = tmp_path / "mine.pt"
    with warnings.catch_warnings():  # torch.jit is deprecated, and still what such a file is
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(path))

    def loaded(*args, **kwargs):
        raise AssertionError("a TorchScript archive was loaded")

    monkeypatch.setattr(torch.jit, "load", loaded)
    monkeypatch.setattr(open_clip, "load_openai_model", loaded)
    monkeypatch.setattr(open_clip, "create_model", loaded)
    with pytest.raises(BackboneError) as error:
        create_backbone(CLIP, checkpoint=str(path))
    _one_line_backbone_error(error, str(path), "is a torchscript file (loading one runs the code inside it",
                             "loads safetensors or torch-state-dict")


# -- CIFAR ResNets take the same rule ---------------------------------------------------------------------------


def test_cifar_resnet_own_checkpoint_is_kind_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv(WEIGHTS_DIR_ENV, str(tmp_path / "empty"))
    mine = tmp_path / "my_resnet20.th"
    state = write_cifar_th(20, mine, seed=3)
    backbone = create_backbone("cifar_resnet20", checkpoint=str(mine))
    assert backbone.weights["kind"] == "checkpoint" and backbone.weights["format"] == "torch-state-dict"
    assert backbone.weights["file_sha256"] == sha256_file(mine) and backbone.weights["filename"] == "my_resnet20.th"
    assert backbone.weights["published_pin"]["sha256"] == _CHECKPOINTS[20][1]
    assert all(torch.equal(backbone.model.state_dict()[k], v) for k, v in state.items())
    assert backbone.extract_features(_images(32))["pooled"].shape == (2, 64)
    with pytest.raises(BackboneError) as error:  # a ResNet-20 is not a ResNet-32
        create_backbone("cifar_resnet32", checkpoint=str(mine))
    _one_line_backbone_error(error, str(mine), "CIFAR ResNet-32")


def test_cifar_weights_folder_file_that_differs_from_the_pin_is_refused(tmp_path, monkeypatch):
    filename, sha256 = _CHECKPOINTS[20]
    write_cifar_th(20, tmp_path / filename)
    monkeypatch.setenv(WEIGHTS_DIR_ENV, str(tmp_path))
    with pytest.raises(WeightsUnavailableError) as error:
        create_backbone("cifar_resnet20")
    _one_line_backbone_error(error, sha256, f"download {_RELEASE}{filename} again",
                             "`checkpoints: {cifar_resnet20: PATH}` in params.yaml")
