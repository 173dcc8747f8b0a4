"""Procedural defects on procedural textures, with exact masks (dataset kind `procedural_defects`).

One texture family per dataset (`texture`: weave, grain or tiles; `defect_textures`), every image a fresh instance
of it, with camera-like noise (`SENSOR_NOISE`). Defective test images get one defect each, drawn on a fresh
texture, with its mask:

- `scratch`: a thin curved line (a quadratic Bézier, 3–4.5 px wide, a quarter to nearly half the image long) in
  the texture's own darkest or brightest colour (`SCRATCH_QUANTILES`); mask = the pixels within half the width of
  the curve;
- `blob`: foreign matter, a union of 3–5 overlapping discs (radius 4–7% of the image) in a colour at least
  `FOREIGN_DISTANCE` from the texture's mean, with a mottle of its own; mask = the union;
- `stain`: a soft stain, an elliptical bump of opacity α = A·(1 − t²)² (A 0.5–0.8, t the elliptical radius over
  14–24% of the image) blending the texture towards one of its own dark colours (`STAIN_QUANTILE`); mask = where
  α ≥ `STAIN_MASK_OPACITY`, i.e. where the stain moves the pixel at least 15% of the way to its colour (the fainter
  rim outside is in the image, not in the defect);
- `missing`: a hole, a union of 2–3 overlapping rectangles (sides 6–12% of the image) where the texture is
  replaced by a flat backing in one of its own dark colours (`HOLE_QUANTILE`: what shows between the threads);
  mask = the union.

Each mask is one 8-connected region of at least `MIN_MASK_PIXELS` (a draw that is not is drawn again), so the
per-region overlap (AUPRO) counts one region per defect. Files are written in the MVTec AD layout and read back
through `anomaly_folder` (one path for users' folders and this one): `train/good/NNN.png`, `test/good/NNN.png`,
`test/<type>/NNN.png`, `ground_truth/<type>/NNN_mask.png` (L, 0/255). Everything comes from one numpy generator
seeded by `seed`, in a fixed order (training images, good test images, then each type's images in
`defect_types` order), with the arithmetic of `defect_textures` (the only reductions are a mean and an exact
sort), so the PNGs are the same bytes on every machine.

Calibration, visible but not trivial, on the weave family at 224 px with the default counts, against a per-pixel
colour detector (each pixel's Mahalanobis distance to the training pixels' RGB Gaussian, the map blurred, its
maximum as the image score), `anomaly_knn` on a pretrained backbone and the same on a random-init control. A first
version, with scratches, stains and blobs in colours far from the texture's, was solved by the colour detector
alone on every type: a texture family's colours lie near a line in RGB, so any colour off it gives a defect away.
So scratches, stains and holes take colours the texture itself has (and sensor noise spreads the line), and only
their shape and placement tell them apart: the colour detector still finds the foreign blobs (the one type meant
to be found by colour) and the holes, and no longer solves the scratches or the stains. The stains are the hard
type; smaller or fainter ones were at chance for every detector tried. The committed anomaly grid's records give
each detector's per-type AUROC (`auroc_<type>`).
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import ndimage

from harness.datasets.anomaly_folder import GOOD, MASK_SUFFIX, read_anomaly_folder
from harness.datasets.defect_textures import TEXTURES, fractal_noise, pixel_grid, unit_vector
from harness.datasets.files import write_png
from harness.datasets.kinds import DATASET_KINDS, DatasetError
from harness.datasets.manifest import Manifest

STAIN_MASK_OPACITY = 0.15
MIN_MASK_PIXELS = 30
FOREIGN_DISTANCE = 120.0  # least RGB distance between a blob's colour and the texture's mean colour
FOREIGN_COLOURS = np.array([(200, 55, 40), (60, 165, 70), (235, 205, 60), (150, 60, 170), (235, 235, 235),
                            (25, 25, 25), (40, 120, 200)], dtype=np.float64)
SCRATCH_QUANTILES = (0.02, 0.98)  # a scratch takes the texture's own darkest or brightest colour
STAIN_QUANTILE = 0.05  # a stain's colour: one of the texture's darkest (wet, same hue)
SENSOR_NOISE = 5.0  # every image gets uniform noise of ± this many grey levels per channel, as a camera would
HOLE_QUANTILE = 0.10  # a hole's backing: one of the texture's own dark colours
Defect = Callable[[np.random.Generator, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _distant(colours: np.ndarray, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One of `colours`, drawn among those at least FOREIGN_DISTANCE from the image's mean colour (the farthest
    when none is)."""
    mean = image.reshape(-1, 3).mean(axis=0)
    difference = colours - mean
    distance = np.sqrt((difference * difference).sum(axis=1))
    far = colours[distance >= FOREIGN_DISTANCE]
    return far[int(rng.integers(len(far)))] if len(far) else colours[int(np.argmax(distance))]


