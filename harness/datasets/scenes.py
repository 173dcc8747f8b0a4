"""Procedural scenes with exact dense ground truth, for the dense and low-level probes.

Each scene is a few textured boxes, spheres and cylinders resting on a textured ground square, seen
by a pinhole camera under one directional light plus ambient (see `scene_render` for the ray caster
and its conventions). Everything is drawn from `np.random.default_rng([seed, crc32(split), index])`,
so a scene depends only on the dataset seed, its split and its index: adding training scenes leaves
the validation scenes as they were.

Files per scene, in `<split>/scene_<index:05d>/` (PNG via Pillow and `.npy` via `np.save` are
byte-deterministic; every file's SHA-256 is in `manifest.extra["targets"]`, so the dataset identity
covers all of them):

| file | content |
|---|---|
| rgb.png | (H, W, 3) uint8: the image (the manifest item; label None) |
| depth.npy | (H, W) float32 metric camera z; 0 = no surface (invalid) |
| normals.npy | (H, W, 3) float32 unit normals, camera frame (x right, y down, z forward); 0 = invalid |
| semantic.png | (H, W) uint8, mode L, values index `SEMANTIC_CLASSES` (also `manifest.classes`) |
| instance.png | (H, W) uint8, mode L: k = object k (its `instance` in annotations), 0 = plane or background |
| foreground.png | (H, W) uint8, mode L: 1 = an object, 0 = plane or background |
| texture_edges.npy | (H, W) float32 Sobel magnitude of the albedo luminance (the paint, not the shading), /8 |
| occlusion_edges.npy | (H, W) uint8: 1 on the near side of a depth discontinuity or a silhouette |
| albedo.npy | (H, W, 3) float32 linear albedo (the paint before light); 0 = no surface (every paint is > 0) |
| shading.npy | (H, W) float32 the light's factor: linear colour = albedo · shading exactly; 0 = no surface |
| structure_tensor.npy | (H, W, 3) float32 [Jxx, Jxy, Jyy] of the albedo luminance (`scene_targets`), x right, y down |
| keypoints.npy | (H, W, 3) float32 Gaussian responses, one channel per `KEYPOINT_KINDS`, peak 1 |
| annotations.json | camera, light, ground and objects (with textures), visible keypoints, 2-D boxes |
"""

from __future__ import annotations

import colorsys
import io
import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets.files import write_bytes, write_png
from harness.datasets.kinds import DATASET_KINDS
from harness.datasets.manifest import Item, Manifest
from harness.datasets.scene_render import (
    TEXTURE_KINDS,
    Camera,
    Light,
    Primitive,
    RenderedScene,
    Scene,
    Texture,
    render_scene,
)
from harness.datasets.scene_targets import (
    KEYPOINT_KINDS,
    SEMANTIC_CLASSES,
    keypoint_response,
    object_boxes,
    occlusion_edges,
    semantic_maps,
    structure_tensor,
    texture_edges,
    visible_keypoints,
)

__all__ = ["KEYPOINT_KINDS", "SEMANTIC_CLASSES", "checked_draws", "derive_targets", "prepare_procedural_scenes",
           "sample_scene"]

FOCAL_OVER_SIZE = 1.0  # focal length = image size: a 53.13° field of view, and no tan() to round
GROUND_HALF_EXTENT = 12.0  # metres
PLACEMENT_RADIUS = 3.2  # objects stand within this distance of the origin
JSON_DECIMALS = 6


