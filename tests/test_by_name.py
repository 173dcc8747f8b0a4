"""Backbones by name (`timm:`, `open_clip:`, `torchvision:`), pinned in backbones.lock, from fixture caches.

The caches hold seeded random weights in each library's upstream format and layout (tests/hub_fixtures.py): a
Hugging Face hub cache with timm's `model.safetensors` and open_clip's `open_clip_model.safetensors` at a commit,
torch.hub's `checkpoints/<name>-<sha prefix>.pth` for torchvision. The real loaders run end to end, offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hub_fixtures import write_hub_file, write_timm_safetensors

from harness.backbones import BackboneError, WeightsUnavailableError, by_name, create_backbone, registry
from harness.core.hashing import sha256_file

REPO = Path(__file__).resolve().parents[1]
CONVNEXT = "timm:convnext_atto.d2_in1k"
VIT = "timm:vit_small_patch16_224.dino"
CLIP = "open_clip:ViT-B-32/laion2b_s34b_b79k"
RESNET = "torchvision:ResNet18_Weights.IMAGENET1K_V1"
REVISIONS = {"timm/convnext_atto.d2_in1k": "a" * 40, "timm/vit_small_patch16_224.dino": "b" * 40,
             "laion/CLIP-ViT-B-32-laion2B-s34B-b79K": "c" * 40}


@pytest.fixture(scope="module")
def caches(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """HF_HOME and TORCH_HOME of the module: one file per family, seeded, in the upstream layout."""
    import open_clip
    import torchvision
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("caches")
    hub, scratch = root / "hub", root / "scratch"
    for tag, repo in (("convnext_atto.d2_in1k", "timm/convnext_atto.d2_in1k"),
                      ("vit_small_patch16_224.dino", "timm/vit_small_patch16_224.dino")):
        write_timm_safetensors(tag, scratch / tag / "model.safetensors")  # the tag's head (none for DINO)
        write_hub_file(hub, repo, REVISIONS[repo], "model.safetensors", scratch / tag / "model.safetensors")
    torch.manual_seed(0)
    clip = open_clip.create_model("ViT-B-32", pretrained=None)
    save_file({k: v.half().contiguous() for k, v in clip.state_dict().items()}, str(scratch / "clip.safetensors"))
    write_hub_file(hub, "laion/CLIP-ViT-B-32-laion2B-s34B-b79K", REVISIONS["laion/CLIP-ViT-B-32-laion2B-s34B-b79K"],
                   "open_clip_model.safetensors", scratch / "clip.safetensors")
    checkpoints = root / "torch" / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18().state_dict(), checkpoints / "resnet18-f37072fd.pth")
    return root


@pytest.fixture
def offline(caches: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The caches, offline; a project folder of its own as the working directory (its backbones.lock); the
    registries as they were afterwards (a pinned name registers itself in this process)."""
    import huggingface_hub.constants as constants

    for key, value in (("HF_HOME", caches), ("HF_HUB_CACHE", caches / "hub"), ("HF_HUB_OFFLINE", "1"),
                       ("TORCH_HOME", caches / "torch")):
        monkeypatch.setenv(key, str(value))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(caches / "hub"))  # read when huggingface_hub was imported
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    registry.BACKBONES.discover()  # before the copies: a discovery inside them would be lost with them
    monkeypatch.setattr(registry.BACKBONES, "_entries", dict(registry.BACKBONES._entries))
    monkeypatch.setattr(registry.BACKBONES, "_modules", dict(registry.BACKBONES._modules))
    monkeypatch.setattr(registry, "_ENTRIES", dict(registry._ENTRIES))
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return project


def _hub_snapshot(caches: Path, repo: str, filename: str) -> Path:
    return caches / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / REVISIONS[repo] / filename


