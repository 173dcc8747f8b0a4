"""Backbone metadata as data (harness.backbones.cards): every registered family described without building it,
"trained on this data" where a board's dataset is drawn from a backbone's training data."""

from __future__ import annotations

import json
from pathlib import Path

from harness.backbones import BACKBONES, backbone_entry
from harness.backbones.cards import CARDS, DATASET_IMAGES, DATASET_SOURCES, card, describe, trained_on
from harness.core.config import load_params
from harness.runs.records import read_records

ROOT = Path(__file__).resolve().parents[1]


def test_every_registered_family_has_a_card_and_every_named_collection_a_size():
    BACKBONES.discover()
    described = {name for name in BACKBONES.names() if BACKBONES.module_of(name) != "harness.backbones.by_name"
                 and backbone_entry(name).weights != "custom"}  # a plugin's (a test's) backbone describes itself
    assert described - set(CARDS) == set(), "a registered backbone without a card in harness/backbones/cards.py"
    assert all(data.images == DATASET_IMAGES[data.name] for c in CARDS.values() for data in c.training_data)


def test_the_collections_boards_are_drawn_from_are_params_yaml_datasets():
    with_source = set(DATASET_SOURCES)
    assert with_source <= set(load_params(ROOT / "params.yaml").datasets)


def test_trained_on_this_data_is_the_overlap_of_a_cards_training_data_and_the_boards_dataset():
    assert trained_on("cifar_resnet20", "cifar10").name == "CIFAR-10"
    assert trained_on("hed_vgg16", "bsds500").name == "BSDS500"
    assert trained_on("cifar_resnet20@random", "cifar10") is None  # a control was trained on nothing
    assert trained_on("efficientnet_lite0", "cifar10") is None
    assert trained_on("cifar_resnet20", "scenes") is None  # procedural: drawn from no collection
    assert card("my_plugin") is None and describe(None)["licence"] == "not declared"
    assert describe(card("sobel")) == {"licence": "none (no weights)", "training data": "none",
                                       "source": "fixed Sobel filters: no weights, no training data"}


def test_a_backbone_named_by_spec_is_described_by_its_lock_entry(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = "timm--convnext_tiny.fb_in1k"
    Path("backbones.lock").write_text(json.dumps({"backbones": {name: {
        "spec": "timm:convnext_tiny.fb_in1k", "pin": {"location": "timm/convnext_tiny.fb_in1k"},
        "preprocess": {}, "meta": {"license": "apache-2.0", "training_data": [{"name": "ImageNet-1k"}]}}}}))
    about = describe(card(name))
    assert about["licence"] == "apache-2.0" and about["training data"] == "ImageNet-1k (1,281,167 images)"
    assert "timm/convnext_tiny.fb_in1k" in about["source"]


def test_boards_backbone_pages_and_head_cards_say_so():
    from harness.user.publish import model_card

    board = (ROOT / "docs/tasks/edge_bsds.md").read_text()
    assert "[hed_vgg16](../backbones/hed_vgg16.md) †" in board and "†: trained on this data" in board
    assert "efficientnet_lite0.md) †" not in board
    page = (ROOT / "docs/backbones/hed_vgg16.md").read_text()
    assert "About: licence MIT; trained on BSDS500 (300 images)" in page
    [record] = [r for r in read_records(ROOT / "leaderboard/corpus.jsonl")
                if r.backbone_name == "cifar_resnet20" and r.task == "classification"]
    readme = model_card(record, "0" * 64)
    assert "**Trained on this data**: `cifar10` is drawn from CIFAR-10" in readme
    control = record.model_copy(update={"backbone_name": "cifar_resnet20@random"})
    assert "a random-init control, trained on nothing" in model_card(control, "0" * 64)


def test_importing_the_leaderboard_loads_no_torch():
    """The cards are read by pages while they render; importing the leaderboard (what `visbench-harness pipeline`
    does for its plot definitions) does not pull in the backbones package, and with it torch."""
    import subprocess
    import sys

    probe = "import sys, harness.leaderboard; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
