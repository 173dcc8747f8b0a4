"""Counting (`visible-object-count/v1`): the exact target, the ridge fit against scikit-learn, the metrics by hand."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from harness.probes import get_probe
from harness.probes.base import validate_probe_params
from harness.probes.counting import count_scores, visible_count
from harness.probes.pooled_regression import ridge_fit


def test_the_count_is_the_objects_with_a_visible_pixel():
    instance = np.zeros((6, 6), np.uint8)
    instance[0, 0] = 1
    instance[2:4, 2:4] = 3  # object 2 is hidden: it has no pixel
    assert visible_count(instance) == 2
    assert visible_count(np.zeros((4, 4), np.uint8)) == 0


@pytest.mark.parametrize(("n", "c", "alpha"), [(30, 5, 1.0), (12, 40, 0.5), (20, 20, 3.0)])
def test_ridge_matches_scikit_learn_in_both_forms(n, c, alpha):
    rng = np.random.default_rng(n + c)
    x, y = rng.standard_normal((n, c)), rng.standard_normal(n) * 3 + 5
    weights, intercept = ridge_fit(x, y, alpha)
    reference = Ridge(alpha=alpha, fit_intercept=True, solver="cholesky").fit(x, y)
    assert np.allclose(weights, reference.coef_, atol=1e-8) and intercept == pytest.approx(reference.intercept_)


def test_the_metrics_by_hand():
    predicted, counts = np.array([2.4, 2.6, 5.0, 0.2, 7.49]), np.array([2.0, 2.0, 3.0, 1.0, 6.0])
    columns = count_scores(predicted, counts)
    # rounded 2, 3, 5, 0, 7 against 2, 2, 3, 1, 6: misses 0, 1, 2, 1, 1
    assert columns["exact"].tolist() == [1, 0, 0, 0, 0]
    assert columns["off_by_one"].tolist() == [0, 1, 0, 1, 1]
    assert columns["within_one"].tolist() == [1, 1, 0, 1, 1]
    assert columns["mae"] == pytest.approx([0.4, 0.6, 2.0, 0.8, 1.49])


def test_the_probe_declares_its_protocol():
    spec = get_probe("counting")
    assert (spec.protocol, spec.headline, spec.feature_mode, spec.fit) == (
        "visible-object-count/v1", "mae", "dense", "squash")
    assert spec.higher_is_better({"mae": 1.0, "exact": 0.5}) == {"mae": False, "exact": True}
    with pytest.raises(ValueError, match="alpha"):
        validate_probe_params("counting", {"train_split": "train", "eval_split": "val", "alpha": -1})


def test_ridge_fits_several_outputs_at_once_as_scikit_learn_does():
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((15, 30)), rng.standard_normal((15, 3))
    weights, intercept = ridge_fit(x, y, 2.0)
    reference = Ridge(alpha=2.0, fit_intercept=True, solver="cholesky").fit(x, y)
    assert np.allclose(weights.T, reference.coef_, atol=1e-8) and np.allclose(intercept, reference.intercept_)