@pytest.mark.parametrize(("spec", "name", "pooled", "grid"), [
    (CONVNEXT, "timm--convnext_atto.d2_in1k", 320, (7, 7)),
    (VIT, "timm--vit_small_patch16_224.dino", 384, (14, 14)),
    (CLIP, "open_clip--ViT-B-32--laion2b_s34b_b79k", 768, (7, 7)),
    (RESNET, "torchvision--ResNet18_Weights.IMAGENET1K_V1", 512, (7, 7)),
])
def test_a_spec_resolves_offline_pins_itself_and_extracts(offline, caches, spec, name, pooled, grid):
    assert by_name.registered_name(spec) == name
    lock = json.loads((offline / "backbones.lock").read_text())["backbones"]
    pin = lock[name]["pin"]
    family = spec.partition(":")[0]
    if family == "torchvision":
        file = caches / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
        assert (pin["source"], pin["revision"]) == ("url", "f37072fd")
    else:
        file = _hub_snapshot(caches, pin["location"], pin["filename"])
        assert (pin["source"], pin["revision"]) == ("hf-hub", REVISIONS[pin["location"]])
    assert pin["sha256"] == sha256_file(file)
    backbone = create_backbone(name)
    # the identity names the pin: revision and the file's SHA-256, never the name alone
    assert backbone.weights["kind"] == "pretrained"
    assert (backbone.weights["revision"], backbone.weights["file_sha256"]) == (pin["revision"], pin["sha256"])
    assert json.loads(json.dumps(backbone.preprocess.spec())) == {"library": "pillow", **lock[name]["preprocess"]}
    images = torch.randn(2, 3, backbone.preprocess.crop, backbone.preprocess.crop,
                         generator=torch.Generator().manual_seed(0))
    out = backbone.extract_features(images, pooling="default", layers=None)
    assert out["pooled"].shape == (2, pooled) and tuple(out["grid_hw"]) == grid
    assert torch.isfinite(out["dense"]).all()
    control = create_backbone(name + "@random")
    assert control.weights["kind"] == "random" and control.identity != backbone.identity


def test_the_weights_loaded_are_the_files_tensors(offline, caches):
    """Not a random init that happens to run: timm's loader read the pinned file into the model."""
    from safetensors.torch import load_file

    backbone = create_backbone(by_name.registered_name(CONVNEXT))
    file = _hub_snapshot(caches, "timm/convnext_atto.d2_in1k", "model.safetensors")
    saved = load_file(str(file))
    state = backbone.model.state_dict()
    assert torch.equal(state["stem.0.weight"], saved["stem.0.weight"])
    assert torch.equal(state["stages.3.blocks.1.conv_dw.weight"], saved["stages.3.blocks.1.conv_dw.weight"])


def test_a_later_run_reads_the_lock_and_refuses_a_different_file_in_one_line(offline, caches, tmp_path):
    name = by_name.registered_name(CONVNEXT)
    locked = json.loads((offline / "backbones.lock").read_text())
    # the cache's file replaced by another (a corrupt or silently changed upstream file)
    snapshot = _hub_snapshot(caches, "timm/convnext_atto.d2_in1k", "model.safetensors")
    blob = snapshot.resolve()
    kept = blob.read_bytes()
    try:
        write_timm_safetensors("convnext_atto.d2_in1k", tmp_path / "other.safetensors", seed=1)
        blob.write_bytes((tmp_path / "other.safetensors").read_bytes())
        assert by_name.registered_name(CONVNEXT) == name  # the lock's entry, not a fresh pin
        assert json.loads((offline / "backbones.lock").read_text()) == locked
        with pytest.raises(WeightsUnavailableError) as error:
            create_backbone(name)
        message = str(error.value)
        assert "\n" not in message and locked["backbones"][name]["pin"]["sha256"] in message
        assert f"visbench-harness pin backbone={CONVNEXT}" in message
    finally:
        blob.write_bytes(kept)


def test_another_file_as_checkpoint_runs_as_kind_checkpoint(offline, tmp_path):
    name = by_name.registered_name(CONVNEXT)
    mine = tmp_path / "mine.safetensors"
    write_timm_safetensors("convnext_atto.d2_in1k", mine, seed=7)
    backbone = create_backbone(name, checkpoint=str(mine))
    assert backbone.weights["kind"] == "checkpoint"
    assert backbone.weights["file_sha256"] == sha256_file(mine)
    assert backbone.weights["published_pin"]["location"] == "timm/convnext_atto.d2_in1k"
    assert backbone.identity != create_backbone(name).identity


def test_a_spec_missing_from_the_cache_is_one_line_naming_the_fix(offline):
    with pytest.raises(WeightsUnavailableError) as error:
        by_name.registered_name("timm:convnext_tiny.fb_in1k")
    message = str(error.value)
    assert "\n" not in message and "hf download timm/convnext_tiny.fb_in1k model.safetensors" in message
    assert not (offline / "backbones.lock").exists()  # nothing pinned


@pytest.mark.parametrize(("text", "needle"), [
    ("timm:convnext_atto", "a model and a pretrained tag"),
    ("keras:resnet50.imagenet", "not a backbone by name"),
    ("timm:convnext_atto.no_such_tag", "has no pretrained tag"),
    ("open_clip:ViT-B-32/no_such_tag", "has no pretrained tag"),
    ("torchvision:ResNet18_Weights.NO_SUCH", "has no weights"),
])
def test_a_bad_spec_is_one_line(offline, text, needle):
    with pytest.raises(BackboneError) as error:
        by_name.registered_name(text)
    assert "\n" not in str(error.value) and needle in str(error.value)


