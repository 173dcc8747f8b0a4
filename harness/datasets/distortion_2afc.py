"""2AFC triplets whose answer is known by construction (dataset kind `distortion_2afc`), the offline default.

Reference crops are cut at seeded positions from the photographs bundled with scikit-image and scikit-learn
(`homography.BUNDLED_PHOTOS`). For each crop and each distortion type, two distortions of that *same* type
are made at two different strengths (two distinct levels of the type's ladder, drawn at random); the weaker
one is the correct answer, on a random side. The triplet follows the 2AFC convention of `two_afc.py` with
the construction as its one judgement: the weaker side has vote 1, the other 0, `votes` 1, and
`human_votes` false (so the probe's `min_votes`, a filter on human judgements, does not apply).

Levels per type, weakest first (`DISTORTIONS`):

| type | what | levels |
|---|---|---|
| blur | Gaussian blur, σ in pixels (scipy.ndimage, per channel, on the surrounding photo) | 0.5 1 1.5 2 3 |
| noise | additive Gaussian noise, σ on the 0–255 scale, then rounded and clipped | 3 6 10 15 22 |
| jpeg | JPEG round trip at this Pillow quality (lower is stronger) | 80 50 30 18 10 |
| contrast | pixels pulled toward the crop's mean grey, mean + c·(x − mean); lower c is stronger | .9 .75 .6 .45 .3 |
| shift | the crop window moved by d pixels in a random direction within the photo | 1 2 4 6 9 |

Everything is drawn from one `numpy` generator seeded by `seed`, in a fixed order, and PNGs are written
byte-deterministically, so the same parameters give the same files and the same identity on every machine
with the same numpy/scipy/Pillow (the JPEG levels depend on Pillow's bundled libjpeg).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image
from scipy.ndimage import gaussian_filter

from harness.datasets.files import write_png
from harness.datasets.homography import photo_classes, seeded_crops
from harness.datasets.kinds import DATASET_KINDS
from harness.datasets.manifest import Item, Manifest
from harness.datasets.two_afc import DISTORTION_ORDER

# Pixels kept around every crop: room for the largest shift and for blur to read real neighbours
# (gaussian_filter's default truncation, 4σ at σ = 3, reaches 12 px).
MARGIN = 16


def _crop(source: np.ndarray, y: int, x: int, size: int) -> np.ndarray:
    return source[y: y + size, x: x + size]


def _to_uint8(array: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(array), 0, 255).astype(np.uint8)


def blur(source: np.ndarray, y: int, x: int, size: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    window = _crop(source, y - MARGIN, x - MARGIN, size + 2 * MARGIN).astype(np.float64)
    blurred = gaussian_filter(window, sigma=(sigma, sigma, 0), mode="reflect")
    return _to_uint8(blurred[MARGIN: MARGIN + size, MARGIN: MARGIN + size])


def noise(source: np.ndarray, y: int, x: int, size: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    crop = _crop(source, y, x, size).astype(np.float64)
    return _to_uint8(crop + rng.normal(0.0, sigma, size=crop.shape))


def jpeg(source: np.ndarray, y: int, x: int, size: int, quality: float, rng: np.random.Generator) -> np.ndarray:
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(_crop(source, y, x, size))).save(buffer, format="JPEG", quality=int(quality))
    with Image.open(buffer) as image:
        return np.asarray(image.convert("RGB"))


def contrast(source: np.ndarray, y: int, x: int, size: int, factor: float, rng: np.random.Generator) -> np.ndarray:
    crop = _crop(source, y, x, size).astype(np.float64)
    mean = crop.mean()
    return _to_uint8(mean + factor * (crop - mean))


def shift(source: np.ndarray, y: int, x: int, size: int, distance: float, rng: np.random.Generator) -> np.ndarray:
    angle = rng.uniform(0.0, 2.0 * np.pi)
    dy, dx = round(distance * np.sin(angle)), round(distance * np.cos(angle))
    return _crop(source, y + dy, x + dx, size).copy()


Distortion = Callable[[np.ndarray, int, int, int, float, np.random.Generator], np.ndarray]
DISTORTIONS: dict[str, tuple[Distortion, tuple[float, ...]]] = {
    "blur": (blur, (0.5, 1.0, 1.5, 2.0, 3.0)),
    "noise": (noise, (3.0, 6.0, 10.0, 15.0, 22.0)),
    "jpeg": (jpeg, (80.0, 50.0, 30.0, 18.0, 10.0)),
    "contrast": (contrast, (0.9, 0.75, 0.6, 0.45, 0.3)),
    "shift": (shift, (1.0, 2.0, 4.0, 6.0, 9.0)),
}


@DATASET_KINDS.register("distortion_2afc")
def prepare_distortion_2afc(
    name: str, out_dir: Path, photos: list[str], photo_size: int, size: int, crops_per_photo: int,
    distortions: list[str], seed: int,
) -> Manifest:
    unknown = sorted(set(distortions) - set(DISTORTIONS))
    if unknown or not distortions:
        raise ValueError(f"distortion_2afc distortions are {', '.join(DISTORTIONS)}; got {list(distortions)}")
    rng = np.random.default_rng(seed)
    crops = seeded_crops(photos, photo_size, size, crops_per_photo, MARGIN, rng)
    out_dir = Path(out_dir)
    items: list[Item] = []
    triplets = []
    for photo_index, folder, source, y, x in crops:
        reference = f"{folder}/ref.png"
        items.append(Item(reference, write_png(out_dir / reference, _crop(source, y, x, size)), "test",
                          photo_index))
        for kind in distortions:
            function, levels = DISTORTIONS[kind]
            weak, strong = sorted(int(k) for k in rng.choice(len(levels), size=2, replace=False))
            paths = []
            for level in (weak, strong):
                rel = f"{folder}/{kind}{level}.png"
                image = function(source, y, x, size, levels[level], rng)
                items.append(Item(rel, write_png(out_dir / rel, image), "test", photo_index))
                paths.append(rel)
            weak_left = bool(rng.integers(2))
            left, right = (0, 1) if weak_left else (1, 0)
            triplets.append({
                "id": f"{folder}/{kind}", "ref": reference, "left": paths[left], "right": paths[right],
                "split": "test", "left_vote": float(weak_left), "right_vote": float(not weak_left), "votes": 1,
                "distortion": kind, "left_strength": levels[(weak, strong)[left]],
                "right_strength": levels[(weak, strong)[right]],
            })
    params = {"photos": photos, "photo_size": photo_size, "size": size, "crops_per_photo": crops_per_photo,
              "distortions": list(distortions), "seed": seed,
              "levels": {kind: list(DISTORTIONS[kind][1]) for kind in distortions}}
    extra = {"triplets": triplets, "reference": DISTORTION_ORDER, "human_votes": False}
    return Manifest(name, str(out_dir), items, photo_classes(photos), params, extra)
