"""Batch size and decode order are speed, never numbers: an image's features are the same bits at every batch
size (a lone last image included), and the pixels decoded while the backbone loads are the ones the extraction
would have made itself."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import write_image_folder

from harness.backbones import create_backbone
from harness.backbones.registry import declared_preprocess
from harness.core.preprocessing import Preprocess
from harness.datasets.kinds import prepare_dataset
from harness.runs.extract import EarlyDecode, FeatureRequest, extract_dataset, load_image
from harness.runs.feature_cache import FeatureCache, entry_keys, read_extraction

REQUESTS = [FeatureRequest("pooled"), FeatureRequest("dense", fit="squash")]


def _manifest(tmp_path: Path, images: int):
    root = write_image_folder(tmp_path / "images", per_split=images, splits=("train",), classes=1)
    return prepare_dataset("tiny", {"kind": "image_folder", "root": str(root)}, tmp_path / "data")


def _features(out: Path, manifest) -> dict[str, list[np.ndarray]]:
    extraction = read_extraction(out)
    cache = FeatureCache(out / "entries")
    return {item.path: [cache.get(key) for key in entry_keys(extraction["backbone"], extraction["requests"], item)]
            for item in manifest.items}


def _extract(backbone, manifest, out: Path, batch_size: int, early: EarlyDecode | None = None):
    from harness.runs.feature_cache import write_extraction

    write_extraction(out, extract_dataset(backbone, manifest, REQUESTS, out, batch_size, early))
    return _features(out, manifest)


@pytest.mark.parametrize("name", ["cifar_resnet20@random", "efficientnet_lite0"])
def test_features_are_the_same_bits_at_every_batch_size_a_lone_last_image_included(tmp_path, name):
    manifest = _manifest(tmp_path, images=5)  # batches of 2 and of 4 both end on a lone image
    backbone = create_backbone(name)
    backbone.batch_sizes = {"fp32": 64}  # let settings.batch_size alone decide the size in this test
    runs = {size: _extract(backbone, manifest, tmp_path / f"bs{size}", size) for size in (2, 4, 32)}
    for size in (2, 4):
        for path, arrays in runs[32].items():
            for ours, reference in zip(runs[size][path], arrays, strict=True):
                assert np.array_equal(ours, reference), f"{name}: {path} differs at batch {size}"


def test_each_backbone_runs_its_own_batch_size_at_most_the_setting(tmp_path, caplog):
    manifest = _manifest(tmp_path, images=3)
    backbone = create_backbone("efficientnet_lite0")
    assert backbone.batch_size == 4 < 32  # measured fastest (benchmarks/batch_size.py)
    with caplog.at_level("INFO", logger="harness.runs.extract"):
        extract_dataset(backbone, manifest, REQUESTS[:1], tmp_path / "a", 32)
        extract_dataset(backbone, manifest, REQUESTS[:1], tmp_path / "b", 2)
    assert "batches of 4" in caplog.text and "batches of 2" in caplog.text


def test_early_decode_hands_over_the_extractions_own_pixels_and_only_for_its_preprocessing(tmp_path):
    manifest = _manifest(tmp_path, images=4)
    backbone = create_backbone("cifar_resnet20@random")
    early = EarlyDecode(manifest, backbone.preprocess, ["crop", "squash"])
    early._thread.join()  # let it decode all it may before taking (take() stops it at once)
    pixels = early.take(backbone.preprocess)
    assert sorted(pixels) == sorted(item.path for item in manifest.items)
    for item in manifest.items:
        image = load_image(manifest.resolve(item))
        for fit in ("crop", "squash"):
            assert torch.equal(pixels[item.path][fit], backbone.preprocess(image, fit))
    other = Preprocess(crop=32, resize=36, mean=(0.5,) * 3, std=(0.5,) * 3)
    for budget, decoded in ((None, {}), (1, 1)):
        early = EarlyDecode(manifest, backbone.preprocess, ["crop"], **({"budget_bytes": budget} if budget else {}))
        early._thread.join()  # let it decode all it may before taking (take() stops it at once)
        pixels = early.take(other if budget is None else backbone.preprocess)
        assert (pixels == decoded) if budget is None else len(pixels) == decoded


def test_features_with_the_early_decode_equal_those_without(tmp_path):
    manifest = _manifest(tmp_path, images=5)
    backbone = create_backbone("cifar_resnet20@random")
    plain = _extract(backbone, manifest, tmp_path / "plain", 2)
    decode = EarlyDecode(manifest, declared_preprocess("cifar_resnet20@random"), ["crop", "squash"])
    decode._thread.join()  # let it decode all it may before taking (take() stops it at once)
    early = _extract(backbone, manifest, tmp_path / "early", 2, decode)
    for path, arrays in plain.items():
        assert all(np.array_equal(a, b) for a, b in zip(early[path], arrays, strict=True))


@pytest.mark.parametrize("name", ["efficientnet_lite1", "resnet18@random", "clip_vitb32@random",
                                  "cifar_resnet56@random", "hed_vgg16@random", "sobel"])
def test_the_preprocessing_a_family_declares_is_the_one_it_builds(name):
    # otherwise every early decode of that backbone is thrown away (correct, but slower)
    assert declared_preprocess(name) == create_backbone(name).preprocess


def test_features_decoded_one_batch_ahead_in_a_thread_equal_those_decoded_in_turn(tmp_path, monkeypatch):
    """The decode thread runs only where a core is free beyond torch's (never on the pinned test workers nor on
    a 2-core machine at 2 threads), so both paths are forced here."""
    import harness.runs.extract as extract

    manifest = _manifest(tmp_path, images=5)
    backbone = create_backbone("cifar_resnet20@random")
    monkeypatch.setattr(extract, "usable_cores", lambda: torch.get_num_threads())
    in_turn = _extract(backbone, manifest, tmp_path / "in_turn", 2)
    pools = []
    monkeypatch.setattr(extract, "ThreadPoolExecutor", lambda **kw: pools.append(kw) or ThreadPoolExecutor(**kw))
    monkeypatch.setattr(extract, "usable_cores", lambda: torch.get_num_threads() + 1)
    ahead = _extract(backbone, manifest, tmp_path / "ahead", 2)
    assert len(pools) == 1  # the thread path ran
    for path, arrays in in_turn.items():
        assert all(np.array_equal(a, b) for a, b in zip(ahead[path], arrays, strict=True))