def sample_scene(
    rng: np.random.Generator, size: int, objects: tuple[int, int] = (2, 5), textures: tuple[str, ...] = TEXTURE_KINDS
) -> Scene:
    """A random scene: camera orbiting the origin, light from above, non-overlapping objects on the ground.

    Only arithmetic and sqrt turn the random draws into geometry (directions come from rejection
    sampling in a disc or ball, not from angles), so the geometry is bit-identical on every machine.
    """
    target = (rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5), rng.uniform(0.2, 0.6))
    away = _unit_disc(rng)
    elevation = rng.uniform(0.3, 0.8)  # tangent of the camera's elevation: 17° to 39°
    distance = rng.uniform(5.5, 8.5)
    offset = np.array([away[0], away[1], elevation]) / np.sqrt(1.0 + elevation * elevation) * distance
    camera = Camera.look_at(np.asarray(target) + offset, target, size, FOCAL_OVER_SIZE * size)
    toward = _unit_disc(rng)
    height = rng.uniform(0.45, 1.8)  # tangent of the light's elevation: 24° to 61°
    light_dir = np.array([toward[0], toward[1], height]) / np.sqrt(1.0 + height * height)
    light = Light(tuple(float(v) for v in light_dir), float(rng.uniform(0.15, 0.3)))
    ground = Primitive("plane", (0.0, 0.0, 0.0), (GROUND_HALF_EXTENT, GROUND_HALF_EXTENT, 0.0),
                       _sample_texture(rng, textures, scale=(0.5, 1.0), saturation=(0.05, 0.35)))
    placed: list[Primitive] = []
    footprints: list[tuple[float, float, float]] = []
    for _ in range(int(rng.integers(objects[0], objects[1] + 1))):
        kind = ("box", "sphere", "cylinder")[int(rng.integers(3))]
        if kind == "box":
            half = tuple(float(v) for v in rng.uniform(0.25, 0.7, size=3))
            reach, lift = float(np.sqrt(half[0] * half[0] + half[1] * half[1])), half[2]
        elif kind == "sphere":
            radius = float(rng.uniform(0.3, 0.75))
            half, reach, lift = (radius, radius, radius), radius, radius
        else:
            radius, half_height = float(rng.uniform(0.2, 0.5)), float(rng.uniform(0.3, 0.9))
            half, reach, lift = (radius, radius, half_height), radius, half_height
        heading = _unit_disc(rng)
        texture = _sample_texture(rng, textures, scale=(0.12, 0.3), saturation=(0.3, 0.9))
        for _attempt in range(64):  # rejection: a spot whose footprint clears every placed object's
            x, y = rng.uniform(-PLACEMENT_RADIUS, PLACEMENT_RADIUS, size=2)
            # products, not **: pow() need not round the same on every machine
            clear = all((x - u) * (x - u) + (y - v) * (y - v) > (reach + r + 0.1) * (reach + r + 0.1)
                        for u, v, r in footprints)
            if clear and x * x + y * y <= PLACEMENT_RADIUS * PLACEMENT_RADIUS:
                footprints.append((float(x), float(y), reach))
                placed.append(Primitive(kind, (float(x), float(y), lift), half, texture, heading))
                break  # an object with no free spot after 64 tries is dropped (crowded scenes)
    return Scene(camera, light, tuple(placed), ground)


def _unit_disc(rng: np.random.Generator) -> tuple[float, float]:
    """A uniformly random horizontal unit vector (rejection sampling; no trigonometry)."""
    while True:
        x, y = rng.uniform(-1.0, 1.0, size=2)
        r2 = x * x + y * y
        if 0.01 < r2 <= 1.0:
            r = np.sqrt(r2)
            return float(x / r), float(y / r)


def _sample_texture(
    rng: np.random.Generator, kinds: tuple[str, ...], scale: tuple[float, float], saturation: tuple[float, float]
) -> Texture:
    """Two colours far apart in brightness (so checker and stripe edges are strong), a scale and a phase."""
    kind = kinds[int(rng.integers(len(kinds)))]
    bright = colorsys.hsv_to_rgb(rng.random(), rng.uniform(*saturation), rng.uniform(0.7, 0.95))
    dark = colorsys.hsv_to_rgb(rng.random(), rng.uniform(*saturation), rng.uniform(0.1, 0.35))
    while True:
        axis = rng.uniform(-1.0, 1.0, size=3)
        norm2 = float(axis[0] * axis[0] + axis[1] * axis[1] + axis[2] * axis[2])  # not BLAS: exact everywhere
        if 0.01 < norm2 <= 1.0:
            break
    colors = (tuple(float(c) for c in dark), tuple(float(c) for c in bright))
    return Texture(kind, colors, float(rng.uniform(*scale)), tuple(float(v) for v in rng.random(3)),
                   tuple(float(v) for v in axis / np.sqrt(norm2)), int(rng.integers(2**31)))


