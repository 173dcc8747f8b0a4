"""Defect-free texture families for `procedural_defects`: each call draws a fresh instance of the family (phase,
period, angle, per-thread or per-tile tone and fine grain all random), so no two good images are alike while all
share the family's statistics, as the images of one MVTec AD texture category do.

- `weave`: a plain weave, warp and weft threads alternating over and under (period about 15 px, turned a few
  degrees), each thread with its own tone, rounded across its width and shaded where it dives under;
- `grain`: leather-like grain, multi-octave value noise with ridge creases and sparse dark pores;
- `tiles`: square tiles (about 38 px) with grout lines, each tile its own tone, with a faint mottle.

Pixel arithmetic is `+ − × /`, `sqrt` and `floor` on float64 arrays and the draws are numpy `Generator.random`,
`uniform` and `integers` (no exp or trigonometry per pixel, as `scene_render`), so a seed gives the same bytes on
every machine. Images are float64 RGB on the 0–255 scale; `defects` quantises them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Texture = Callable[[np.random.Generator, int], np.ndarray]


def unit_vector(rng: np.random.Generator, max_slope: float | None = None) -> np.ndarray:
    """A random unit vector by rejection in the unit disc (no angles); with `max_slope`, one within that slope of
    the x axis: (1, t) normalised, t uniform in ±max_slope."""
    if max_slope is not None:
        t = rng.uniform(-max_slope, max_slope)
        return np.array([1.0, t]) / np.sqrt(1.0 + t * t)
    while True:
        x, y = rng.uniform(-1.0, 1.0, size=2)
        r2 = x * x + y * y
        if 0.01 < r2 <= 1.0:
            return np.array([x, y]) / np.sqrt(r2)


def pixel_grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates: x (1, size) and y (size, 1)."""
    centres = np.arange(size, dtype=np.float64) + 0.5
    return centres[None, :], centres[:, None]


def value_noise(rng: np.random.Generator, size: int, cell: float) -> np.ndarray:
    """(size, size) noise in [0, 1]: uniform values on a lattice of `cell` px, random phase, smoothstep-interpolated."""
    side = int(np.floor(size / cell)) + 3
    lattice = rng.random((side, side))
    offset = rng.random(2)
    x, y = pixel_grid(size)
    u, v = x / cell + offset[0], y / cell + offset[1]
    iu, iv = np.floor(u).astype(np.int64), np.floor(v).astype(np.int64)
    fu, fv = u - iu, v - iv
    su, sv = fu * fu * (3.0 - 2.0 * fu), fv * fv * (3.0 - 2.0 * fv)
    top = lattice[iv, iu] * (1.0 - su) + lattice[iv, iu + 1] * su
    bottom = lattice[iv + 1, iu] * (1.0 - su) + lattice[iv + 1, iu + 1] * su
    return top * (1.0 - sv) + bottom * sv


def fractal_noise(rng: np.random.Generator, size: int, cells: tuple[float, ...]) -> np.ndarray:
    """Octaves of `value_noise`, each half the weight of the one before, normalised to [0, 1]."""
    total, weight, weights = np.zeros((size, size)), 1.0, 0.0
    for cell in cells:
        total = total + weight * value_noise(rng, size, cell)
        weights += weight
        weight *= 0.5
    return total / weights


def colourise(level: np.ndarray, dark: tuple[float, float, float], bright: tuple[float, float, float]
              ) -> np.ndarray:
    """(size, size) levels in [0, 1] → (size, size, 3) RGB between two colours, 0–255."""
    dark_rgb, bright_rgb = np.array(dark) * 255.0, np.array(bright) * 255.0
    return dark_rgb + level[..., None] * (bright_rgb - dark_rgb)


def weave(rng: np.random.Generator, size: int) -> np.ndarray:
    period = rng.uniform(13.0, 17.0)
    along = unit_vector(rng, max_slope=0.08)
    offset = rng.uniform(0.0, 2.0 * period, size=2)
    warp_tone, weft_tone = rng.uniform(0.85, 1.15, size=64), rng.uniform(0.85, 1.15, size=64)
    x, y = pixel_grid(size)
    u = (along[0] * x + along[1] * y + offset[0]) / period
    v = (-along[1] * x + along[0] * y + offset[1]) / period
    iu, iv = np.floor(u).astype(np.int64), np.floor(v).astype(np.int64)
    cu, cv = 2.0 * (u - iu) - 1.0, 2.0 * (v - iv) - 1.0  # −1 … 1 across a cell
    # warp threads run along v (their cross-section is u), weft threads along u; they alternate on top
    warp = (1.0 - cu * cu) * (1.0 - 0.35 * cv * cv * cv * cv) * warp_tone[iu % 64]
    weft = (1.0 - cv * cv) * (1.0 - 0.35 * cu * cu * cu * cu) * weft_tone[iv % 64]
    level = np.where((iu + iv) % 2 == 0, warp, weft)
    fibre = fractal_noise(rng, size, (6.0, 3.0, 1.5))
    level = 0.12 + 0.72 * level + 0.16 * (fibre - 0.5)
    return colourise(np.clip(level, 0.0, 1.0), (0.10, 0.13, 0.24), (0.58, 0.66, 0.86))


def grain(rng: np.random.Generator, size: int) -> np.ndarray:
    base = fractal_noise(rng, size, (28.0, 14.0, 7.0, 3.5))
    crease_field = fractal_noise(rng, size, (40.0, 20.0))
    crease = 1.0 - np.minimum(np.abs(crease_field - 0.5) * 10.0, 1.0)  # 1 on the ridge lines where the field is ½
    level = 0.30 + 0.70 * (base - 0.25) - 0.22 * crease
    x, y = pixel_grid(size)
    for _ in range(size * size // 500):  # sparse pores, 1–2 px
        px, py = rng.uniform(0.0, size, size=2)
        radius = rng.uniform(0.8, 1.8)
        level = np.where((x - px) * (x - px) + (y - py) * (y - py) <= radius * radius, level * 0.7, level)
    return colourise(np.clip(level, 0.0, 1.0), (0.16, 0.09, 0.04), (0.62, 0.43, 0.26))


def tiles(rng: np.random.Generator, size: int) -> np.ndarray:
    period = rng.uniform(34.0, 42.0)
    grout_width = rng.uniform(3.0, 4.0)
    offset = rng.uniform(0.0, period, size=2)
    tone = rng.uniform(-0.07, 0.07, size=(16, 16))
    mottle = fractal_noise(rng, size, (12.0, 6.0, 3.0))
    x, y = pixel_grid(size)
    u, v = (x + offset[0]) / period, (y + offset[1]) / period
    iu, iv = np.floor(u).astype(np.int64), np.floor(v).astype(np.int64)
    du, dv = (u - iu) * period, (v - iv) * period  # px into the tile
    half = grout_width / 2.0
    grout = (du < half) | (du > period - half) | (dv < half) | (dv > period - half)
    tile_level = 0.74 + tone[iv % 16, iu % 16] + 0.12 * (mottle - 0.5)
    grout_level = 0.30 + 0.10 * (mottle - 0.5)
    tile_rgb = colourise(np.clip(tile_level, 0.0, 1.0), (0.0, 0.0, 0.0), (0.92, 0.86, 0.74))
    grout_rgb = colourise(np.clip(grout_level, 0.0, 1.0), (0.0, 0.0, 0.0), (0.85, 0.85, 0.88))
    return np.where(grout[..., None], grout_rgb, tile_rgb)


TEXTURES: dict[str, Texture] = {"weave": weave, "grain": grain, "tiles": tiles}
