"""Image preprocessing as data: the resolved spec is hashed into every identity and cache key.

Resizing is done with Pillow (antialiased, deterministic) rather than tensor ops, so that the same
image bytes give the same input tensor on every machine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

if TYPE_CHECKING:
    import torch

_INTERPOLATION = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


FITS = ("crop", "squash")


@dataclass(frozen=True)
class Preprocess:
    """Resize the shorter side to `resize`, centre-crop `crop`×`crop`, scale to [0,1], normalise.

    That is the backbone's own evaluation transform (`fit="crop"`). Dense probes ask for `fit="squash"`:
    the whole image resized to `crop`×`crop`, so every backbone sees the same pixels whatever its
    `resize`, and a prediction upsampled to the image's size lies on the image (see docs/protocols.md).
    """

    crop: int
    resize: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str = "bicubic"

    @classmethod
    def from_crop_pct(cls, crop: int, crop_pct: float, **kwargs) -> Preprocess:
        # timm's eval transform: the shorter side goes to floor(crop / crop_pct) before the centre crop.
        return cls(crop=crop, resize=int(crop / crop_pct), **kwargs)

    def spec(self) -> dict:
        return {"library": "pillow", **asdict(self)}

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        scale = self.resize / min(width, height)
        return max(self.crop, round(width * scale)), max(self.crop, round(height * scale))

    def __call__(self, image: Image.Image, fit: str = "crop") -> torch.Tensor:
        import torch  # here, not at the top: probe stages read this module's geometry and never import torch

        _check_fit(fit)
        image = image.convert("RGB")
        if fit == "squash":
            image = image.resize((self.crop, self.crop), _INTERPOLATION[self.interpolation])
        else:
            new_w, new_h = self.resized_size(*image.size)
            image = image.resize((new_w, new_h), _INTERPOLATION[self.interpolation])
            left, top = _crop_origin(new_w, new_h, self.crop)
            image = image.crop((left, top, left + self.crop, top + self.crop))
        array = np.asarray(image, dtype=np.float32) / 255.0
        array = (array - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))

    def grid_centres_in_image(self, grid_hw: tuple[int, int], width: int, height: int) -> np.ndarray:
        """(gh, gw, 2) xy pixel coordinates, in the original image, of each feature cell's centre."""
        new_w, new_h = self.resized_size(width, height)
        left, top = _crop_origin(new_w, new_h, self.crop)
        gh, gw = grid_hw
        xs = (np.arange(gw) + 0.5) * self.crop / gw + left
        ys = (np.arange(gh) + 0.5) * self.crop / gh + top
        grid = np.stack(np.meshgrid(xs, ys), axis=-1)
        return grid * np.array([width / new_w, height / new_h])

    def image_to_grid(self, points_xy: np.ndarray, grid_hw: tuple[int, int], width: int, height: int):
        """Continuous (row, col) feature-grid coordinates of original-image points (cell centres at .5)."""
        new_w, new_h = self.resized_size(width, height)
        left, top = _crop_origin(new_w, new_h, self.crop)
        gh, gw = grid_hw
        x = points_xy[..., 0] * new_w / width - left
        y = points_xy[..., 1] * new_h / height - top
        return np.stack([y * gh / self.crop, x * gw / self.crop], axis=-1)


def _check_fit(fit: str) -> None:
    if fit not in FITS:
        raise ValueError(f"unknown fit {fit!r}; valid: {', '.join(FITS)}")


def _crop_origin(width: int, height: int, crop: int) -> tuple[int, int]:
    return round((width - crop) / 2), round((height - crop) / 2)