def derive_targets(
    scene: Scene, render: RenderedScene, keypoint_sigma: float, occlusion_threshold: float, orientation_scale: float
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The dense target arrays and the JSON annotations of one rendered scene."""
    semantic, instance = semantic_maps(scene, render.surface)
    keypoints = visible_keypoints(scene)
    arrays = {
        "depth": render.depth, "normals": render.normals, "semantic": semantic, "instance": instance,
        "foreground": (instance > 0).astype(np.uint8), "texture_edges": texture_edges(render),
        "occlusion_edges": occlusion_edges(render, occlusion_threshold),
        "keypoints": keypoint_response(keypoints, scene.camera.size, keypoint_sigma),
        "albedo": render.albedo, "shading": render.shading,
        "structure_tensor": structure_tensor(render, orientation_scale),
    }
    camera = scene.camera
    annotations = {
        "image_size": camera.size,
        "camera": {**camera.intrinsics, "position": camera.position, "right": camera.right, "down": camera.down,
                   "forward": camera.forward},
        "light": {"direction": scene.light.direction, "ambient": scene.light.ambient},
        "ground": None if scene.ground is None else _primitive_json(scene.ground),
        "objects": [{"instance": k + 1, "class_id": SEMANTIC_CLASSES.index(p.kind), **_primitive_json(p)}
                    for k, p in enumerate(scene.objects)],
        "keypoints": keypoints,
        "boxes": object_boxes(scene, instance),
    }
    return arrays, annotations


def _primitive_json(primitive: Primitive) -> dict[str, Any]:
    texture = primitive.texture
    return {"kind": primitive.kind, "center": primitive.center, "size": primitive.size, "heading": primitive.heading,
            "texture": {"kind": texture.kind, "colors": texture.colors, "scale": texture.scale,
                        "offset": texture.offset, "axis": texture.axis, "seed": texture.seed}}


TARGET_FILES = {
    "depth": "depth.npy", "normals": "normals.npy", "semantic": "semantic.png", "instance": "instance.png",
    "foreground": "foreground.png", "texture_edges": "texture_edges.npy",
    "occlusion_edges": "occlusion_edges.npy", "keypoints": "keypoints.npy", "albedo": "albedo.npy",
    "shading": "shading.npy", "structure_tensor": "structure_tensor.npy",
}

# Where each target comes from, as every record on this dataset carries it (`DatasetInfo.target_sources`): all of
# them are exact, computed from the scene's own geometry and paint, none estimated from the image.
_RENDERED = "rendered: exact, from the procedural scene's geometry (harness.datasets.scene_render)"
TARGET_SOURCES = {
    **dict.fromkeys(("depth", "semantic", "instance", "foreground", "occlusion_edges", "keypoints"), _RENDERED),
    "normals": "rendered: exact analytic surface normals of the scene's primitives, camera frame "
               "(harness.datasets.scene_render)",
    **dict.fromkeys(("albedo", "shading"), "rendered: exact, the paint and the light's factor apart "
                                          "(harness.datasets.scene_render)"),
    **dict.fromkeys(("texture_edges", "structure_tensor"), "computed from the rendered albedo "
                                                          "(harness.datasets.scene_targets)"),
}


def write_scene(folder: Path, rgb: np.ndarray, arrays: dict[str, np.ndarray], annotations: dict[str, Any],
                root: Path) -> tuple[str, dict[str, dict[str, str]]]:
    """Write one scene's files; return the RGB's SHA-256 and {target: {path, sha256}} (paths under root)."""
    rgb_sha = write_png(folder / "rgb.png", rgb)
    targets = {}
    for name, file_name in TARGET_FILES.items():
        path = folder / file_name
        if file_name.endswith(".png"):
            sha = write_png(path, arrays[name])
        else:
            buffer = io.BytesIO()
            np.save(buffer, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            sha = write_bytes(path, buffer.getvalue())
        targets[name] = {"path": path.relative_to(root).as_posix(), "sha256": sha}
    text = json.dumps(_rounded(annotations), sort_keys=True, indent=1) + "\n"
    path = folder / "annotations.json"
    targets["annotations"] = {"path": path.relative_to(root).as_posix(), "sha256": write_bytes(path, text.encode())}
    return rgb_sha, targets


def _rounded(value: Any) -> Any:
    """Floats rounded to JSON_DECIMALS (and -0.0 made 0.0), tuples as lists, numpy scalars as Python ones."""
    if isinstance(value, dict):
        return {str(k): _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return round(value, JSON_DECIMALS) + 0.0
    return value


def checked_draws(objects: list[int] | tuple[int, int], textures: list[str] | tuple[str, ...]) -> tuple[int, int]:
    """`objects` as the inclusive (min, max) object count, after checking it and `textures` (one-line errors): the
    arguments `sample_scene` draws from, shared by every kind that renders these scenes."""
    low, high = (int(v) for v in objects)
    if not 0 <= low <= high <= 255:
        raise ValueError(f"objects must be [min, max] with 0 <= min <= max <= 255; got {list(objects)}")
    unknown = sorted(set(textures) - set(TEXTURE_KINDS))
    if unknown or not textures:
        raise ValueError(f"unknown texture kinds {unknown}; valid: {', '.join(TEXTURE_KINDS)}")
    return low, high


@DATASET_KINDS.register("procedural_scenes")
def prepare_procedural_scenes(
    name: str, out_dir: Path, scenes: dict[str, int], seed: int, size: int = 224,
    objects: list[int] | tuple[int, int] = (2, 5), textures: list[str] | tuple[str, ...] = TEXTURE_KINDS,
    keypoint_sigma: float = 2.0, occlusion_threshold: float = 0.05, shadows: bool = True,
    orientation_scale: float = 2.0,
) -> Manifest:
    """Render `scenes[split]` scenes per split; the manifest's items are the RGB images.

    `objects` is the inclusive [min, max] object count (a crowded scene can hold fewer: see
    `sample_scene`); `keypoint_sigma` is in pixels; `occlusion_threshold` is the relative depth jump
    (Δz / z) that makes an occlusion edge; `orientation_scale` is the structure tensor's integration window
    (≈ its standard deviation, px).
    """
    low, high = checked_draws(objects, textures)
    if size < 8:
        raise ValueError(f"size must be at least 8 px; got {size}")
    out_dir = Path(out_dir)
    items, targets = [], {}
    for split, count in sorted(scenes.items()):
        for index in range(int(count)):
            rng = np.random.default_rng([seed, zlib.crc32(split.encode()), index])
            scene = sample_scene(rng, size, (low, high), tuple(textures))
            render = render_scene(scene, shadows=shadows)
            arrays, annotations = derive_targets(scene, render, keypoint_sigma, occlusion_threshold, orientation_scale)
            annotations["scene"] = {"split": split, "index": index}
            rel = f"{split}/scene_{index:05d}"
            rgb_sha, targets[f"{rel}/rgb.png"] = write_scene(out_dir / rel, render.rgb, arrays, annotations, out_dir)
            items.append(Item(f"{rel}/rgb.png", rgb_sha, split))
    params = {"scenes": dict(sorted(scenes.items())), "seed": seed, "size": size, "objects": [low, high],
              "textures": list(textures), "keypoint_sigma": keypoint_sigma,
              "occlusion_threshold": occlusion_threshold, "shadows": shadows, "orientation_scale": orientation_scale}
    extra = {"targets": targets, "keypoint_kinds": list(KEYPOINT_KINDS), "target_sources": TARGET_SOURCES}
    return Manifest(name, str(out_dir), items, list(SEMANTIC_CLASSES), params, extra)
