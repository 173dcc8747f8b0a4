"""The illuminant probe (`light-direction/v1`): the light in the camera's frame, and angular errors, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from harness.probes import get_probe
from harness.probes.illuminant import angular_errors, light_in_camera


def _annotations(right, down, forward, light) -> dict:
    return {"camera": {"right": right, "down": down, "forward": forward}, "light": {"direction": light}}


def test_the_light_is_expressed_along_the_cameras_axes():
    # a camera whose axes are the world's: the direction as given, made unit length
    same = light_in_camera(_annotations([1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 2]))
    assert same.tolist() == [0.0, 0.0, 1.0]
    # a camera turned 90° about the vertical: world x is the camera's forward, world z its left
    turned = light_in_camera(_annotations([0, 0, -1], [0, 1, 0], [1, 0, 0], [1, 0, 1]))
    assert np.allclose(turned, [-np.sqrt(0.5), 0.0, np.sqrt(0.5)])


def test_angular_errors_by_hand():
    truth = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 0, 0]])
    predicted = np.array([[2.0, 0, 0], [1.0, 1.0, 0], [0, 0, -3.0], [0, 0, 0]])
    assert angular_errors(predicted, truth) == pytest.approx([0.0, 45.0, 180.0, 90.0])


def test_the_probe_declares_its_protocol():
    spec = get_probe("illuminant")
    assert (spec.protocol, spec.headline, spec.feature_mode, spec.fit) == (
        "light-direction/v1", "angular_error", "dense", "squash")
    assert spec.higher_is_better({"angular_error": 1.0, "within_15": 0.5}) == {
        "angular_error": False, "within_15": True}
