"""Decode one image file into 8-bit RGB, or refuse it with an error that names the file.

Every image a backbone sees goes through `decode_rgb` (extraction, and the check an image folder runs when it
is prepared), so a bad file is one clear error, never a silently wrong feature:

- not an image (text under a .jpg name), or a truncated JPEG/PNG: Pillow refuses it; the error names the file.
  Truncated files must never load: `ImageFile.LOAD_TRUNCATED_IMAGES` (which some libraries switch on) would
  fill the missing rows with grey, so it is turned off around every decode here.
- 16-bit greyscale (Pillow's "I;16" modes): `convert("RGB")` clips every value above 255 to white, so a
  16-bit PNG would turn almost all white. It is scaled to 8 bits by its high byte, the rule Pillow itself
  applies to 16-bit RGB PNGs (which therefore already decode correctly).
- CMYK: converted through the file's embedded ICC profile to sRGB when it has one (the colour-managed
  conversion); without a profile, by the device formula R = 255·(1−C)·(1−K) (and so on), written out here so
  the result does not depend on which Pillow version converts (older ones subtracted instead).
- 32-bit integer ("I") or float ("F") pixels have no defined 8-bit range: refused, naming the file.

8-bit modes (L, P, RGB, RGBA, LA, ...) convert exactly as before (`Image.convert("RGB")`), so the features of
every dataset that decoded before are bit-identical.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path

import numpy as np
from PIL import Image, ImageCms, ImageFile, UnidentifiedImageError

SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N")
REFUSED_MODES = {"I": "32-bit integer", "F": "32-bit float"}
_TRUNCATION_GUARD = threading.Lock()


class ImageDecodeError(ValueError):
    """An image file that cannot be decoded into the RGB a backbone sees; the message names the file."""


def decode_rgb(path: Path) -> Image.Image:
    """The image at `path` as 8-bit RGB (see the module docstring for what each kind of file becomes)."""
    try:
        with _TRUNCATION_GUARD:
            allowed = ImageFile.LOAD_TRUNCATED_IMAGES
            ImageFile.LOAD_TRUNCATED_IMAGES = False
            try:
                with Image.open(path) as image:
                    image.load()
                    return _to_rgb(image)
            finally:
                ImageFile.LOAD_TRUNCATED_IMAGES = allowed
    except ImageDecodeError as error:
        raise ImageDecodeError(f"cannot decode image {path}: {error}") from None
    except UnidentifiedImageError:
        raise ImageDecodeError(f"cannot decode image {path}: not an image file Pillow recognises "
                               "(wrong extension, or not an image at all)") from None
    except Image.DecompressionBombError as error:  # not an OSError: it would escape without the file's name
        raise ImageDecodeError(f"cannot decode image {path}: {error}: replace it with a smaller image, or "
                               "remove it") from None
    except (OSError, ValueError, SyntaxError) as error:  # truncated data, bad headers, unsupported conversion
        raise ImageDecodeError(f"cannot decode image {path}: {error}") from None


def _to_rgb(image: Image.Image) -> Image.Image:
    if image.mode in SIXTEEN_BIT_MODES:
        values = np.asarray(image).astype(np.uint16)
        return Image.fromarray((values >> 8).astype(np.uint8)).convert("RGB")
    if image.mode in REFUSED_MODES:
        raise ImageDecodeError(f"{REFUSED_MODES[image.mode]} pixels (mode {image.mode}) have no defined 8-bit "
                               "range; save the image as 8- or 16-bit")
    if image.mode == "CMYK":
        return _cmyk_to_rgb(image)
    return image.convert("RGB")


def _cmyk_to_rgb(image: Image.Image) -> Image.Image:
    profile = image.info.get("icc_profile")
    if profile:
        try:
            source = ImageCms.ImageCmsProfile(io.BytesIO(profile))
            return ImageCms.profileToProfile(image, source, ImageCms.createProfile("sRGB"), outputMode="RGB")
        except (ImageCms.PyCMSError, OSError) as error:
            raise ImageDecodeError(f"CMYK image with an unusable embedded ICC profile ({error})") from None
    cmyk = np.asarray(image, dtype=np.float64) / 255.0
    rgb = 255.0 * (1.0 - cmyk[..., :3]) * (1.0 - cmyk[..., 3:4])
    return Image.fromarray(np.clip(np.rint(rgb), 0, 255).astype(np.uint8))
