"""Two renders of one procedural scene from nearby cameras, with the exact relative pose, for the pose probe.

Each pair is a scene drawn by `scenes.sample_scene` and rendered from its camera (view 0), and the same scene
rendered from a second camera (view 1) moved by a small seeded motion:

1. an orbit about the surface point at view 0's image centre (where its optical axis meets the scene, just
   behind the point `sample_scene` aimed at): a yaw about the vertical through that point, of magnitude drawn
   uniformly in `yaw_deg` = [min, max] with a random sign, then a change of elevation drawn uniformly in
   ±`pitch_deg`; the point stays at the image centre, so the views overlap strongly;
2. a translation of camera and orbit centre together, uniform in a ball of radius `translation_m` metres, so
   the motion is not a pure orbit (the centre point moves off-centre by a little).

The camera is rebuilt with `Camera.look_at`, so both views keep a level horizon (no roll). `yaw_deg`'s minimum
above zero keeps a baseline: a 5° orbit at the scenes' 5.5–8.5 m moves the camera by about half a metre.

Determinism. The scene is drawn from `np.random.default_rng([seed, crc32(split), index])`, the generator
`procedural_scenes` draws scene `index` from, so view 0 of pair i is scene i of a `procedural_scenes` dataset
with the same seed, split, size and object and texture settings. The motion has its own generator,
`[seed, crc32(split), index, MOTION_STREAM]`, so it depends only on (seed, split, index). Angles become
rotations through `_sin_cos`, a Taylor series in + − × ÷ only, and every vector operation is written out by
component, so the geometry (and with it every byte) is the same on every machine (as in `scenes` and
`scene_render`: no libm trigonometry, no BLAS).

Files per pair, in `<split>/pair_<index:05d>/` (the manifest's items are the two `rgb.png`; every other file's
SHA-256 is in the manifest, so the dataset identity covers them):

| file | content |
|---|---|
| view0/rgb.png, view1/rgb.png | (H, W, 3) uint8: the two images (manifest items, label None) |
| view0/depth.npy, view1/depth.npy | (H, W) float32 metric camera z; 0 = no surface |
| view0/corners.npy, view1/corners.npy | (N, 3) float32 [x, y, kind] (`scene_corners`: 0 box vertex, 1 texture) |
| annotations.json | both cameras (K, world→camera R and t, position), the relative pose, the motion drawn |

The corners (for the corner probe) were added after the other files; they are extra files and manifest target
entries only, so every other file is byte for byte what it was for the same parameters. `corner_scale` (the
structure tensor's integration scale, px), `corner_threshold` (relative to the view's strongest response) and
`corner_radius` (the suppression radius, px) are `scene_corners`' parameters and part of the identity.

Pose conventions (OpenCV's): a camera's extrinsics map world points to its frame, x_cam = R · X + t, with
x right, y down, z forward; the relative pose (R, t) maps view 0's camera frame to view 1's, x1 = R · x0 + t
(t in metres). Pixel coordinates are the renderer's: the image spans [0, W] and pixel (row i, column j) has its
centre at (j + 0.5, i + 0.5), so K's principal point is (W / 2, H / 2). The manifest's `extra["pairs"]` lists
each pair with its views' paths, K0, K1, R and t, which is all the pose probe reads.
"""

from __future__ import annotations

import io
import json
import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets.files import write_bytes, write_png
from harness.datasets.kinds import DATASET_KINDS
from harness.datasets.manifest import Item, Manifest
from harness.datasets.scene_corners import scene_corners
from harness.datasets.scene_render import TEXTURE_KINDS, Camera, Scene, nearest_hit, render_scene
from harness.datasets.scenes import checked_draws, sample_scene

__all__ = ["camera_extrinsics", "camera_matrix", "move_camera", "prepare_procedural_scene_pairs",
           "relative_pose"]

Matrix = tuple[tuple[float, float, float], tuple[float, float, float], tuple[float, float, float]]
Vector = tuple[float, float, float]

