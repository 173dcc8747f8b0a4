"""The seed's metric names on the keypoint and edge heatmap protocols (issue 49 item 7): keypoints found as peaks,
matched one to one within 10 px, and pooled over every keypoint; `edge_correlation` is the pooled Pearson r."""

from __future__ import annotations

import numpy as np
import pytest

from harness.probes import resampled
from harness.probes.base import get_probe
from harness.probes.dense.keypoints import keypoint_columns, match_distances, peaks
from harness.probes.statistics.keypoints import KEYPOINT_STATISTICS


def _blobs(points: list[tuple[int, int]], size: int = 48, height: float = 1.0) -> np.ndarray:
    rows, cols = np.mgrid[:size, :size]
    out = np.zeros((size, size))
    for r, c in points:
        out = np.maximum(out, height * np.exp(-((rows - r) ** 2 + (cols - c) ** 2) / 4.0))
    return out


def test_peaks_are_the_blob_centres_above_half_the_maps_own_range():
    found = peaks(_blobs([(10, 10), (30, 20)]) + _blobs([(40, 40)], height=0.3))
    assert sorted(map(tuple, found.astype(int).tolist())) == [(10, 10), (30, 20)]
    # an under-confident head (a tenth of the height, on a floor) finds the same keypoints: its own scale counts
    assert np.array_equal(peaks(0.05 + 0.1 * _blobs([(10, 10), (30, 20)])), peaks(_blobs([(10, 10), (30, 20)])))
    assert peaks(np.full((8, 8), 0.3)).size == 0  # a flat map has no peak, not 64


def test_matching_is_one_to_one_within_ten_pixels():
    truth = np.array([[10.0, 10.0], [10.0, 13.0]])
    assert match_distances(truth, truth[:1]).tolist() == [0.0]  # an exact hit is a match at 0 px
    # one detection between both keypoints matches one of them; one 11 px away matches none
    assert match_distances(truth, np.array([[10.0, 11.0]])).tolist() == [1.0]
    assert match_distances(truth, np.array([[21.0, 10.0]])).size == 0
    assert sorted(match_distances(truth, np.array([[10.0, 11.0], [10.0, 14.0]])).tolist()) == [1.0, 1.0]


def test_recall_and_auc_at_pixel_thresholds_against_a_hand_count():
    target = np.stack([_blobs([(10, 10), (30, 30)]), _blobs([(20, 20)])])
    # image 0: one keypoint found exactly, one 3 px off; image 1: found 6 px off, plus a far spurious detection
    pred = np.stack([_blobs([(10, 10), (30, 33)]), _blobs([(20, 26), (45, 2)])])
    scores, auxiliary = keypoint_columns(pred, target)
    assert scores["detections_per_image"].tolist() == [2.0, 2.0]
    assert scores["num_matches"].tolist() == [2.0, 1.0]
    assert auxiliary["keypoints_truth"].tolist() == [2.0, 1.0]
    columns = {**scores, **auxiliary}
    recall = {n: resampled.evaluate(KEYPOINT_STATISTICS[f"recall@{n}px"], columns)[0] for n in (1, 2, 5, 10)}
    assert recall == pytest.approx({1: 1 / 3, 2: 1 / 3, 5: 2 / 3, 10: 1.0})
    auc5 = resampled.evaluate(KEYPOINT_STATISTICS["auc@5px"], columns)[0]
    assert auc5 == pytest.approx((1.0 + (1 - 3 / 5) + 0.0) / 3)
    # under bootstrap weights every keypoint weighs the same: image 0 drawn twice, image 1 not at all
    assert resampled.evaluate(KEYPOINT_STATISTICS["recall@5px"], columns, np.array([[2.0, 0.0]]))[0] == 1.0
    # no keypoint drawn: nothing to find, 0.0
    assert resampled.evaluate("keypoint_ratio:hit@5px", {"keypoints_truth": np.zeros(1),
                                                           "keypoints_hit@5px": np.zeros(1)})[0] == 0.0


def test_a_file_without_the_columns_is_refused_in_one_line():
    with pytest.raises(ValueError, match="re-run the probe"):
        resampled.evaluate("keypoint_ratio:hit@5px", {"keypoints_truth": np.ones(2)})


def test_the_protocols_declare_the_seeds_names():
    keypoints = get_probe("keypoints2d")
    assert {"recall@1px", "recall@2px", "recall@5px", "recall@10px", "auc@1px", "auc@2px", "auc@5px"} <= set(
        keypoints.statistics)
    assert set(keypoints.statistics.values()) <= set(resampled.STATISTICS)
    for task in ("edge", "occlusion_edge"):
        assert get_probe(task).statistics["edge_correlation"] == get_probe(task).statistics["pearson"]


def test_edge_correlation_takes_the_cross_cpu_tolerance_measured_for_pearson():
    from harness.probes.measured_tolerances import CROSS_CPU

    for task in ("edge", "occlusion_edge"):
        spec = get_probe(task)
        measured = CROSS_CPU[spec.protocol]
        assert "pearson" in measured and "edge_correlation" not in measured
        tolerances = spec.tolerances({"pearson": 0.5, "edge_correlation": 0.5, "mse": 0.1})
        assert tolerances["edge_correlation"] == tolerances["pearson"] > 0
        assert tolerances["mse"] == (spec.tolerance if "mse" not in measured else
                                     measured["mse"][0] + measured["mse"][1] * 0.1)
