"""CLIP options: `use_projection` (the 512-d image–text embedding, under its own identity) and the pretrained
tag in every pretrained CLIP identity; the plain towers' identity (and so the committed corpus) unchanged."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from harness.backbones import create_backbone
from harness.runs.records import read_records

CORPUS = Path(__file__).resolve().parents[1] / "leaderboard" / "corpus.jsonl"


@functools.cache
def built(name: str):
    return create_backbone(name)


def _images() -> torch.Tensor:
    return torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))


def test_use_projection_is_its_own_identity_and_the_plain_tower_keeps_its_own():
    plain, projected = built("clip_vitb32@random"), built("clip_vitb32_proj@random")
    assert projected.architecture["use_projection"] is True and "use_projection" not in plain.architecture
    assert projected.identity != plain.identity
    assert projected.weights["state_sha256"] == plain.weights["state_sha256"]  # the same parameters
    committed = {r.backbone.identity for r in read_records(CORPUS) if r.backbone_name == "clip_vitb32@random"}
    assert committed == {plain.identity}  # the corpus's clip control still reads as the same backbone


def test_the_projected_variant_pools_the_512_d_image_text_embedding():
    plain, projected = built("clip_vitb32@random"), built("clip_vitb32_proj@random")
    x = _images()
    assert projected.resolve_pooling("default") == "proj" and plain.resolve_pooling("default") == "cls"
    embedding = projected.extract_features(x)
    assert embedding["pooled"].shape == (2, 512)
    assert torch.equal(embedding["pooled"], plain.extract_features(x, pooling="proj")["pooled"])
    assert plain.extract_features(x)["pooled"].shape == (2, 768)  # the pre-projection token
    assert embedding["dense"].shape == (2, 512, 7, 7)  # the last layer's tokens, projected
    earlier = projected.extract_features(x, pooling="cls", layers=[5])
    assert earlier["dense"].shape == (2, 768, 7, 7)  # the projection was trained on the last layer only


@pytest.mark.parametrize("name", ["clip_vitb32", "clip_vitb32_proj"])
def test_every_pretrained_clip_identity_names_its_pretrained_tag(name, tmp_path, monkeypatch):
    import open_clip

    from harness.backbones import openclip_models

    # No OpenAI weights offline: a state dict of the same architecture stands in for the pinned file.
    state = tmp_path / "ViT-B-32.bin"
    torch.manual_seed(1)
    torch.save(open_clip.create_model("ViT-B-32-quickgelu", pretrained=None).state_dict(), state)
    fake_block = {"kind": "pretrained", "source": "url", "location": "pinned", "revision": "openai",
                  "filename": "ViT-B-32.pt", "file_sha256": "0" * 64}
    monkeypatch.setattr(openclip_models, "resolve_pinned_file", lambda pin, request, **_: (state, dict(fake_block)))
    backbone = create_backbone(name)
    assert backbone.weights["pretrained_tag"] == "openai"
    assert backbone.identity_spec()["weights"]["pretrained_tag"] == "openai"