MOTION_STREAM = 1  # the motion's generator is the scene's key plus this word: independent of the scene's draws
POSE_DECIMALS = 12  # as homography_photos rounds its homographies: far below any error a probe can make
MAX_YAW_DEG = 20.0
MAX_PITCH_DEG = 10.0  # the scenes' camera elevation is 17°–39°: −10° still looks down on the scene
MAX_TRANSLATION_M = 0.3
MIN_CAMERA_HEIGHT_M = 0.1  # a motion that would bring the camera lower is drawn again (a view from the ground)
_SERIES_TERMS = 12  # for |angle| <= 0.5 rad the 12th term is below 1e-29, far under float64's resolution


def _sin_cos(angle: float) -> tuple[float, float]:
    """sin and cos of an angle (radians, |angle| <= 0.5) by their Taylor series: + − × ÷ only, so exactly the same
    bits on every machine (libm's sin and cos are not required to round correctly, and do not everywhere)."""
    if abs(angle) > 0.5:
        raise ValueError(f"_sin_cos is for small angles (|angle| <= 0.5 rad); got {angle}")
    square = angle * angle
    sin_term, cos_term = angle, 1.0
    sin_sum, cos_sum = 0.0, 0.0
    terms = []
    for n in range(_SERIES_TERMS):
        terms.append((sin_term, cos_term))
        sin_term = -sin_term * square / ((2 * n + 2) * (2 * n + 3))
        cos_term = -cos_term * square / ((2 * n + 1) * (2 * n + 2))
    for sin_part, cos_part in reversed(terms):  # smallest first: the rounding of the large terms comes last
        sin_sum, cos_sum = sin_sum + sin_part, cos_sum + cos_part
    return sin_sum, cos_sum


def _ball(rng: np.random.Generator, radius: float) -> Vector:
    """A uniformly random point of the ball of `radius` (rejection sampling from the cube; no trigonometry)."""
    while True:
        x, y, z = (float(v) for v in rng.uniform(-1.0, 1.0, size=3))
        if x * x + y * y + z * z <= 1.0:
            return x * radius, y * radius, z * radius


def move_camera(
    camera: Camera, target: Vector, rng: np.random.Generator, yaw_deg: tuple[float, float], pitch_deg: float,
    translation_m: float,
) -> tuple[Camera, dict[str, Any]]:
    """The second view's camera, and the motion drawn (degrees and metres) for the annotations. A motion that
    would put the camera within MIN_CAMERA_HEIGHT_M of the ground (an orbit centre on a near object, pitched down
    and translated down) is drawn again from the same generator, so the result is still a function of it."""
    for _attempt in range(64):
        moved, motion = _moved_camera(camera, target, rng, yaw_deg, pitch_deg, translation_m)
        if moved.position[2] >= MIN_CAMERA_HEIGHT_M:
            return moved, motion
    raise ValueError("no camera motion within the bounds keeps the camera above the ground; narrow pitch_deg or "
                     "translation_m")


def _moved_camera(
    camera: Camera, target: Vector, rng: np.random.Generator, yaw_deg: tuple[float, float], pitch_deg: float,
    translation_m: float,
) -> tuple[Camera, dict[str, Any]]:
    magnitude = float(rng.uniform(yaw_deg[0], yaw_deg[1]))
    yaw = magnitude if rng.random() < 0.5 else -magnitude
    pitch = float(rng.uniform(-pitch_deg, pitch_deg))
    shift = _ball(rng, translation_m)
    ox, oy, oz = (camera.position[k] - target[k] for k in range(3))
    sin_yaw, cos_yaw = _sin_cos(yaw * (math.pi / 180.0))
    ox, oy = cos_yaw * ox - sin_yaw * oy, sin_yaw * ox + cos_yaw * oy  # about the vertical through the target
    # elevation: rotate (horizontal distance, height) by the pitch, keeping the horizontal direction
    horizontal = float(np.sqrt(ox * ox + oy * oy))
    sin_pitch, cos_pitch = _sin_cos(pitch * (math.pi / 180.0))
    new_horizontal = cos_pitch * horizontal - sin_pitch * oz
    oz = sin_pitch * horizontal + cos_pitch * oz
    ox, oy = ox / horizontal * new_horizontal, oy / horizontal * new_horizontal
    new_target = tuple(target[k] + shift[k] for k in range(3))
    position = (new_target[0] + ox, new_target[1] + oy, new_target[2] + oz)
    moved = Camera.look_at(position, new_target, camera.size, camera.focal)
    return moved, {"yaw_deg": yaw, "pitch_deg": pitch, "translation_m": list(shift)}


