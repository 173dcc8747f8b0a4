"""Ground truth derived from a rendered procedural scene: labels, edges, texture orientation, keypoints and 2-D
boxes.

Label map (semantic.png): 0 background (sky: no surface), 1 plane (the ground), 2 box, 3 sphere,
4 cylinder. instance.png numbers objects 1..n in `Scene.objects` order (0 = plane or background), and
foreground.png is `instance > 0`.

Edges are split by cause, so a probe can ask which one a feature sees:
- texture edges: the Sobel magnitude of the albedo's luminance, kept only where the whole 3×3 window
  lies on one surface. Paint boundaries count; shading, shadows and the outlines of surfaces do not.
- occlusion edges: a pixel whose 4-neighbour lies on another surface more than `threshold`·z further
  away (or on the background). Every primitive is convex, so no surface occludes itself and a depth
  jump can only happen between surfaces; asking for a surface change keeps the steep but smooth depth
  slope of the ground near the horizon from reading as an edge. Contacts (an object on the ground) have
  no jump and are not edges.

Texture orientation is the albedo luminance's structure tensor J = G * (∇L ∇Lᵀ) (the texture-edge gradients,
integrated with a binomial window over the pixel's own surface): its dominant eigenvector is the direction across
the paint's stripes and edges, at angle θ = ½·atan2(2·Jxy, Jxx − Jyy) from the image's x axis (y down), and its
coherence (λ₁ − λ₂) / (λ₁ + λ₂) says how one-directional the texture is there (1: stripes, 0: a corner or noise).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from harness.datasets.scene_render import Primitive, RenderedScene, Scene, nearest_hit

SEMANTIC_CLASSES = ("background", "plane", "box", "sphere", "cylinder")
KEYPOINT_KINDS = ("box_corner", "cylinder_cap_centre", "sphere_centre")
_LUMA = (0.2126, 0.7152, 0.0722)  # Rec. 709 luminance weights
_VISIBILITY_TOLERANCE = 1e-6  # relative: a hit this close to the keypoint is the keypoint's own surface


def semantic_maps(scene: Scene, surface: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(semantic, instance) uint8 maps from the per-pixel surface index (-1 = background)."""
    classes = [0] + [SEMANTIC_CLASSES.index(p.kind) for p in scene.surfaces]
    instances = [0] * (1 + (scene.ground is not None)) + list(range(1, len(scene.objects) + 1))
    lookup = surface.astype(np.int64) + 1
    return np.asarray(classes, dtype=np.uint8)[lookup], np.asarray(instances, dtype=np.uint8)[lookup]