def own_colour(image: np.ndarray, quantile: float) -> np.ndarray:
    """The colour of the image's pixel at a luminance quantile (sorted exactly, so the same on every machine): a
    colour the texture itself contains, which a colour statistic cannot tell from good texture."""
    pixels = image.reshape(-1, 3)
    order = np.argsort(pixels[:, 0] + pixels[:, 1] + pixels[:, 2], kind="stable")
    return pixels[order[int(quantile * (len(order) - 1))]]


def scratch(rng: np.random.Generator, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    size = image.shape[0]
    while True:
        start = rng.uniform(0.15, 0.85, size=2) * size
        direction = unit_vector(rng)
        length = rng.uniform(0.25, 0.45) * size
        end = start + length * direction
        if np.all((end >= 0.08 * size) & (end <= 0.92 * size)):
            break
    bend = rng.uniform(-0.25, 0.25)
    control = (start + end) / 2.0 + bend * length * np.array([-direction[1], direction[0]])
    width = rng.uniform(3.0, 4.5)
    t = np.linspace(0.0, 1.0, 49)[:, None]
    curve = (1 - t) * (1 - t) * start + 2 * (1 - t) * t * control + t * t * end  # (49, 2) points (x, y)
    x, y = pixel_grid(size)
    nearest = np.full((size, size), np.inf)
    for a, b in itertools.pairwise(curve):
        dx, dy = b[0] - a[0], b[1] - a[1]
        h = np.clip(((x - a[0]) * dx + (y - a[1]) * dy) / (dx * dx + dy * dy), 0.0, 1.0)
        ex, ey = x - a[0] - h * dx, y - a[1] - h * dy
        nearest = np.minimum(nearest, ex * ex + ey * ey)
    mask = nearest <= (width / 2.0) * (width / 2.0)
    colour = own_colour(image, SCRATCH_QUANTILES[int(rng.integers(2))])
    return np.where(mask[..., None], colour, image), mask


def _disc_union(rng: np.random.Generator, size: int, radius: tuple[float, float], extra: tuple[int, int]
                ) -> np.ndarray:
    """A first disc and 2–4 smaller ones centred inside it (so the union is connected)."""
    x, y = pixel_grid(size)
    first_radius = rng.uniform(*radius) * size
    centre = rng.uniform(0.15, 0.85, size=2) * size
    mask = (x - centre[0]) * (x - centre[0]) + (y - centre[1]) * (y - centre[1]) <= first_radius * first_radius
    for _ in range(int(rng.integers(extra[0], extra[1] + 1))):
        at = centre + first_radius * rng.uniform(0.5, 0.9) * unit_vector(rng)
        r = first_radius * rng.uniform(0.45, 0.8)
        mask |= (x - at[0]) * (x - at[0]) + (y - at[1]) * (y - at[1]) <= r * r
    return mask


def blob(rng: np.random.Generator, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    size = image.shape[0]
    mask = _disc_union(rng, size, (0.04, 0.07), (2, 4))
    colour = _distant(FOREIGN_COLOURS, image, rng)
    mottle = fractal_noise(rng, size, (4.0, 2.0))
    matter = colour * (0.8 + 0.4 * mottle[..., None])
    return np.where(mask[..., None], matter, image), mask


def stain(rng: np.random.Generator, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    size = image.shape[0]
    radius = rng.uniform(0.14, 0.24) * size
    aspect = rng.uniform(0.55, 1.0)
    along = unit_vector(rng)
    strength = rng.uniform(0.5, 0.8)
    centre = rng.uniform(0.2, 0.8, size=2) * size
    colour = own_colour(image, STAIN_QUANTILE)
    x, y = pixel_grid(size)
    dx, dy = x - centre[0], y - centre[1]
    a = (dx * along[0] + dy * along[1]) / radius
    b = (-dx * along[1] + dy * along[0]) / (radius * aspect)
    inside = np.maximum(1.0 - (a * a + b * b), 0.0)
    opacity = strength * inside * inside
    return image + opacity[..., None] * (colour - image), opacity >= STAIN_MASK_OPACITY


def missing(rng: np.random.Generator, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    size = image.shape[0]
    x, y = pixel_grid(size)
    half = rng.uniform(0.03, 0.06, size=2) * size
    centre = rng.uniform(0.2, 0.8, size=2) * size
    mask = (np.abs(x - centre[0]) <= half[0]) & (np.abs(y - centre[1]) <= half[1])
    for _ in range(int(rng.integers(1, 3))):  # more rectangles centred inside the first
        at = centre + rng.uniform(-1.0, 1.0, size=2) * half
        other = half * rng.uniform(0.4, 0.9, size=2)
        mask |= (np.abs(x - at[0]) <= other[0]) & (np.abs(y - at[1]) <= other[1])
    backing = own_colour(image, HOLE_QUANTILE)  # the darkest the texture gets: what shows between its threads
    noise = fractal_noise(rng, size, (3.0, 1.5))
    return np.where(mask[..., None], backing + 8.0 * (noise[..., None] - 0.5), image), mask


DEFECTS: dict[str, Defect] = {"scratch": scratch, "blob": blob, "stain": stain, "missing": missing}


def _one_region(mask: np.ndarray) -> bool:
    _, count = ndimage.label(mask, structure=np.ones((3, 3), dtype=int))
    return count == 1 and int(mask.sum()) >= MIN_MASK_PIXELS


def draw_defect(rng: np.random.Generator, texture: str, kind: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A fresh texture with one `kind` defect: (uint8 RGB, bool mask)."""
    while True:
        clean = TEXTURES[texture](rng, size)
        image, mask = DEFECTS[kind](rng, clean)
        if _one_region(mask):
            return _photographed(image, rng), mask


def _photographed(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sensor noise, then 8 bits: the noise spreads the colours of a texture family, which lie near a line in RGB,
    so a colour that is a few levels off that line is not an anomaly by itself."""
    noise = rng.uniform(-SENSOR_NOISE, SENSOR_NOISE, size=image.shape)
    return np.clip(np.rint(image + noise), 0, 255).astype(np.uint8)


@DATASET_KINDS.register("procedural_defects")
def prepare_procedural_defects(
    name: str, out_dir: Path, texture: str, seed: int, size: int = 224, train_good: int = 60, test_good: int = 30,
    test_per_type: int = 15, defect_types: list[str] | tuple[str, ...] = tuple(DEFECTS),
) -> Manifest:
    if texture not in TEXTURES:
        raise DatasetError(f"dataset {name}: texture {texture!r} is not one of {', '.join(TEXTURES)}")
    unknown = sorted(set(defect_types) - set(DEFECTS))
    if unknown or not defect_types or len(set(defect_types)) != len(defect_types):
        raise DatasetError(f"dataset {name}: defect_types must name distinct types among {', '.join(DEFECTS)}; "
                           f"got {list(defect_types)}")
    if size < 32 or min(train_good, test_good, test_per_type) < 1:
        raise DatasetError(f"dataset {name}: size must be at least 32 px and every count at least 1")
    out_dir = Path(out_dir)
    for owned in ("train", "test", "ground_truth", "masks"):  # a re-run with fewer images leaves no stale ones
        shutil.rmtree(out_dir / owned, ignore_errors=True)
    rng = np.random.default_rng(seed)
    for split, count in (("train", train_good), ("test", test_good)):
        for index in range(count):
            write_png(out_dir / split / GOOD / f"{index:03d}.png", _photographed(TEXTURES[texture](rng, size), rng))
    for kind in defect_types:
        for index in range(test_per_type):
            image, mask = draw_defect(rng, texture, kind, size)
            write_png(out_dir / "test" / kind / f"{index:03d}.png", image)
            write_png(out_dir / "ground_truth" / kind / f"{index:03d}{MASK_SUFFIX}", mask.astype(np.uint8) * 255)
    items, classes, params, extra = read_anomaly_folder(name, out_dir, out_dir)
    generated = {"texture": texture, "seed": seed, "size": size, "train_good": train_good, "test_good": test_good,
                 "test_per_type": test_per_type, "defect_types": list(defect_types),
                 "stain_mask_opacity": STAIN_MASK_OPACITY, "min_mask_pixels": MIN_MASK_PIXELS}
    return Manifest(name, str(out_dir), items, classes, {**params, "generated": generated}, extra)
