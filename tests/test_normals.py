"""Surface normals' uncertainty-aware loss (Bae et al. 2021's angular vMF), its off switch, the near-chance warning,
the normal source in the record's dataset, and the board's chance row."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.integrate import quad

from harness.leaderboard.statistics.chance import NORMALS_CHANCE, chance_rows
from harness.probes import ProbeInputs, get_probe, validate_probe_params
from harness.probes.dense import metrics as M
from harness.probes.dense.normals import (
    ARCCOS_EPS,
    KAPPA_FLOOR,
    NORMALS,
    NORMALS_UNCERTAIN,
    _near_chance,
    angular_vmf_nll,
    normals_task,
)

PARAMS = {"train_split": "train", "eval_split": "val", "epochs": 3, "lr": 0.01, "weight_decay": 0.0,
          "batch_size": 2, "head": "linear", "target_size": 16}


def _transcribed_nll(direction: np.ndarray, kappa_logit: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Bae et al.'s eq. 4 written out in float64, per cell: −log(κ²+1) + κθ + log(1 + e^{−κπ})."""
    unit = direction / np.linalg.norm(direction, axis=0, keepdims=True)
    theta = np.arccos(np.clip(np.sum(unit * target, axis=0), -1 + ARCCOS_EPS, 1 - ARCCOS_EPS))
    kappa = np.where(kappa_logit > 0, kappa_logit, np.expm1(kappa_logit)) + KAPPA_FLOOR  # ELU + 1.01
    return -np.log(kappa ** 2 + 1) + kappa * theta + np.log(1 + np.exp(-kappa * np.pi))


def test_loss_equals_the_papers_formula_on_valid_cells():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 4, 5, 5))
    target = rng.normal(size=(2, 3, 5, 5))
    target /= np.linalg.norm(target, axis=1, keepdims=True)
    valid = rng.random((2, 5, 5)) > 0.3
    got = angular_vmf_nll(torch.from_numpy(logits), torch.from_numpy(target), torch.from_numpy(valid))
    per_cell = np.stack([_transcribed_nll(logits[i, :3], logits[i, 3], target[i]) for i in range(2)])
    assert float(got) == pytest.approx(per_cell[valid].mean(), rel=1e-12)


@pytest.mark.parametrize("kappa", [0.01, 0.5, 3.0, 40.0])
def test_the_loss_is_a_normalised_density_on_the_sphere(kappa):
    """exp(−L − log 2π) integrates to 1 over the sphere for every κ: the loss is a negative log-likelihood (up to
    the constant log 2π), so κ cannot lower it for free."""
    def density(theta: float) -> float:
        nll = -math.log(kappa ** 2 + 1) + kappa * theta + math.log(1 + math.exp(-kappa * math.pi))
        return math.exp(-nll) / (2 * math.pi) * math.sin(theta) * 2 * math.pi  # solid angle: sin θ dθ dφ

    total, _ = quad(density, 0.0, math.pi, limit=200)
    assert total == pytest.approx(1.0, abs=1e-9)


def test_kappa_rises_where_the_direction_is_right_and_falls_where_it_is_wrong():
    """The NLL's κ-optimum is large for a small error and small for a large one: what lets the head down-weight
    the cells it cannot know."""
    target = torch.tensor([0.0, 0.0, 1.0]).reshape(1, 3, 1, 1)
    valid = torch.ones(1, 1, 1, dtype=torch.bool)

    def best_kappa_logit(direction):
        grid = torch.linspace(-0.99, 60.0, 6000)
        losses = [float(angular_vmf_nll(torch.cat([direction, z.reshape(1, 1, 1, 1)], 1), target, valid))
                  for z in grid]
        return float(grid[int(np.argmin(losses))])

    near = best_kappa_logit(torch.tensor([0.0, 0.05, 1.0]).reshape(1, 3, 1, 1))   # ~2.9°
    far = best_kappa_logit(torch.tensor([1.0, 0.0, 0.2]).reshape(1, 3, 1, 1))     # ~79°
    assert near > 10.0 and far < 0.0


