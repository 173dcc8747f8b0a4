"""2AFC triplets where pixel distance points the wrong way by construction (dataset kind `structure_2afc`).

The distortion-ordering set (`distortion_2afc`) pits two strengths of the *same* distortion against each other,
which anything monotone solves, a pixel metric and a random network included. Here the two sides differ in
kind: one keeps the scene's structure and changes its appearance, the other keeps its colours and degrades its
structure, with *lower* pixel MSE than the first — the classic failure of pixel metrics (Wang & Bovik's "Mean
squared error: love it or leave it?", 2009, figure 2).

- **the structure-preserving side** (the answer): a global colour change, each channel scaled by 1 ± s (red
  and blue in opposite directions, a white-balance shift) and the whole image offset by ±100·s grey levels,
  s = `colour_shift`;
- **the degraded side**: Gaussian blur (σ in px, on the surrounding photo) or additive Gaussian noise (σ on the
  0–255 scale, one seeded noise field per triplet, scaled), at the strongest σ of a fine ladder whose pixel MSE
  to the reference is at most `ratio` × the colour side's. Each `ratios` entry is a difficulty level: the lower
  the ratio, the milder the degradation.

So a pixel-MSE judge scores 0 on every triplet, by construction (each triplet records both MSEs, and the
prepare step refuses a triplet where the ladder cannot get below the bound). The answer is set by the
construction, not by human votes: at the lowest ratios the degradation is mild (blur σ below 1 px) and a person
may call the blurred side closer; the per-level accuracies (`accuracy_<degradation>_r<ratio in %>`) show where
a backbone's judgement turns. Triplets follow `two_afc.py`'s convention: the answer has vote 1, `votes` 1,
`human_votes` false. Everything is drawn from one numpy generator seeded by `seed`, in a fixed order; PNGs are
byte-deterministic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.ndimage import gaussian_filter

from harness.datasets.files import write_png
from harness.datasets.homography import photo_classes, seeded_crops
from harness.datasets.kinds import DATASET_KINDS
from harness.datasets.manifest import Item, Manifest
from harness.datasets.two_afc import STRUCTURE_OVER_PIXELS

# Pixels kept around every crop, so blur reads the photo, not a reflection: gaussian_filter truncates at 4σ,
# 32 px at the ladder's largest σ.
MARGIN = 32
LADDERS = {"blur": np.round(np.arange(0.3, 8.0001, 0.1), 2), "noise": np.round(np.arange(0.5, 60.0001, 0.5), 2)}


def _to_uint8(array: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(array), 0, 255).astype(np.uint8)


def pixel_mse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))


def colour_change(crop: np.ndarray, shift: float, rng: np.random.Generator) -> np.ndarray:
    gains = np.array([1 + shift, 1.0, 1 - shift]) if rng.integers(2) else np.array([1 - shift, 1.0, 1 + shift])
    offset = (1 if rng.integers(2) else -1) * 100.0 * shift
    return _to_uint8(crop.astype(np.float64) * gains + offset)


def degrade(window: np.ndarray, kind: str, sigma: float, noise_field: np.ndarray) -> np.ndarray:
    """The reference (the centre of `window`, MARGIN px inside) blurred or noised at `sigma`."""
    size = window.shape[0] - 2 * MARGIN
    if kind == "blur":
        blurred = gaussian_filter(window.astype(np.float64), sigma=(sigma, sigma, 0), mode="reflect")
        return _to_uint8(blurred[MARGIN: MARGIN + size, MARGIN: MARGIN + size])
    crop = window[MARGIN: MARGIN + size, MARGIN: MARGIN + size].astype(np.float64)
    return _to_uint8(crop + sigma * noise_field)


def matched_degradation(window: np.ndarray, kind: str, bound: float, noise_field: np.ndarray
                        ) -> tuple[float, np.ndarray]:
    """The strongest ladder σ whose degraded image has pixel MSE at most `bound` to the reference."""
    reference = window[MARGIN:-MARGIN, MARGIN:-MARGIN]
    found = None
    for sigma in LADDERS[kind]:
        image = degrade(window, kind, float(sigma), noise_field)
        if pixel_mse(reference, image) > bound:
            break
        found = (float(sigma), image)
    if found is None:
        raise ValueError(f"structure_2afc: even the mildest {kind} (σ {LADDERS[kind][0]}) has pixel MSE above "
                         f"{bound:.2f}; raise colour_shift or the ratio")
    return found


@DATASET_KINDS.register("structure_2afc")
def prepare_structure_2afc(
    name: str, out_dir: Path, photos: list[str], photo_size: int, size: int, crops_per_photo: int,
    colour_shift: float, degradations: list[str], ratios: list[float], seed: int,
) -> Manifest:
    unknown = sorted(set(degradations) - set(LADDERS))
    if unknown or not degradations:
        raise ValueError(f"structure_2afc degradations are {', '.join(LADDERS)}; got {list(degradations)}")
    if not ratios or any(not 0 < r < 1 for r in ratios):
        raise ValueError(f"structure_2afc ratios must lie strictly between 0 and 1; got {list(ratios)}")
    rng = np.random.default_rng(seed)
    crops = seeded_crops(photos, photo_size, size, crops_per_photo, MARGIN, rng)
    out_dir = Path(out_dir)
    items: list[Item] = []
    triplets = []
    for photo_index, folder, source, y, x in crops:
        window = source[y - MARGIN: y + size + MARGIN, x - MARGIN: x + size + MARGIN]
        crop = window[MARGIN: MARGIN + size, MARGIN: MARGIN + size]
        reference, kept = f"{folder}/ref.png", f"{folder}/colour.png"
        coloured = colour_change(crop, colour_shift, rng)
        items.append(Item(reference, write_png(out_dir / reference, crop), "test", photo_index))
        items.append(Item(kept, write_png(out_dir / kept, coloured), "test", photo_index))
        colour_mse = pixel_mse(crop, coloured)
        noise_field = rng.normal(0.0, 1.0, size=crop.shape)
        for kind in degradations:
            for ratio in ratios:
                level = f"{kind}_r{round(ratio * 100)}"
                sigma, image = matched_degradation(window, kind, ratio * colour_mse, noise_field)
                degraded = f"{folder}/{level}.png"
                items.append(Item(degraded, write_png(out_dir / degraded, image), "test", photo_index))
                kept_left = bool(rng.integers(2))
                left, right = (kept, degraded) if kept_left else (degraded, kept)
                triplets.append({
                    "id": f"{folder}/{level}", "ref": reference, "left": left, "right": right, "split": "test",
                    "left_vote": float(kept_left), "right_vote": float(not kept_left), "votes": 1,
                    "distortion": level, "degradation_sigma": sigma, "colour_mse": colour_mse,
                    "degraded_mse": pixel_mse(crop, image),
                })
    params = {"photos": photos, "photo_size": photo_size, "size": size, "crops_per_photo": crops_per_photo,
              "colour_shift": colour_shift, "degradations": list(degradations), "ratios": list(ratios),
              "seed": seed, "ladders": {kind: LADDERS[kind].tolist() for kind in degradations}}
    extra = {"triplets": triplets, "reference": STRUCTURE_OVER_PIXELS, "human_votes": False}
    return Manifest(name, str(out_dir), items, photo_classes(photos), params, extra)
