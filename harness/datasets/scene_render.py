"""A small analytic ray caster for procedural scenes: textured primitives on a ground plane.

One ray per pixel centre, so the RGB image and every ground-truth map are aligned pixel for pixel
(edges alias; there is no anti-aliasing by design). All per-pixel arithmetic is `+ - * /`, `sqrt` and
`floor` on float64 arrays, written component by component: these are correctly rounded IEEE operations,
so the bytes do not depend on the CPU's SIMD level or the BLAS build (no matmul, no exp/sin per pixel).

Conventions
- World: metres, z up; the ground is the square |x|, |y| <= half extent at z = 0.
- Camera: OpenCV pinhole, x right, y down, z forward. Pixel (row i, column j) has its centre at
  (x, y) = (j + 0.5, i + 0.5). Primary rays are `position + t · (x_n·right + y_n·down + forward)`, so the
  ray parameter t *is* the camera z-distance (metric depth).
- Objects rest on the ground and may be yawed (turned about world z); each is intersected in its own
  frame: boxes by the slab method, spheres and capped cylinders by their quadratic, the ground directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

Vec = tuple[Any, Any, Any]  # three float64 arrays (or floats) of one shape: x, y, z components

SURFACE_KINDS = ("plane", "box", "sphere", "cylinder")
TEXTURE_KINDS = ("checker", "stripes", "noise", "flat")
_T_MIN = 1e-9  # hits closer than this along a ray are the ray's own start point
_SHADOW_OFFSET = 1e-6  # shadow rays start this far (m) off the surface, outside its own solid
_NOISE_LATTICE = 16  # value-noise lattice side (it tiles every 16 texture cells)
_SKY_HORIZON, _SKY_ZENITH = (0.80, 0.85, 0.90), (0.35, 0.55, 0.85)


@dataclass(frozen=True)
class Texture:
    """A solid texture, evaluated at the object-frame hit point (so it moves with the object)."""

    kind: str  # one of TEXTURE_KINDS
    colors: tuple[tuple[float, float, float], tuple[float, float, float]]  # linear RGB albedos in [0, 1]
    scale: float = 0.25  # metres per checker cell, stripe or noise cell
    offset: tuple[float, float, float] = (0.0, 0.0, 0.0)  # phase in cells, in [0, 1)
    axis: tuple[float, float, float] = (1.0, 0.0, 0.0)  # stripes run across this unit vector
    seed: int = 0  # value-noise lattice

    def __post_init__(self) -> None:
        if self.kind not in TEXTURE_KINDS:
            raise ValueError(f"unknown texture kind {self.kind!r}; valid: {', '.join(TEXTURE_KINDS)}")


@dataclass(frozen=True)
class Primitive:
    """A surface. `size`: plane (half extent, half extent, 0); box half extents; sphere (r, r, r);
    cylinder (r, r, half height), axis along z. `heading` = (cos, sin) of the yaw about world z."""

    kind: str
    center: tuple[float, float, float]
    size: tuple[float, float, float]
    texture: Texture
    heading: tuple[float, float] = (1.0, 0.0)

    def __post_init__(self) -> None:
        if self.kind not in SURFACE_KINDS:
            raise ValueError(f"unknown primitive {self.kind!r}; valid: {', '.join(SURFACE_KINDS)}")

    def to_object(self, origin: Vec, direction: Vec) -> tuple[Vec, Vec]:
        """World rays into the object frame (a rigid map, so t is unchanged)."""
        c, s = self.heading
        ox, oy, oz = (origin[k] - self.center[k] for k in range(3))
        dx, dy, dz = direction
        return (c * ox + s * oy, c * oy - s * ox, oz), (c * dx + s * dy, c * dy - s * dx, dz)

    def to_world(self, vector: Vec) -> Vec:
        c, s = self.heading
        return (c * vector[0] - s * vector[1], s * vector[0] + c * vector[1], vector[2])


@dataclass(frozen=True)
class Camera:
    position: tuple[float, float, float]
    right: tuple[float, float, float]  # the camera's x, y, z axes in world coordinates (orthonormal)
    down: tuple[float, float, float]
    forward: tuple[float, float, float]
    focal: float  # pixels (fx = fy)
    size: int  # square images; the principal point is the image centre (size / 2, size / 2)

    @classmethod
    def look_at(cls, position, target, size: int, focal: float) -> Camera:
        forward = _normalise(tuple(float(target[k]) - float(position[k]) for k in range(3)))
        if forward[0] == 0.0 and forward[1] == 0.0:
            raise ValueError("look_at: a camera looking straight up or down has no level horizon")
        right = _normalise(_cross(forward, (0.0, 0.0, 1.0)))  # world z is up: the horizon stays level
        return cls(tuple(float(p) for p in position), right, _cross(forward, right), forward, float(focal), size)

    @property
    def intrinsics(self) -> dict[str, float]:
        return {"fx": self.focal, "fy": self.focal, "cx": self.size / 2, "cy": self.size / 2}

    def pixel_rays(self) -> Vec:
        """Un-normalised world directions through every pixel centre (row-major), camera-z component 1."""
        coords = (np.arange(self.size, dtype=np.float64) + 0.5 - self.size / 2) / self.focal
        x_n, y_n = np.tile(coords, self.size), np.repeat(coords, self.size)
        return tuple(x_n * self.right[k] + y_n * self.down[k] + self.forward[k] for k in range(3))

    def to_camera(self, vector: Vec) -> Vec:
        """World vector → camera frame (x right, y down, z forward)."""
        return tuple(_dot(vector, axis) for axis in (self.right, self.down, self.forward))

    def project(self, point: tuple[float, float, float]) -> tuple[float, float, float]:
        """World point → (x, y) pixel coordinates and camera z."""
        x, y, z = self.to_camera(tuple(point[k] - self.position[k] for k in range(3)))
        return self.focal * x / z + self.size / 2, self.focal * y / z + self.size / 2, z


@dataclass(frozen=True)
class Light:
    direction: tuple[float, float, float]  # unit vector *towards* the light (directional, at infinity)
    ambient: float  # shade = albedo · (ambient + (1 − ambient) · max(0, n·l) · unshadowed)


@dataclass(frozen=True)
class Scene:
    camera: Camera
    light: Light
    objects: tuple[Primitive, ...]
    ground: Primitive | None = None

    @property
    def surfaces(self) -> tuple[Primitive, ...]:
        """Ground first, then objects: surface index s ≥ 0 in RenderedScene.surface is this order."""
        return ((self.ground,) if self.ground is not None else ()) + tuple(self.objects)


@dataclass
class RenderedScene:
    rgb: np.ndarray  # (H, W, 3) uint8, gamma 2 encoded
    depth: np.ndarray  # (H, W) float32 camera z in metres; 0 where the ray hits nothing
    normals: np.ndarray  # (H, W, 3) float32 unit vectors in the camera frame; 0 where nothing is hit
    albedo: np.ndarray  # (H, W, 3) float32 linear texture colour before shading; 0 where nothing is hit
    # (H, W) float32 the light's factor: linear colour = albedo · shading exactly (never clipped: both <= 1);
    # ambient + (1 − ambient) · max(0, n·l) · unshadowed, so >= ambient > 0 on a surface; 0 where nothing is hit
    shading: np.ndarray
    surface: np.ndarray  # (H, W) int16 index into Scene.surfaces; -1 where nothing is hit


def intersect(primitive: Primitive, origin: Vec, direction: Vec) -> np.ndarray:
    """Entry parameter t of each ray into the primitive (inf where it misses), t > _T_MIN only."""
    (ox, oy, oz), (dx, dy, dz) = primitive.to_object(origin, direction)
    sx, sy, sz = primitive.size
    with np.errstate(divide="ignore", invalid="ignore"):
        if primitive.kind == "plane":
            t = -oz / dz
            hit = (t > _T_MIN) & (np.abs(ox + t * dx) <= sx) & (np.abs(oy + t * dy) <= sy)
        elif primitive.kind == "sphere":
            a = dx * dx + dy * dy + dz * dz
            b = ox * dx + oy * dy + oz * dz
            disc = b * b - a * (ox * ox + oy * oy + oz * oz - sx * sx)
            t = (-b - np.sqrt(np.maximum(disc, 0.0))) / a  # the nearer root: rays start outside the solid
            hit = (disc >= 0) & (t > _T_MIN)
        elif primitive.kind == "box":  # slab method: the latest entry before the earliest exit
            near, far = np.full(np.shape(dx), -np.inf), np.full(np.shape(dx), np.inf)
            for o, d, h in ((ox, dx, sx), (oy, dy, sy), (oz, dz, sz)):
                t1, t2 = (-h - o) / d, (h - o) / d  # d = 0 gives ±inf (or nan, which fmin/fmax skip)
                near, far = np.fmax(near, np.fmin(t1, t2)), np.fmin(far, np.fmax(t1, t2))
            t = near
            hit = (near <= far) & (near > _T_MIN)
        else:  # capped cylinder: the nearer of the side entry (within the height) and the facing cap
            a = dx * dx + dy * dy
            b = ox * dx + oy * dy
            disc = b * b - a * (ox * ox + oy * oy - sx * sx)
            side = (-b - np.sqrt(np.maximum(disc, 0.0))) / a
            side_hit = (disc >= 0) & (a > 0) & (np.abs(oz + side * dz) <= sz) & (side > _T_MIN)
            cap = (np.where(dz > 0, -sz, sz) - oz) / dz
            cx, cy = ox + cap * dx, oy + cap * dy
            cap_hit = (dz != 0) & (cx * cx + cy * cy <= sx * sx) & (cap > _T_MIN)
            t = np.minimum(np.where(side_hit, side, np.inf), np.where(cap_hit, cap, np.inf))
            hit = side_hit | cap_hit
    return np.where(hit, t, np.inf)


def nearest_hit(surfaces: tuple[Primitive, ...], origin: Vec, direction: Vec) -> tuple[np.ndarray, np.ndarray]:
    """(t, surface index) of the nearest hit per ray; (inf, -1) where every surface is missed."""
    best = np.full(np.shape(direction[0]), np.inf)
    index = np.full(best.shape, -1, dtype=np.int16)
    for k, primitive in enumerate(surfaces):
        t = intersect(primitive, origin, direction)
        closer = t < best  # strict: on an exact tie the earlier surface keeps the pixel
        best, index = np.where(closer, t, best), np.where(closer, np.int16(k), index)
    return best, index


def object_normal(primitive: Primitive, point: Vec) -> Vec:
    """Outward unit normal at an object-frame surface point."""
    px, py, pz = point
    sx, sy, sz = primitive.size
    zero, one = np.zeros(np.shape(px)), np.ones(np.shape(px))
    if primitive.kind == "plane":
        return zero, zero, one
    if primitive.kind == "sphere":
        return px / sx, py / sx, pz / sx
    if primitive.kind == "box":  # the face is the axis where the point is furthest out, relative to size
        ax, ay, az = np.abs(px) / sx, np.abs(py) / sy, np.abs(pz) / sz
        on_x = (ax >= ay) & (ax >= az)
        on_y = ~on_x & (ay >= az)
        on_z = ~on_x & ~on_y
        return np.where(on_x, np.sign(px), 0.0), np.where(on_y, np.sign(py), 0.0), np.where(on_z, np.sign(pz), 0.0)
    radial = np.sqrt(px * px + py * py)
    on_cap = np.abs(pz) * sx >= radial * sz
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.where(on_cap, 0.0, px / radial), np.where(on_cap, 0.0, py / radial),
                np.where(on_cap, np.sign(pz), 0.0))


def texture_albedo(texture: Texture, point: Vec) -> np.ndarray:
    """Linear RGB albedo (N, 3) of a solid texture at object-frame points."""
    low, high = np.asarray(texture.colors[0]), np.asarray(texture.colors[1])
    q = tuple(point[k] / texture.scale + texture.offset[k] for k in range(3))
    if texture.kind == "flat":
        return np.broadcast_to(low, (np.size(point[0]), 3)).copy()
    if texture.kind == "checker":
        mix = (np.floor(q[0]) + np.floor(q[1]) + np.floor(q[2])) % 2
    elif texture.kind == "stripes":
        mix = np.floor(_dot(point, texture.axis) / texture.scale + texture.offset[0]) % 2
    else:
        lattice = np.random.default_rng(texture.seed).random((_NOISE_LATTICE,) * 3)
        coarse = _value_noise(lattice, q)
        fine = _value_noise(lattice, tuple(2.0 * q[k] + 0.5 for k in range(3)))
        mix = np.clip((coarse + 0.5 * fine) / 1.5 * 2.0 - 0.5, 0.0, 1.0)  # stretch the mid-grey bulk
    return low + (high - low) * np.asarray(mix)[:, None]


def _value_noise(lattice: np.ndarray, q: Vec) -> np.ndarray:
    """Smooth 3-D value noise: a random lattice, smoothstep-weighted trilinear interpolation."""
    cells = [np.floor(c) for c in q]
    weights = [(c - f) * (c - f) * (3.0 - 2.0 * (c - f)) for c, f in zip(q, cells, strict=True)]
    index = [f.astype(np.int64) % _NOISE_LATTICE for f in cells]
    total = np.zeros(np.shape(q[0]))
    for corner in range(8):
        bits = [(corner >> k) & 1 for k in range(3)]
        value = lattice[tuple((index[k] + bits[k]) % _NOISE_LATTICE for k in range(3))]
        for k in range(3):
            value = value * (weights[k] if bits[k] else 1.0 - weights[k])
        total = total + value
    return total


def render_scene(scene: Scene, shadows: bool = True) -> RenderedScene:
    camera = scene.camera
    n = camera.size * camera.size
    rays = camera.pixel_rays()
    t, surface = nearest_hit(scene.surfaces, camera.position, rays)
    depth = np.zeros(n)
    normal_world = np.zeros((3, n))
    albedo = np.zeros((n, 3))
    for k, primitive in enumerate(scene.surfaces):
        sel = np.flatnonzero(surface == k)
        if not sel.size:
            continue
        (ox, oy, oz), (dx, dy, dz) = primitive.to_object(camera.position, tuple(r[sel] for r in rays))
        hit = t[sel]
        point = (ox + hit * dx, oy + hit * dy, oz + hit * dz)
        normal_world[:, sel] = primitive.to_world(object_normal(primitive, point))
        albedo[sel] = texture_albedo(primitive.texture, point)
        depth[sel] = hit
    lit = np.maximum(_dot(normal_world, scene.light.direction), 0.0)
    if shadows:
        _shadow(scene, rays, t, normal_world, lit)
    shade = scene.light.ambient + (1.0 - scene.light.ambient) * lit
    linear = np.where((surface >= 0)[:, None], albedo * shade[:, None], _sky(rays))
    rgb = np.rint(np.sqrt(np.clip(linear, 0.0, 1.0)) * 255.0).astype(np.uint8)  # gamma 2: sqrt is exact
    normal_camera = np.stack(camera.to_camera(tuple(normal_world)), axis=-1)
    length = np.sqrt(_dot(normal_camera.T, normal_camera.T))[:, None]
    with np.errstate(invalid="ignore"):
        normal_camera = np.where(length > 0, normal_camera / length, 0.0)
    side = camera.size
    return RenderedScene(
        rgb=rgb.reshape(side, side, 3), depth=depth.astype(np.float32).reshape(side, side),
        normals=normal_camera.astype(np.float32).reshape(side, side, 3),
        albedo=albedo.astype(np.float32).reshape(side, side, 3),
        shading=np.where(surface >= 0, shade, 0.0).astype(np.float32).reshape(side, side),
        surface=surface.reshape(side, side),
    )


def _shadow(scene: Scene, rays: Vec, t: np.ndarray, normal_world: np.ndarray, lit: np.ndarray) -> None:
    """Zero `lit` where a ray towards the light meets an object (the ground cannot shadow: all is above it)."""
    sel = np.flatnonzero(lit > 0)
    if not sel.size or not scene.objects:
        return
    position = scene.camera.position
    origin = tuple(position[k] + t[sel] * rays[k][sel] + _SHADOW_OFFSET * normal_world[k, sel] for k in range(3))
    direction = tuple(np.full(sel.size, scene.light.direction[k]) for k in range(3))
    blocked, _ = nearest_hit(tuple(scene.objects), origin, direction)
    lit[sel[np.isfinite(blocked)]] = 0.0


def _sky(rays: Vec) -> np.ndarray:
    """A vertical gradient, horizon to zenith, by the ray's elevation."""
    length = np.sqrt(rays[0] * rays[0] + rays[1] * rays[1] + rays[2] * rays[2])
    up = np.clip(rays[2] / length * 2.0, 0.0, 1.0)[:, None]
    return np.asarray(_SKY_HORIZON) * (1.0 - up) + np.asarray(_SKY_ZENITH) * up


def _dot(a: Vec, b: Vec) -> Any:
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def _cross(a: Vec, b: Vec) -> tuple[float, float, float]:
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _normalise(v: Vec) -> tuple[float, float, float]:
    length = float(np.sqrt(_dot(v, v)))
    return (v[0] / length, v[1] / length, v[2] / length)