def test_uncertainty_is_the_default_and_false_switches_to_three_outputs(scenes, fake_dense_features):
    spec = get_probe("surface_normal")
    assert spec.protocol == "probe3d-surface-normal/v3"
    assert normals_task({}) is NORMALS_UNCERTAIN and normals_task({"uncertainty": False}) is NORMALS
    assert validate_probe_params("surface_normal", {**PARAMS, "uncertainty": False})["uncertainty"] is False
    with pytest.raises(ValueError, match="uncertainty"):
        validate_probe_params("surface_normal", {**PARAMS, "uncertainty": "sometimes"})
    results = {}
    for uncertainty in (True, False):
        inputs = ProbeInputs(scenes, fake_dense_features(scenes), {**PARAMS, "uncertainty": uncertainty}, seed=0)
        results[uncertainty] = spec.run(inputs)
        again = spec.run(inputs)
        assert again.metrics == results[uncertainty].metrics  # seeded
    assert results[True].head.config["out_channels"] == 4 and results[False].head.config["out_channels"] == 3
    assert results[True].metrics["within_11.25"] != results[False].metrics["within_11.25"]
    for result in results.values():
        assert set(result.samples) == {"mean_error", "median_error", "within_11.25", "within_22.5", "within_30.0"}
        for name, column in result.samples.items():
            assert column.mean() == pytest.approx(result.metrics[name], abs=1e-12)


def test_a_saved_uncertainty_head_scores_as_it_ran(scenes, fake_dense_features):
    spec = get_probe("surface_normal")
    inputs = ProbeInputs(scenes, fake_dense_features(scenes), PARAMS, seed=0)
    trained = spec.run(inputs)
    scored = spec.score_head(inputs, trained.head)
    assert {k: v for k, v in trained.metrics.items() if k != "train_loss"} == scored.metrics
    with pytest.raises(ValueError, match="the head has 4 outputs"):
        spec.score_head(ProbeInputs(scenes, fake_dense_features(scenes), {**PARAMS, "uncertainty": False}, seed=0),
                        trained.head)


def test_near_chance_warns_with_the_off_switch_and_only_near_chance():
    prior = {"within_11.25": 0.4, "mean_error": 20.0}
    # closes 10% of the gap to 1: no warning, even with a mean error far above the prior's (a given-up tail)
    assert _near_chance({"within_11.25": 0.46, "mean_error": 47.0}, prior, uncertainty=True) == []
    (warning,) = _near_chance({"within_11.25": 0.42, "mean_error": 15.0}, prior, uncertainty=True)
    assert "0.420" in warning and "0.400" in warning and "3.3%" in warning
    assert "probes.surface_normal.uncertainty: false" in warning
    (plain,) = _near_chance({"within_11.25": 0.3, "mean_error": 25.0}, prior, uncertainty=False)
    assert "uncertainty: false" not in plain and "random-init controls" in plain
    assert _near_chance({"within_11.25": 1.0}, {"within_11.25": 1.0}, uncertainty=True)  # nothing left to close


def test_a_head_on_features_that_carry_nothing_is_warned_about(scenes):
    """Noise features, independent of the image: what the head learns from them does not carry to the eval
    split, it ends no better than the prior it started from, and the run says so."""
    spec = get_probe("surface_normal")
    noise = {item.path: np.random.default_rng(i).normal(size=(16, 8, 8)).astype(np.float32)
             for i, item in enumerate(scenes.items)}
    result = spec.run(ProbeInputs(scenes, lambda item: noise[item.path], PARAMS, seed=0))
    assert len(result.warnings) == 1 and "near chance" in result.warnings[0]
    assert "uncertainty: false" in result.warnings[0]


def test_scenes_record_their_normal_source(scenes):
    assert scenes.extra["target_sources"]["normals"].startswith("rendered")


def test_normals_chance_row_is_a_uniform_direction_on_the_sphere():
    """Every metric of the chance row by Monte Carlo through the probe's own metric: directions drawn uniformly on
    the sphere against any fixed truth."""
    rng = np.random.default_rng(0)
    pred = rng.normal(size=(4, 3, 300, 300))
    truth = np.zeros_like(pred)
    truth[:, 2] = 1.0
    truth[1] = np.array([0.6, 0.0, 0.8])[:, None, None]
    got = M.normals_per_image(pred, truth, np.ones((4, 300, 300), dtype=bool))
    for name, expected in NORMALS_CHANCE.items():
        scale = 0.5 if "error" in name else 0.004  # degrees; shares
        assert got[name].mean() == pytest.approx(expected, abs=scale), name
    board = {"protocol": "probe3d-surface-normal/v3", "headline_metric": "within_11.25",
             "metrics": [{"metric": m} for m in ("within_11.25", "mean_error", "train_loss")]}
    (row,) = chance_rows(board, None)
    assert row.predictor == "uniform direction" and set(row.metrics) == {"within_11.25", "mean_error"}
