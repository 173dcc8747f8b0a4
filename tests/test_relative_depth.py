"""Relative depth (`relative-depth-pairs/v1`): the ordinal truth, WHDR and the tie band by hand, the bilinear read
of a feature map against scipy's, and the probe end to end: features that carry depth order pairs, noise does not."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.ndimage import map_coordinates, zoom

from harness.core import paths
from harness.datasets.dense_targets import save_npy
from harness.datasets.manifest import Item, Manifest
from harness.probes.base import ProbeInputs, validate_probe_params
from harness.probes.relative_depth import (
    RELATIVE_DEPTH,
    disagreement,
    ordinal,
    pair_points,
    predicted_relation,
    sample_features,
    tie_threshold,
)


def test_ordinal_truth_and_whdr_by_hand():
    a = np.array([2.0, 1.0, 1.05, 1.0, 1.2])
    b = np.array([1.0, 2.0, 1.0, 1.1, 1.0])
    assert ordinal(a, b, 0.1).tolist() == [1, -1, 0, 0, 1]  # 1.05 and 1/1.1 are within δ = 0.1; 1.2 is not
    assert ordinal(a, b, 0.0).tolist() == [1, -1, 1, -1, 1]
    truth = np.array([1, -1, 0, 0, 1])
    scores = np.array([0.9, -0.2, 0.05, 0.3, -1.0])
    assert predicted_relation(scores, 0.1).tolist() == [1, -1, 0, 1, -1]
    assert disagreement(truth, predicted_relation(scores, 0.1)).tolist() == [0, 0, 0, 1, 1]  # WHDR 2/5


def test_the_tie_band_minimises_the_training_disagreement():
    truth = np.array([0, 0, 1, -1, 1])
    scores = np.array([0.05, -0.1, 0.5, -0.4, 0.2])
    tie = tie_threshold(scores, truth)
    assert tie == pytest.approx(0.15)  # between |−0.1| and 0.2: both equal pairs tie, every other is ordered
    assert disagreement(truth, predicted_relation(scores, tie)).sum() == 0
    assert tie_threshold(np.array([1.0, -2.0]), np.array([1, -1])) == 0.0  # nothing to tie: no band


def test_bilinear_read_equals_scipys_map_coordinates():
    rng = np.random.default_rng(0)
    dense = rng.normal(size=(3, 5, 7))
    shape = (40, 28)
    points = np.stack([rng.integers(0, shape[0], 50), rng.integers(0, shape[1], 50)], axis=-1)
    got = sample_features(dense, points, shape)
    y = np.clip((points[:, 0] + 0.5) * 5 / shape[0] - 0.5, 0, 4)
    x = np.clip((points[:, 1] + 0.5) * 7 / shape[1] - 0.5, 0, 6)
    want = np.stack([map_coordinates(channel, [y, x], order=1, mode="nearest") for channel in dense], axis=-1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_pairs_are_valid_distinct_and_the_same_for_every_run():
    item = Item("val/0001", "h", "val")
    valid = np.zeros((6, 6), bool)
    valid[1:4, 2:5] = True
    pairs = pair_points(item, valid.shape, valid, 30, seed=0)
    assert pairs.shape == (30, 2, 2) and valid[pairs[..., 0], pairs[..., 1]].all()
    assert (pairs[:, 0] != pairs[:, 1]).any(axis=-1).all()
    assert np.array_equal(pairs, pair_points(item, valid.shape, valid, 30, seed=0))
    assert not np.array_equal(pairs, pair_points(item, valid.shape, valid, 30, seed=1))


def _scenes(tmp_path, n_train=24, n_test=8, size=16):
    """Depth maps of a tilted plane with a box in front, and feature maps (C, 8, 8) per image."""
    rng = np.random.default_rng(3)
    items, entries, depths = [], {}, {}
    with paths.workspace(tmp_path):
        prepared = paths.dataset_dir("tiny_scenes")
        for index in range(n_train + n_test):
            split = "train" if index < n_train else "val"
            rows = np.arange(size)[:, None] * np.ones(size)
            depth = 2.0 + 6.0 * (size - rows) / size * rng.uniform(0.5, 1.5)
            r, c = rng.integers(0, size - 5, 2)
            depth[r:r + 5, c:c + 5] = rng.uniform(1.0, 2.0)
            path = f"{split}/{index:04d}"
            items.append(Item(path, f"h{index}", split))
            entries[path] = {"depth": save_npy(prepared, f"{path}/depth.npy", depth)}
            depths[path] = depth
        manifest = Manifest("tiny_scenes", str(prepared), items, [], {"source": "test"}, {"targets": entries})
    return manifest, depths


@pytest.mark.parametrize("informative", [True, False])
def test_the_probe_orders_pairs_from_features_that_carry_depth(tmp_path, monkeypatch, informative):
    manifest, depths = _scenes(tmp_path)
    rng = np.random.default_rng(5)

    def features(item):
        noise = rng.normal(size=(4, 8, 8))
        if informative:
            noise[0] = zoom(np.log(depths[item.path]), 0.5, order=1)
        return noise.astype(np.float32)

    params = validate_probe_params("relative_depth", {"train_split": "train", "eval_split": "val",
                                                      "pairs_per_image": 60, "epochs": 40, "lr": 0.01})
    monkeypatch.chdir(tmp_path)
    with paths.workspace(tmp_path):
        result = RELATIVE_DEPTH.run(ProbeInputs(manifest, features, params, seed=0))
    assert result.unit == "image" and len(result.sample_ids) == 8
    assert set(result.samples) == {"whdr", "ordinal_error"}
    assert result.metrics["whdr"] == pytest.approx(result.samples["whdr"].mean())
    if informative:
        assert result.metrics["whdr"] < 0.2 and result.metrics["ordinal_error"] < 0.1
    else:
        assert result.metrics["whdr"] > 0.35


def test_pairs_seed_pins_the_evaluation_while_the_seed_trains_the_head(tmp_path, monkeypatch):
    """A seed sweep's replicate (`seed: 1, pairs_seed: 0`) is scored on seed 0's pairs: with features that carry
    nothing but depth its per-image truth is seed 0's; a replicate without `pairs_seed` draws other pairs."""
    manifest, depths = _scenes(tmp_path)

    def features(item):
        return np.log(zoom(depths[item.path], 0.5, order=1))[None].astype(np.float32)

    def run(**extra):
        params = validate_probe_params("relative_depth", {"train_split": "train", "eval_split": "val",
                                                          "pairs_per_image": 40, "epochs": 40, "lr": 0.01,
                                                          **extra})
        with paths.workspace(tmp_path):
            return RELATIVE_DEPTH.run(ProbeInputs(manifest, features, params, seed=extra.get("seed", 0)))

    monkeypatch.chdir(tmp_path)
    seed0, pinned, drawn = run(), run(seed=1, pairs_seed=0), run(seed=1)
    # one feature channel: any head orders the pairs the same way, so the scores on seed 0's pairs agree
    assert np.array_equal(pinned.samples["ordinal_error"], seed0.samples["ordinal_error"])
    assert not np.array_equal(drawn.samples["ordinal_error"], seed0.samples["ordinal_error"])


def test_the_probe_declares_its_protocol():
    assert RELATIVE_DEPTH.protocol == "relative-depth-pairs/v1" and RELATIVE_DEPTH.headline == "whdr"
    assert "whdr" in RELATIVE_DEPTH.lower_is_better and RELATIVE_DEPTH.fit == "squash"