def camera_matrix(camera: Camera) -> Matrix:
    """K, in the renderer's pixel convention (pixel centres at +0.5, so the principal point is size / 2)."""
    k = camera.intrinsics
    return ((k["fx"], 0.0, k["cx"]), (0.0, k["fy"], k["cy"]), (0.0, 0.0, 1.0))


def camera_extrinsics(camera: Camera) -> tuple[Matrix, Vector]:
    """World → camera (R, t): R's rows are the camera's axes in world coordinates, t = −R · position."""
    rotation = (camera.right, camera.down, camera.forward)
    return rotation, tuple(-_dot(row, camera.position) for row in rotation)


def relative_pose(first: Camera, second: Camera) -> tuple[Matrix, Vector]:
    """(R, t) with x_second = R · x_first + t for a point's coordinates in the two camera frames:
    R = R2 · R1ᵀ, t = t2 − R · t1."""
    r1, t1 = camera_extrinsics(first)
    r2, t2 = camera_extrinsics(second)
    rotation = tuple(tuple(_dot(r2[i], r1[j]) for j in range(3)) for i in range(3))  # (R2 R1ᵀ)_ij = r2_i · r1_j
    return rotation, tuple(t2[i] - _dot(rotation[i], t1) for i in range(3))


def _dot(a, b) -> float:
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def _round(value: Any) -> Any:
    """Floats rounded to POSE_DECIMALS (−0.0 made 0.0), tuples as lists: the JSON and the manifest store these."""
    if isinstance(value, dict):
        return {str(k): _round(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_round(v) for v in value]
    if isinstance(value, float):
        return round(value, POSE_DECIMALS) + 0.0
    return value


def _write_array(path: Path, array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)  # np.save's bytes are deterministic
    return write_bytes(path, buffer.getvalue())


def _check_bounds(yaw_deg: tuple[float, float], pitch_deg: float, translation_m: float, size: int) -> None:
    low, high = yaw_deg
    if not 0.0 < low <= high <= MAX_YAW_DEG:
        raise ValueError(f"yaw_deg must be [min, max] with 0 < min <= max <= {MAX_YAW_DEG:g} (a baseline, and "
                         f"views that overlap); got {[low, high]}")
    if not 0.0 <= pitch_deg <= MAX_PITCH_DEG:
        raise ValueError(f"pitch_deg must be in [0, {MAX_PITCH_DEG:g}]; got {pitch_deg}")
    if not 0.0 <= translation_m <= MAX_TRANSLATION_M:
        raise ValueError(f"translation_m must be in [0, {MAX_TRANSLATION_M:g}] m; got {translation_m}")
    if size < 8:
        raise ValueError(f"size must be at least 8 px; got {size}")


@DATASET_KINDS.register("procedural_scene_pairs")
def prepare_procedural_scene_pairs(
    name: str, out_dir: Path, pairs: dict[str, int], seed: int, size: int = 224,
    objects: list[int] | tuple[int, int] = (2, 5), textures: list[str] | tuple[str, ...] = TEXTURE_KINDS,
    shadows: bool = True, yaw_deg: list[float] | tuple[float, float] = (5.0, 10.0), pitch_deg: float = 3.0,
    translation_m: float = 0.2, corner_scale: float = 1.5, corner_threshold: float = 0.1, corner_radius: float = 6.0,
) -> Manifest:
    """Render `pairs[split]` pairs per split; the manifest's items are both views' RGB images, its
    `extra["pairs"]` the pairs with their intrinsics and relative pose.

    `objects` and `textures` are `procedural_scenes`' (the same scene draws); `yaw_deg` is the inclusive
    [min, max] magnitude of the orbit's yaw, `pitch_deg` the largest change of elevation, `translation_m` the
    largest translation, `corner_*` the corners' settings (see the module docstring).
    """
    low, high = checked_draws(objects, textures)
    yaw = (float(yaw_deg[0]), float(yaw_deg[1]))
    _check_bounds(yaw, float(pitch_deg), float(translation_m), size)
    _check_corners(float(corner_scale), float(corner_threshold), float(corner_radius))
    out_dir = Path(out_dir)
    items: list[Item] = []
    listed: list[dict[str, Any]] = []
    targets: dict[str, dict[str, dict[str, str]]] = {}
    for split, count in sorted(pairs.items()):
        for index in range(int(count)):
            key = [seed, zlib.crc32(split.encode()), index]
            scene = sample_scene(np.random.default_rng(key), size, (low, high), tuple(textures))
            target = _look_at_target(scene)
            moved, motion = move_camera(scene.camera, target, np.random.default_rng([*key, MOTION_STREAM]), yaw,
                                        float(pitch_deg), float(translation_m))
            rel = f"{split}/pair_{index:05d}"
            views = []
            for view, camera in enumerate((scene.camera, moved)):
                viewed = Scene(camera, scene.light, scene.objects, scene.ground)
                render = render_scene(viewed, shadows=shadows)
                rgb_rel = f"{rel}/view{view}/rgb.png"
                items.append(Item(rgb_rel, write_png(out_dir / rgb_rel, render.rgb), split))
                depth_rel = f"{rel}/view{view}/depth.npy"
                corners_rel = f"{rel}/view{view}/corners.npy"
                corners = scene_corners(viewed, render, float(corner_scale), float(corner_threshold),
                                        float(corner_radius))
                targets[rgb_rel] = {
                    "depth": {"path": depth_rel, "sha256": _write_array(out_dir / depth_rel, render.depth)},
                    "corners": {"path": corners_rel, "sha256": _write_array(out_dir / corners_rel, corners)}}
                views.append(camera)
            rotation, translation = relative_pose(views[0], views[1])
            annotations = {
                "image_size": size, "pair": {"split": split, "index": index}, "motion": motion,
                "views": [_camera_json(camera) for camera in views],
                "relative_pose": {"R": rotation, "t": translation},
            }
            text = json.dumps(_round(annotations), sort_keys=True, indent=1) + "\n"
            annotations_rel = f"{rel}/annotations.json"
            listed.append(_round({
                "id": rel, "split": split, "view0": f"{rel}/view0/rgb.png", "view1": f"{rel}/view1/rgb.png",
                "K0": camera_matrix(views[0]), "K1": camera_matrix(views[1]), "R": rotation, "t": translation,
                "annotations": {"path": annotations_rel,
                                "sha256": write_bytes(out_dir / annotations_rel, text.encode())},
            }))
    params = {"pairs": dict(sorted(pairs.items())), "seed": seed, "size": size, "objects": [low, high],
              "textures": list(textures), "shadows": shadows, "yaw_deg": list(yaw), "pitch_deg": float(pitch_deg),
              "translation_m": float(translation_m), "corner_scale": float(corner_scale),
              "corner_threshold": float(corner_threshold), "corner_radius": float(corner_radius)}
    return Manifest(name, str(out_dir), items, [], params, {"pairs": listed, "targets": targets})


def _check_corners(scale: float, threshold: float, radius: float) -> None:
    if not 0.25 <= scale <= 3.6:  # binomial_kernel's exact range (n = round(4·scale²) from 1 to 52)
        raise ValueError(f"corner_scale must be in [0.25, 3.6] px; got {scale}")
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"corner_threshold must be in [0, 1) (a share of the view's strongest response); got "
                         f"{threshold}")
    if not radius >= 1.0:
        raise ValueError(f"corner_radius must be at least 1 px; got {radius}")


def _look_at_target(scene: Scene) -> Vector:
    """Where the camera's optical axis first meets the scene: the surface point at the image centre, which the
    orbit keeps there. `sample_scene` aims the camera at a point 0.2–0.6 m above the ground that it does not
    keep; the axis passes through it and meets the ground (or an object) within a few metres."""
    camera = scene.camera
    direction = tuple(np.array([camera.forward[k]]) for k in range(3))
    t, surface = nearest_hit(scene.surfaces, camera.position, direction)
    if int(surface[0]) < 0:
        raise ValueError("the camera's optical axis meets no surface: no point to orbit about")
    depth = float(t[0])  # forward is a unit vector, so the ray parameter is the distance
    return tuple(camera.position[k] + depth * camera.forward[k] for k in range(3))


def _camera_json(camera: Camera) -> dict[str, Any]:
    rotation, translation = camera_extrinsics(camera)
    return {"K": camera_matrix(camera), "R": rotation, "t": translation, "position": camera.position,
            "focal": camera.focal}
