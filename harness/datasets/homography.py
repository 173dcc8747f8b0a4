"""Photo pairs related by known random homographies, for the correspondence probe.

Sources are real photographs bundled with scikit-image and scikit-learn (no download). Each photo is
centre-cropped to a square and resized; each warp perturbs the four corners by up to `max_shift` of
the side and maps the photo through the resulting homography. Everything is seeded, so the pairs and
their ground truth are identical on every machine.

A list of `max_shift` levels makes a warp-strength sweep: `warps_per_photo` warps of every photo at each level
(`<photo>/s<level index>_warp<i>.png`), each pair recording its level, so the correspondence probe can report
PCK per level. A single value writes the layout and manifest it always has.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
from PIL import Image

from harness.datasets.files import write_png
from harness.datasets.kinds import DATASET_KINDS
from harness.datasets.manifest import Item, Manifest

# (loader, name): skimage.data photos ship inside the wheel; sklearn's two sample images too.
BUNDLED_PHOTOS = [
    "skimage:astronaut", "skimage:chelsea", "skimage:coffee", "skimage:rocket",
    "skimage:stereo_motorcycle", "skimage:immunohistochemistry", "sklearn:china.jpg", "sklearn:flower.jpg",
]


def load_bundled_photo(ref: str) -> np.ndarray:
    library, name = ref.split(":", 1)
    if library == "skimage":
        import skimage.data

        photo = getattr(skimage.data, name)()
        return np.asarray(photo[0] if isinstance(photo, tuple) else photo)  # stereo pairs: the left view
    if library == "sklearn":
        from sklearn.datasets import load_sample_image

        return np.asarray(load_sample_image(name))
    raise KeyError(f"unknown photo library {library!r} in {ref!r}; valid: skimage, sklearn")


def square_photo(array: np.ndarray, size: int) -> np.ndarray:
    image = Image.fromarray(array).convert("RGB")
    side = min(image.size)
    left, top = (image.width - side) // 2, (image.height - side) // 2
    image = image.crop((left, top, left + side, top + side))
    return np.asarray(image.resize((size, size), Image.Resampling.BICUBIC))


def photo_stem(ref: str) -> str:
    """"sklearn:china.jpg" → "china": the folder a bundled photo's files are written under."""
    return ref.split(":", 1)[1].split(".")[0]


def photo_classes(photos: list[str]) -> list[str]:
    """A manifest's classes for datasets made from bundled photos: one per photo, its name."""
    return [ref.split(":", 1)[1] for ref in photos]


def seeded_crops(photos: list[str], photo_size: int, size: int, crops_per_photo: int, margin: int,
                 rng: np.random.Generator) -> Iterator[tuple[int, str, np.ndarray, int, int]]:
    """(photo index, "stem/cNN" folder, the photo squared to `photo_size`, y, x) for each crop: its top-left
    corner drawn from `rng` so that `margin` px of photo surround it. Positions are drawn one crop at a time as
    the caller iterates, so draws the caller makes per crop interleave with them in a fixed order. The size
    check is made here, before the first photo is read."""
    if photo_size < size + 2 * margin:
        raise ValueError(f"photo_size ({photo_size}) must be at least size + {2 * margin} ({size + 2 * margin})")

    def crops() -> Iterator[tuple[int, str, np.ndarray, int, int]]:
        for photo_index, ref in enumerate(photos):
            source = square_photo(load_bundled_photo(ref), photo_size)
            for crop_index in range(crops_per_photo):
                y, x = (int(v) for v in rng.integers(margin, photo_size - size - margin + 1, size=2))
                yield photo_index, f"{photo_stem(ref)}/c{crop_index:02d}", source, y, x

    return crops()


def random_homography(rng: np.random.Generator, size: int, max_shift: float) -> np.ndarray:
    """Homography (3×3, source → target pixels) that moves each image corner by up to max_shift·size."""
    corners = np.array([[0, 0], [size, 0], [size, size], [0, size]], dtype=np.float64)
    moved = corners + rng.uniform(-max_shift, max_shift, size=(4, 2)) * size
    return homography_from_points(corners, moved)


def homography_from_points(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Exact homography through four point pairs (direct linear solve with h33 = 1)."""
    rows, rhs = [], []
    for (x, y), (u, v) in zip(source, target, strict=True):
        rows.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        rows.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        rhs += [u, v]
    h = np.linalg.solve(np.array(rows), np.array(rhs))
    return np.append(h, 1.0).reshape(3, 3)


def apply_homography(homography: np.ndarray, points_xy: np.ndarray) -> np.ndarray:
    homogeneous = np.concatenate([points_xy, np.ones((*points_xy.shape[:-1], 1))], axis=-1) @ homography.T
    return homogeneous[..., :2] / homogeneous[..., 2:3]


def warp_photo(photo: np.ndarray, homography: np.ndarray) -> np.ndarray:
    from skimage.transform import ProjectiveTransform, warp

    # skimage's warp takes the inverse map (target → source); outside pixels become black.
    inverse = ProjectiveTransform(np.linalg.inv(homography))
    warped = warp(photo, inverse, output_shape=photo.shape[:2], order=1, mode="constant", cval=0.0)
    return np.clip(np.rint(warped * 255.0), 0, 255).astype(np.uint8)


@DATASET_KINDS.register("homography_photos")
def prepare_homography_photos(
    name: str, out_dir: Path, photos: list[str], size: int, warps_per_photo: int, max_shift: float | list[float],
    seed: int,
) -> Manifest:
    levels = [max_shift] if isinstance(max_shift, int | float) else list(max_shift)
    if not levels or any(not 0 < level < 0.5 for level in levels) or len(set(levels)) < len(levels):
        raise ValueError(f"max_shift {max_shift!r}: give one value, or distinct values, each in (0, 0.5) of the side")
    sweep = not isinstance(max_shift, int | float)
    rng = np.random.default_rng(seed)
    items: list[Item] = []
    pairs = []
    for photo_index, ref in enumerate(photos):
        photo = square_photo(load_bundled_photo(ref), size)
        stem = photo_stem(ref)
        source_rel = f"{stem}/source.png"
        items.append(Item(source_rel, write_png(out_dir / source_rel, photo), "test", photo_index))
        for level_index, level in enumerate(levels):
            for warp_index in range(warps_per_photo):
                homography = random_homography(rng, size, level)
                target_rel = f"{stem}/s{level_index}_warp{warp_index}.png" if sweep else f"{stem}/warp{warp_index}.png"
                items.append(Item(target_rel, write_png(out_dir / target_rel, warp_photo(photo, homography)), "test",
                                  photo_index))
                pairs.append({"source": source_rel, "target": target_rel,
                              "homography": np.round(homography, 12).tolist(),
                              **({"max_shift": level} if sweep else {})})
    params = {"photos": photos, "size": size, "warps_per_photo": warps_per_photo, "max_shift": max_shift,
              "seed": seed}
    return Manifest(name, str(out_dir), items, photo_classes(photos), params, extra={"pairs": pairs})