def _albedo_gradients(render: RenderedScene) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sobel gradients (x right, y down) of the albedo luminance (kernel / 8: a step of Δ reads Δ / 2), and where
    the whole 3×3 window lies on one surface (elsewhere the "gradient" is a surface's outline, not its paint)."""
    albedo = render.albedo.astype(np.float64)
    luma = albedo[..., 0] * _LUMA[0] + albedo[..., 1] * _LUMA[1] + albedo[..., 2] * _LUMA[2]
    p = np.pad(luma, 1, mode="edge")
    gx = ((p[:-2, 2:] + 2.0 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2.0 * p[1:-1, :-2] + p[2:, :-2])) / 8.0
    gy = ((p[2:, :-2] + 2.0 * p[2:, 1:-1] + p[2:, 2:]) - (p[:-2, :-2] + 2.0 * p[:-2, 1:-1] + p[:-2, 2:])) / 8.0
    surface = render.surface
    padded = np.pad(surface, 1, mode="edge")
    height, width = surface.shape
    one_surface = surface >= 0
    for dy, dx in itertools.product(range(3), repeat=2):
        one_surface &= padded[dy: dy + height, dx: dx + width] == surface
    return gx, gy, one_surface


def texture_edges(render: RenderedScene) -> np.ndarray:
    """Sobel gradient magnitude of the albedo luminance, on one surface only, float32."""
    gx, gy, one_surface = _albedo_gradients(render)
    return np.where(one_surface, np.sqrt(gx * gx + gy * gy), 0.0).astype(np.float32)


def binomial_kernel(scale: float) -> np.ndarray:
    """The binomial weights C(n, k) / 2ⁿ with n = round(4·scale²): a Gaussian of standard deviation ≈ `scale` px
    (a Binomial(n, ½) has variance n / 4) whose weights are exact dyadic fractions, so smoothing with it is the
    same bytes on every CPU (no exp() to round differently)."""
    n = max(1, round(4.0 * scale * scale))
    if n > 52:  # C(n, k) and 2ⁿ stay exact in float64 up to here
        raise ValueError(f"orientation_scale must be at most 3.6 px; got {scale}")
    return np.array([math.comb(n, k) for k in range(n + 1)], dtype=np.float64) / float(2**n)


def _smooth(values: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Separable correlation over the last two axes with zero padding, as a fixed-order sum of shifted copies (the
    same arithmetic in the same order on every machine)."""
    radius = len(kernel) // 2
    for axis in (values.ndim - 2, values.ndim - 1):
        padded = np.pad(values, [(radius, radius) if a == axis else (0, 0) for a in range(values.ndim)])
        out = np.zeros_like(values)
        for k, weight in enumerate(kernel):
            out = out + weight * np.take(padded, np.arange(k, k + values.shape[axis]), axis=axis)
        values = out
    return values


def structure_tensor(render: RenderedScene, scale: float) -> np.ndarray:
    """(H, W, 3) float32 [Jxx, Jxy, Jyy]: the albedo luminance's structure tensor, its gradient products (on one
    surface only, as `texture_edges`) integrated with a binomial window of ≈ `scale` px over the pixel's own surface
    alone, so a texture's orientation is not mixed with its neighbour's across an outline. Zero off every surface
    and on untextured paint (a flat texture, the inside of a wide checker cell)."""
    gx, gy, one_surface = _albedo_gradients(render)
    products = np.stack([gx * gx, gx * gy, gy * gy]) * one_surface
    kernel = binomial_kernel(scale)
    tensor = np.zeros(products.shape)
    surface = render.surface
    for index in np.unique(surface[surface >= 0]):
        mine = surface == index
        tensor[:, mine] = _smooth(products * mine, kernel)[:, mine]
    return np.moveaxis(tensor, 0, -1).astype(np.float32)


def occlusion_edges(render: RenderedScene, threshold: float) -> np.ndarray:
    """uint8 map: 1 on the near side of a depth discontinuity (Δz / z > threshold) or a silhouette."""
    surface = render.surface
    depth = np.where(surface >= 0, render.depth.astype(np.float64), np.inf)  # background: infinitely far
    edge = np.zeros(surface.shape, dtype=bool)
    whole, head, tail = slice(None), slice(None, -1), slice(1, None)
    for here, there in (((whole, head), (whole, tail)), ((whole, tail), (whole, head)),
                        ((head, whole), (tail, whole)), ((tail, whole), (head, whole))):
        near, far = depth[here], depth[there]
        with np.errstate(invalid="ignore"):  # background next to background: inf − inf, not an edge anyway
            edge[here] |= (
                (surface[here] >= 0) & (surface[here] != surface[there]) & (far - near > threshold * near))
    return edge.astype(np.uint8)


def _keypoint_candidates(scene: Scene) -> list[tuple[int, int, tuple, tuple]]:
    """(kind index, instance, keypoint, test point) per object keypoint, in world coordinates.

    The test point is where visibility is checked: the keypoint itself for box corners and cap
    centres (they lie on the surface); for a sphere's centre, the sphere's point nearest the camera.
    """
    candidates = []
    position = scene.camera.position
    for index, primitive in enumerate(scene.objects):
        sx, sy, sz = primitive.size
        if primitive.kind == "box":
            for signs in itertools.product((-1.0, 1.0), repeat=3):
                corner = _world_point(primitive, (signs[0] * sx, signs[1] * sy, signs[2] * sz))
                candidates.append((0, index + 1, corner, corner))
        elif primitive.kind == "cylinder":
            for sign in (-1.0, 1.0):
                cap = _world_point(primitive, (0.0, 0.0, sign * sz))
                candidates.append((1, index + 1, cap, cap))
        else:
            centre = primitive.center
            toward = [position[k] - centre[k] for k in range(3)]
            length = float(np.sqrt(toward[0] * toward[0] + toward[1] * toward[1] + toward[2] * toward[2]))
            front = tuple(centre[k] + sx * toward[k] / length for k in range(3))
            candidates.append((2, index + 1, centre, front))
    return candidates


def _world_point(primitive: Primitive, local: tuple[float, float, float]) -> tuple[float, float, float]:
    x, y, z = primitive.to_world(local)
    return (primitive.center[0] + x, primitive.center[1] + y, primitive.center[2] + z)


def visible_keypoints(scene: Scene) -> list[dict[str, Any]]:
    """Keypoints inside the image whose test point no surface hides, as {x, y, kind, object, depth}.

    Visibility is exact: a ray from the camera to the test point (t = 1 there) must meet no surface
    before it, which also hides the corners and caps that face away (their own object is in front).
    """
    camera = scene.camera
    candidates = _keypoint_candidates(scene)
    if not candidates:
        return []
    tests = np.asarray([c[3] for c in candidates], dtype=np.float64)
    direction = tuple(tests[:, k] - camera.position[k] for k in range(3))
    hit, _ = nearest_hit(scene.surfaces, camera.position, direction)
    keypoints = []
    for (kind, instance, point, _), t in zip(candidates, hit, strict=True):
        x, y, z = camera.project(point)
        inside = z > 0 and 0.0 <= x < camera.size and 0.0 <= y < camera.size
        if inside and t >= 1.0 - _VISIBILITY_TOLERANCE:
            keypoints.append({"x": x, "y": y, "kind": KEYPOINT_KINDS[kind], "object": instance, "depth": z})
    return keypoints


def keypoint_response(keypoints: list[dict[str, Any]], size: int, sigma: float) -> np.ndarray:
    """(H, W, len(KEYPOINT_KINDS)) float32: per kind, the max over its keypoints of a unit-peak Gaussian.

    Values are rounded to float16 precision (stored as float32): exp() may differ by an ulp between
    NumPy's SIMD code paths, and that rounding keeps such a difference from changing the file's bytes.
    """
    response = np.zeros((size, size, len(KEYPOINT_KINDS)))
    centres = np.arange(size, dtype=np.float64) + 0.5
    for channel, kind in enumerate(KEYPOINT_KINDS):
        points = np.asarray([(k["x"], k["y"]) for k in keypoints if k["kind"] == kind], dtype=np.float64)
        if not points.size:
            continue
        along_x = np.exp(-((centres[None, :] - points[:, :1]) ** 2) / (2.0 * sigma * sigma))
        along_y = np.exp(-((centres[None, :] - points[:, 1:]) ** 2) / (2.0 * sigma * sigma))
        response[..., channel] = np.max(along_y[:, :, None] * along_x[:, None, :], axis=0)
    return response.astype(np.float16).astype(np.float32)


def object_boxes(scene: Scene, instance: np.ndarray) -> list[dict[str, Any]]:
    """Tight 2-D boxes of each object's visible pixels: [x0, y0, x1, y1] in pixel edges (x1, y1 exclusive)."""
    boxes = []
    for index, primitive in enumerate(scene.objects):
        rows, cols = np.nonzero(instance == index + 1)
        if rows.size:
            boxes.append({"instance": index + 1, "class_id": SEMANTIC_CLASSES.index(primitive.kind),
                          "box": [int(cols.min()), int(rows.min()), int(cols.max()) + 1, int(rows.max()) + 1],
                          "area": int(rows.size)})
    return boxes
