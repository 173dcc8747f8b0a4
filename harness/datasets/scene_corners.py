"""Exact corner ground truth of a rendered procedural scene, for the corner probe (`harness.probes.corners`).

Two kinds of corner, stored together as (N, 3) float32 rows (x, y, kind), x right and y down in the renderer's
pixel convention (the image spans [0, W]; pixel (row i, column j) has its centre at (j + 0.5, i + 0.5)):

- kind 0, *object vertices*: the box corners `visible_keypoints` finds (inside the image and hidden by no
  surface, tested exactly by a ray), at their exact projected positions. Boxes are the only primitives with
  vertices: a cylinder's cap rim is a circle (its silhouette corners move along the rim as the camera moves, so
  they are no fixed 3-D point and would not repeat by construction) and `visible_keypoints`' cap and sphere
  centres lie inside a smooth surface, which no corner detector could find.
- kind 1, *texture corners*: Shi–Tomasi corners of the painted albedo (Shi & Tomasi, "Good Features to Track",
  CVPR 1994): the smaller eigenvalue λ₂ of the albedo luminance's structure tensor (`structure_tensor` at
  `scale` px, integrated over the pixel's own surface only, so no outline or shading makes a corner), kept where
  it is a 3×3 local maximum above `threshold` × the image's largest λ₂, then thinned greedily strongest first so
  that no two lie within `radius` px: OpenCV's `goodFeaturesToTrack` rule (`qualityLevel`, `minDistance`). A
  texture corner within `radius` of an object vertex is dropped, the vertex standing for it. Texture corners sit
  at pixel centres (no sub-pixel refinement): the probe's tolerance is several pixels.

Determinism: λ₂ = (Jxx + Jyy)/2 − sqrt(((Jxx − Jyy)/2)² + Jxy²) in float64 from the stored float32 tensor (+ − ×
÷ and IEEE's correctly rounded sqrt only), comparisons are exact, ties in strength go to the earlier pixel in
raster order, and the vertices come from `Camera.project` (+ − × ÷ on Python floats): the same bytes on every
machine.
"""

from __future__ import annotations

import numpy as np

from harness.datasets.scene_render import RenderedScene, Scene
from harness.datasets.scene_targets import structure_tensor, visible_keypoints

CORNER_KINDS = ("object_vertex", "texture")
VERTEX_KIND = "box_corner"  # the one `visible_keypoints` kind that is a corner of the surface


def shi_tomasi_response(tensor: np.ndarray) -> np.ndarray:
    """(H, W) float64 λ₂, the structure tensor's smaller eigenvalue, from (H, W, 3) [Jxx, Jxy, Jyy]; clipped at 0
    (a rank-1 tensor can round to a tiny negative)."""
    jxx, jxy, jyy = (tensor[..., k].astype(np.float64) for k in range(3))
    half_difference = (jxx - jyy) / 2.0
    smaller = (jxx + jyy) / 2.0 - np.sqrt(half_difference * half_difference + jxy * jxy)
    return np.maximum(smaller, 0.0)


def local_maxima(response: np.ndarray) -> np.ndarray:
    """(H, W) bool: positive pixels no 8-neighbour exceeds (plateaus keep every pixel; `thin` picks one)."""
    padded = np.pad(response, 1, constant_values=-np.inf)
    height, width = response.shape
    keep = response > 0.0
    for dy in range(3):
        for dx in range(3):
            if (dy, dx) != (1, 1):
                keep &= response >= padded[dy: dy + height, dx: dx + width]
    return keep


def thin(points: np.ndarray, strength: np.ndarray, radius: float,
         taken: np.ndarray | None = None) -> np.ndarray:
    """Indices of `points` (N, 2) kept by greedy non-maximum suppression: strongest first (ties: lower index first),
    a point is kept unless a kept point (or one of `taken`, (M, 2)) lies within `radius` (distance <= radius)."""
    order = np.argsort(-np.asarray(strength, dtype=np.float64), kind="stable")
    points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    previous = np.zeros((0, 2)) if taken is None else np.asarray(taken, dtype=np.float64).reshape(-1, 2)
    chosen = np.concatenate([previous, np.zeros((len(points), 2))])  # filled as points are kept
    count = len(previous)
    limit = float(radius) * float(radius)
    kept: list[int] = []
    for index in order:
        dx, dy = chosen[:count, 0] - points[index, 0], chosen[:count, 1] - points[index, 1]
        if count and bool(np.any(dx * dx + dy * dy <= limit)):
            continue
        kept.append(int(index))
        chosen[count] = points[index]
        count += 1
    return np.asarray(kept, dtype=np.int64)


def texture_corners(response: np.ndarray, threshold: float, radius: float,
                    taken: np.ndarray | None = None) -> np.ndarray:
    """(N, 2) float64 xy pixel centres of the Shi–Tomasi corners of `response` (see the module docstring), strongest
    first; none where the image has no response at all."""
    peak = float(response.max()) if response.size else 0.0
    if peak <= 0.0:
        return np.empty((0, 2))
    rows, cols = np.nonzero(local_maxima(response) & (response > threshold * peak))  # raster order
    points = np.stack([cols + 0.5, rows + 0.5], axis=-1).astype(np.float64)
    return points[thin(points, response[rows, cols], radius, taken)]


def scene_corners(scene: Scene, render: RenderedScene, scale: float, threshold: float, radius: float) -> np.ndarray:
    """(N, 3) float32 [x, y, kind]: the visible object vertices (kind 0, in `visible_keypoints`' order), then the
    texture corners (kind 1, strongest first)."""
    vertices = np.asarray([(k["x"], k["y"]) for k in visible_keypoints(scene) if k["kind"] == VERTEX_KIND],
                          dtype=np.float64).reshape(-1, 2)
    texture = texture_corners(shi_tomasi_response(structure_tensor(render, scale)), threshold, radius, vertices)
    rows = [np.concatenate([vertices, np.zeros((len(vertices), 1))], axis=1),
            np.concatenate([texture, np.ones((len(texture), 1))], axis=1)]
    return np.concatenate(rows, axis=0).astype(np.float32)
