"""Scoring corner detections (NumPy only): one-to-one matching within ε pixels, precision and recall against the
true corners, and the repeatability of a pair's detections under the true pose.

Points are (N, 2) float64 xy pixels in the renderer's convention (the image spans [0, size]; pixel (row i,
column j) has its centre at (j + 0.5, i + 0.5)), as `harness.datasets.scene_corners` stores them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.probes.camera import carry
from harness.probes.relative_pose import OCCLUSION_SLACK


def match_points(first: np.ndarray, second: np.ndarray, epsilon: float) -> np.ndarray:
    """(K, 2) index pairs (i into `first`, j into `second`) of a greedy one-to-one matching: every pair within
    `epsilon` px (distance <= ε), nearest first, ties by (i, j) in raster order of the distance matrix; a point
    already matched is skipped. The rule of detection benchmarks' greedy assignment (each truth matched at most
    once), by distance instead of a score."""
    first = np.asarray(first, dtype=np.float64).reshape(-1, 2)
    second = np.asarray(second, dtype=np.float64).reshape(-1, 2)
    if not len(first) or not len(second):
        return np.empty((0, 2), dtype=np.int64)
    dx = first[:, None, 0] - second[None, :, 0]
    dy = first[:, None, 1] - second[None, :, 1]
    distance = np.sqrt(dx * dx + dy * dy)
    rows, cols = np.nonzero(distance <= epsilon)
    order = np.argsort(distance[rows, cols], kind="stable")  # np.nonzero is raster order: ties stay in it
    used_first, used_second = np.zeros(len(first), dtype=bool), np.zeros(len(second), dtype=bool)
    pairs = []
    for i, j in zip(rows[order], cols[order], strict=True):
        if not used_first[i] and not used_second[j]:
            used_first[i] = used_second[j] = True
            pairs.append((int(i), int(j)))
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


@dataclass(frozen=True)
class DetectionScore:
    precision: float
    recall: float
    f1: float


def detection_score(detections: np.ndarray, truth: np.ndarray, epsilon: float) -> DetectionScore:
    """Precision and recall of one view's detections at ε px after one-to-one matching, and their F1. Empty sets
    follow "nothing said, nothing wrong": precision is 1 with no detections and recall 1 with no true corners, so
    both empty scores 1 and one empty side scores F1 = 0."""
    matched = len(match_points(detections, truth, epsilon))
    precision = matched / len(detections) if len(detections) else 1.0
    recall = matched / len(truth) if len(truth) else 1.0
    f1 = 2.0 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return DetectionScore(float(precision), float(recall), float(f1))


@dataclass(frozen=True)
class ViewPair:
    """What transfers points between the two views of a pair: each view's metric depth (H, W) (0 = no surface),
    intrinsics, and the pose from view 0's camera frame to view 1's (x1 = R·x0 + t)."""

    depth0: np.ndarray
    depth1: np.ndarray
    k0: np.ndarray
    k1: np.ndarray
    rotation: np.ndarray
    translation: np.ndarray
    size: int

    @classmethod
    def from_pair(cls, pair: dict, depth0: np.ndarray, depth1: np.ndarray, size: int) -> ViewPair:
        return cls(np.asarray(depth0, dtype=np.float64), np.asarray(depth1, dtype=np.float64),
                   np.asarray(pair["K0"], dtype=np.float64), np.asarray(pair["K1"], dtype=np.float64),
                   np.asarray(pair["R"], dtype=np.float64), np.asarray(pair["t"], dtype=np.float64), size)

    def reversed(self) -> ViewPair:
        """The same pair seen from view 1: x0 = Rᵀ·x1 − Rᵀ·t."""
        back = self.rotation.T
        return ViewPair(self.depth1, self.depth0, self.k1, self.k0, back, -back @ self.translation, self.size)


def _corner_depth(depth: np.ndarray, points: np.ndarray, size: int) -> np.ndarray:
    """Per point, the nearest surface's depth in the 3×3 pixels around the pixel containing it; 0 where none has a
    surface. The nearest, because a corner on an outline (a box vertex on the silhouette) belongs to the occluding
    surface, and the pixel containing it shows the far side about half the time."""
    height, width = depth.shape
    cols = np.clip(np.floor(points[:, 0] * width / size).astype(np.int64), 0, width - 1)
    rows = np.clip(np.floor(points[:, 1] * height / size).astype(np.int64), 0, height - 1)
    padded = np.pad(np.where(depth > 0, depth, np.inf), 1, constant_values=np.inf)
    nearest = np.full(len(points), np.inf)
    for dy in range(3):
        for dx in range(3):
            nearest = np.minimum(nearest, padded[rows + dy, cols + dx])
    return np.where(np.isfinite(nearest), nearest, 0.0)


def transfer(points: np.ndarray, views: ViewPair) -> tuple[np.ndarray, np.ndarray]:
    """View-0 points carried into view 1: lifted on view 0's depth (`_corner_depth`) along K0⁻¹'s ray, moved by
    (R, t) and projected with K1. Returns (N, 2) xy pixels in view 1 and (N,) bool: whether view 1 sees the point
    (it has a surface under it in view 0, lands in front of view 1 and inside its image, and view 1's depth at the
    pixel there is no nearer than (1 − OCCLUSION_SLACK) of the point's own: relative_pose's oracle's test, except
    that a pixel with no surface (sky behind a silhouette corner) hides nothing)."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    z0 = _corner_depth(views.depth0, points, views.size)
    x1, y1, z1 = carry(points, z0, views.k0, views.rotation, views.translation, views.k1)
    size = views.size
    inside = (z0 > 0) & (z1 > 0) & (x1 >= 0) & (x1 < size) & (y1 >= 0) & (y1 < size)
    height, width = views.depth1.shape
    seen = np.zeros(len(points))
    seen[inside] = views.depth1[(y1[inside] * height / size).astype(np.int64),
                                (x1[inside] * width / size).astype(np.int64)]
    visible = inside & ((seen == 0) | (seen >= (1.0 - OCCLUSION_SLACK) * z1))
    return np.stack([x1, y1], axis=-1), visible


@dataclass(frozen=True)
class Repeatability:
    repeatability: float
    repeated: int
    common: int  # min(view-0 points view 1 sees, view-1 points view 0 sees): the denominator


def repeatability(points0: np.ndarray, points1: np.ndarray, views: ViewPair, epsilon: float) -> Repeatability:
    """Mikolajczyk & Schmid's repeatability ("Scale & Affine Invariant Interest Point Detectors", IJCV 2004) with
    the true geometry: the view-0 points view 1 sees, carried into it, matched one-to-one within ε px to the view-1
    points view 0 sees; repeated / min(the two counts). 0 when either count is 0 (a detector that finds nothing in
    the views' common part repeats nothing)."""
    carried, seen0 = transfer(points0, views)
    _, seen1 = transfer(points1, views.reversed())
    common = int(min(seen0.sum(), seen1.sum()))
    repeated = len(match_points(carried[seen0], np.asarray(points1, dtype=np.float64).reshape(-1, 2)[seen1],
                                epsilon))
    return Repeatability(repeated / common if common else 0.0, repeated, common)
