"""The scenes' intrinsic maps and texture orientation (issue 29 items 3 and 5): the renderer's decomposition is exact,
the structure tensor finds a known orientation, and the albedo/shading/orientation metrics match direct
transcriptions of their definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from harness.datasets.scene_render import RenderedScene, render_scene
from harness.datasets.scene_targets import binomial_kernel, structure_tensor
from harness.datasets.scenes import sample_scene
from harness.probes import get_probe
from harness.probes.base import ProbeInputs
from harness.probes.dense.intrinsic import encode_albedo, encode_shading, intrinsic_per_image, lmse_window
from harness.probes.dense.orientation import encode_orientation, orientation_error_deg, orientation_per_image


def _render(index: int = 3, size: int = 96) -> RenderedScene:
    return render_scene(sample_scene(np.random.default_rng([0, 1, index]), size))


def test_linear_colour_is_albedo_times_shading_to_the_last_bit():
    render = _render()
    on = render.surface >= 0
    linear = render.albedo.astype(np.float64) * render.shading.astype(np.float64)[..., None]
    rgb = np.rint(np.sqrt(np.clip(linear, 0.0, 1.0)) * 255.0)
    # float32 storage of both factors still quantises to the same 8-bit image
    assert np.array_equal(rgb[on], render.rgb[on].astype(np.float64))
    assert (render.shading[on] > 0).all() and (render.shading[~on] == 0).all()
    assert (render.albedo[on].min(axis=-1) > 0).all() and (render.albedo[~on] == 0).all()


def test_binomial_kernel_is_a_normalised_gaussian_of_the_asked_width():
    kernel = binomial_kernel(2.0)
    offsets = np.arange(len(kernel)) - len(kernel) // 2
    assert kernel.sum() == 1.0 and len(kernel) == 17
    assert math.sqrt(float(np.sum(kernel * offsets**2))) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="orientation_scale"):
        binomial_kernel(5.0)


@pytest.mark.parametrize("degrees", [0.0, 30.0, 75.0, 120.0])
def test_structure_tensor_finds_the_orientation_of_stripes(degrees):
    size, theta = 64, math.radians(degrees)
    rows, cols = np.mgrid[0:size, 0:size] + 0.5
    # a sinusoid varying along the direction (cos θ, sin θ) in (x right, y down): its gradient points along θ
    phase = (cols * math.cos(theta) + rows * math.sin(theta)) / 4.0
    luma = 0.5 + 0.4 * np.sin(phase)
    render = RenderedScene(rgb=np.zeros((size, size, 3), np.uint8), depth=np.ones((size, size), np.float32),
                           normals=np.zeros((size, size, 3), np.float32),
                           albedo=np.repeat(luma[..., None], 3, axis=-1).astype(np.float32),
                           shading=np.ones((size, size), np.float32), surface=np.zeros((size, size), np.int16))
    target, valid = encode_orientation(structure_tensor(render, 2.0), 8)
    centre = (slice(2, 6), slice(2, 6))  # away from the zero-padded border
    assert valid[centre].all()
    angle = np.degrees(np.arctan2(target[1][centre], target[0][centre])) / 2.0 % 180.0
    assert np.allclose(angle, degrees % 180.0, atol=1.0)
    assert (target[2][centre] > 0.95).all()  # stripes are coherent


def test_structure_tensor_is_integrated_over_the_pixels_own_surface_only():
    render = _render()
    tensor = structure_tensor(render, 2.0).astype(np.float64)
    sky = render.surface < 0
    assert (tensor[sky] == 0).all()
    jxx, jxy, jyy = np.moveaxis(tensor, -1, 0)
    assert (jxx >= 0).all() and (jyy >= 0).all() and (jxx * jyy - jxy * jxy >= -1e-9).all()  # PSD


def test_orientation_metrics_by_hand():
    # cells at true orientations 0° and 90° (doubled: 0° and 180°), predictions 10° and 60° off, coherences 1 and 0.5
    target = np.zeros((1, 3, 1, 2))
    target[0, :, 0, 0] = [1.0, 0.0, 1.0]
    target[0, :, 0, 1] = [-1.0, 0.0, 0.5]
    pred = np.zeros((1, 2, 1, 2))
    pred[0, :, 0, 0] = [math.cos(math.radians(20)), math.sin(math.radians(20))]
    pred[0, :, 0, 1] = [math.cos(math.radians(180 + 120)), math.sin(math.radians(180 + 120))]
    columns = orientation_per_image(pred, target, np.ones((1, 1, 2), bool))
    assert columns["angular_error"][0] == pytest.approx((1.0 * 10 + 0.5 * 60) / 1.5)
    assert columns["mean_error_unweighted"][0] == pytest.approx(35.0)
    assert columns["within_15"][0] == pytest.approx(1.0 / 1.5)
    assert columns["within_30"][0] == pytest.approx(1.0 / 1.5)
    # orientation is modulo 180°: the opposite direction (doubled angle unchanged) is no error
    assert orientation_error_deg(np.array([1.0, 0.0]), np.array([1.0, 0.0])) == 0.0
    assert orientation_error_deg(np.array([-1.0, 0.0]), np.array([1.0, 0.0])) == pytest.approx(90.0)


def _lmse_reference(p: np.ndarray, t: np.ndarray, v: np.ndarray) -> float:
    """Grosse et al.'s LMSE written out: every window, every channel, the best scale by a numerical minimiser."""
    size, w = t.shape[-1], lmse_window(t.shape[-1])
    local = reference = 0.0
    for i in range(0, size - w + 1, w // 2):
        for j in range(0, size - w + 1, w // 2):
            for c in range(len(t)):
                pw, tw = p[c, i:i + w, j:j + w][v[i:i + w, j:j + w]], t[c, i:i + w, j:j + w][v[i:i + w, j:j + w]]
                best = minimize_scalar(lambda a, pw=pw, tw=tw: float(((a * pw - tw) ** 2).sum()), method="brent",
                                       options={"xtol": 1e-12})
                local += best.fun
                reference += float((tw**2).sum())
    return local / reference


def test_intrinsic_metrics_against_a_direct_transcription():
    rng = np.random.default_rng(0)
    target = rng.uniform(0.1, 1.0, (2, 3, 30, 30))
    pred = target * 0.7 + rng.normal(0, 0.05, target.shape)
    valid = rng.random((2, 30, 30)) > 0.2
    columns = intrinsic_per_image(pred, target, valid)
    for n in range(2):
        assert columns["lmse"][n] == pytest.approx(_lmse_reference(pred[n], target[n], valid[n]), rel=1e-4)
        p, t, v = pred[n][:, valid[n]], target[n][:, valid[n]], valid[n]
        alpha = (p * t).sum(axis=1, keepdims=True) / (p * p).sum(axis=1, keepdims=True)
        assert columns["si_mse"][n] == pytest.approx(np.mean((alpha * p - t) ** 2))
        assert columns["mse"][n] == pytest.approx(np.mean((p - t) ** 2)) and v.any()
    # scale invariance; perfect is 0; predicting nothing is 1
    assert intrinsic_per_image(pred * 3.0, target, valid)["si_mse"] == pytest.approx(columns["si_mse"])
    assert intrinsic_per_image(target, target, valid)["lmse"] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert intrinsic_per_image(np.zeros_like(target), target, valid)["lmse"] == pytest.approx([1.0, 1.0])
    shading = intrinsic_per_image(pred[:, 0], target[:, 0], valid)  # one channel, (N, S, S)
    assert shading["si_mse"].shape == (2,)
    assert np.isnan(intrinsic_per_image(pred, target, np.zeros_like(valid))["lmse"]).all()


def test_intrinsic_encoders_average_surface_pixels_only():
    render = _render(size=64)
    albedo, valid = encode_albedo(render.albedo, 8)
    shading, shading_valid = encode_shading(render.shading, 8)
    assert albedo.shape == (3, 8, 8) and shading.shape == (8, 8)
    assert np.array_equal(valid, shading_valid)
    assert (albedo[:, valid] > 0).all() and (shading[valid] > 0).all()


PARAMS = {"train_split": "train", "eval_split": "val", "epochs": 3, "lr": 0.01, "weight_decay": 0.0,
          "batch_size": 2, "head": "linear", "target_size": 16}


@pytest.mark.parametrize(("task", "protocol"), [("albedo", "intrinsic-albedo/v1"), ("shading", "intrinsic-shading/v1"),
                                                ("orientation", "structure-tensor-orientation/v1")])
def test_new_scene_probes_end_to_end(scenes, fake_dense_features, task, protocol):
    spec = get_probe(task)
    assert spec.protocol == protocol and spec.headline in spec.lower_is_better
    result = spec.run(ProbeInputs(scenes, fake_dense_features(scenes), PARAMS, seed=0))
    assert result.sample_ids == [i.path for i in scenes.split("val")]
    for name, column in result.samples.items():
        assert np.isclose(column.mean(), result.metrics[name], rtol=0, atol=1e-12), name
    if task == "orientation":
        assert 0.0 <= result.metrics["angular_error"] <= 90.0
    else:
        assert 0.0 <= result.metrics["si_mse"] <= result.metrics["mse"] + 1e-12
    again = spec.run(ProbeInputs(scenes, fake_dense_features(scenes), PARAMS, seed=0))
    assert again.metrics == result.metrics
