"""Pinhole geometry between the two views of a scene pair (NumPy only), shared by the probes that carry points from
one view into the other with the true depth and pose: relative_pose's oracle and corners' repeatability.

Pixels are xy in the renderer's convention (the image spans [0, size], pixel centres at +0.5), which K uses too;
K = [[fx, s, cx], [0, fy, cy], [0, 0, 1]]; the pose takes view 0's camera frame to view 1's (x1 = R·x0 + t).
"""

from __future__ import annotations

import numpy as np


def normalised(points_xy: np.ndarray, camera_matrix: np.ndarray) -> np.ndarray:
    """K⁻¹ · (x, y, 1), as (N, 2): pixels in the view's own normalised camera coordinates (the ray at depth 1)."""
    k = np.asarray(camera_matrix, dtype=np.float64)
    x = (points_xy[:, 0] - k[0, 2] - k[0, 1] * (points_xy[:, 1] - k[1, 2]) / k[1, 1]) / k[0, 0]
    y = (points_xy[:, 1] - k[1, 2]) / k[1, 1]
    return np.ascontiguousarray(np.stack([x, y], axis=-1))


def carry(points_xy: np.ndarray, depth: np.ndarray, k0: np.ndarray, rotation: np.ndarray, translation: np.ndarray,
          k1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """View-0 pixels (N, 2) lifted along K0⁻¹'s ray to their (N,) depths, moved by (R, t) and projected with K1:
    (x1, y1, z1), each (N,), view-1 pixels and the points' depth in view 1. A point at or behind view 1's camera
    (z1 ≤ 0) projects to whatever the division gives (inf, nan, or a mirrored pixel): callers test z1."""
    rays = normalised(points_xy, k0)
    points0 = np.stack([rays[:, 0] * depth, rays[:, 1] * depth, depth])
    points1 = rotation @ points0 + translation[:, None]
    z1 = points1[2]
    with np.errstate(divide="ignore", invalid="ignore"):
        x1 = (k1[0, 0] * points1[0] + k1[0, 1] * points1[1]) / z1 + k1[0, 2]
        y1 = k1[1, 1] * points1[1] / z1 + k1[1, 2]
    return x1, y1, z1