def test_the_lock_is_read_back_by_a_fresh_process_and_pin_refreshes_it(offline, caches):
    """What a stage does: a new process imports the family module, which registers every locked name."""
    by_name.registered_name(RESNET)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = ("from harness.backbones import create_backbone, list_backbones\n"
            "b = create_backbone('torchvision--ResNet18_Weights.IMAGENET1K_V1')\n"
            "print(b.weights['kind'], 'torchvision--ResNet18_Weights.IMAGENET1K_V1@random' in list_backbones())\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=offline, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["pretrained", "True"]
    cli = subprocess.run([sys.executable, "-m", "harness.cli.main", "pin", f"backbone={RESNET}"], cwd=offline,
                         env=env, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert "torchvision--ResNet18_Weights.IMAGENET1K_V1 = " + RESNET in cli.stdout
    bad = subprocess.run([sys.executable, "-m", "harness.cli.main", "pin", "backbone=timm:convnext_tiny.fb_in1k"],
                         cwd=offline, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_a_corrupt_lock_is_refused_in_one_line(offline):
    (offline / "backbones.lock").write_text("{not json")
    with pytest.raises(BackboneError) as error:
        by_name.read_lock()
    assert "\n" not in str(error.value) and "git checkout -- backbones.lock" in str(error.value)


def test_standard_rows_are_specs_of_the_families_with_declared_reads():
    """Every standard row parses, names a tag its library has, and declares a pooling its family offers."""
    import open_clip
    import timm
    from torchvision.models import get_weight

    for alias, row in by_name.STANDARD_ROWS.items():
        spec = by_name.Spec.parse(row.spec)
        if spec.family == "timm":
            assert timm.models.get_pretrained_cfg(f"{spec.model}.{spec.tag}") is not None, alias
        elif spec.family == "open_clip":
            assert open_clip.get_pretrained_cfg(spec.model, spec.tag), alias
        else:
            get_weight(f"{spec.model}.{spec.tag}")
        assert row.pooling in ("cls", "mean", "avg"), alias
        assert "last" in row.layer_sets, alias


def test_training_data_is_read_off_the_tag():
    assert [d["name"] for d in by_name.training_data("augreg2_in21k_ft_in1k")] == ["ImageNet-21k", "ImageNet-1k"]
    assert [d["name"] for d in by_name.training_data("laion2b_s34b_b79k")] == ["LAION-2B"]
    assert by_name.training_data("fb_in1k")[0]["images"] == 1_281_167


# Standard rows whose architecture no spec above covers: SAM's windowed-attention encoder at 1024 px, SigLIP's tower
# (no class token), MAE's encoder (no head). (DINO, the supervised ViT, ConvNeXt, CLIP and the torchvision ResNet
# share the classes the specs above run; DINOv2 is registered by timm_models with its own pin and fixture.)
OWN_ARCHITECTURES = {"sam_vitb": (768, (64, 64)), "siglip_vitb16": (768, (14, 14)), "mae_vitb16": (768, (14, 14))}


@pytest.mark.parametrize("alias", sorted(OWN_ARCHITECTURES))
def test_a_standard_row_of_its_own_architecture_runs_from_its_fixture_cache(offline, caches, tmp_path, alias):
    import timm

    spec = by_name.Spec.parse(by_name.STANDARD_ROWS[alias].spec)
    repo = timm.models.get_pretrained_cfg(f"{spec.model}.{spec.tag}").hf_hub_id
    write_timm_safetensors(f"{spec.model}.{spec.tag}", tmp_path / "model.safetensors")
    file = write_hub_file(caches / "hub", repo, "d" * 40, "model.safetensors", tmp_path / "model.safetensors")
    try:
        name = by_name.registered_name(alias)
        assert name == alias
        entry = by_name.read_lock()[alias]
        assert (entry.pin["location"], entry.pin["revision"], entry.pin["sha256"]) == (
            repo, "d" * 40, sha256_file(file))
        assert entry.meta["pooling"] == by_name.STANDARD_ROWS[alias].pooling
        backbone = create_backbone(alias)
        assert backbone.weights["file_sha256"] == entry.pin["sha256"]
        channels, grid = OWN_ARCHITECTURES[alias]
        # the row's declared pooling is the one its default resolves to (none the family lacks)
        assert backbone.resolve_pooling("default") == by_name.STANDARD_ROWS[alias].pooling
        crop = backbone.preprocess.crop
        images = torch.randn(1, 3, crop, crop, generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            out = backbone.extract_features(images, pooling="default", layers=None)
        assert out["pooled"].shape == (1, channels) and tuple(out["grid_hw"]) == grid
        assert torch.isfinite(out["dense"]).all()
    finally:  # the module's caches are shared: the next test's lookups must not find this 350 MB file
        shutil.rmtree(caches / "hub" / f"models--{repo.replace('/', '--')}")
