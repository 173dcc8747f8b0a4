"""Edge non-maximum suppression as the Structured Edges toolbox does it before BSDS evaluation.

HED, RCF and the SE toolbox (Dollár & Zitnick, `edgesDetect.m` / `edgesNmsMex.cpp`) all run, on a soft
edge map E in [0, 1]:

    E = convTri(E, 1)
    [Ox, Oy] = gradient2(convTri(E, 4)); [Oxx, ~] = gradient2(Ox); [Oxy, Oyy] = gradient2(Oy)
    O = mod(atan(Oyy .* sign(-Oxy) ./ (Oxx + 1e-5)), pi)           % the edge normal's angle
    E = edgesNmsMex(E, O, r=1, s=5, m=1.01)

`edgesNmsMex` zeroes a pixel when a bilinearly interpolated neighbour at distance 1..r along the normal
is stronger than m × the pixel, then fades the s pixels nearest each image border linearly to 0 (edge
estimates there are unreliable). Everything here is vectorised numpy in float64; the MATLAB code works
in single precision, which only matters for ties that the 1 % margin `m` already absorbs.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import correlate1d


def conv_tri(image: np.ndarray, radius: int) -> np.ndarray:
    """Piotr's `convTri`: separable triangle filter, symmetric (edge-repeating) padding.

    Radius 1 is the [1 2 1]/4 kernel (`p = 12/r/(r+2) - 2 = 2`); radius r > 1 is [1..r+1..1]/(r+1)².
    """
    if radius < 1:
        raise ValueError(f"conv_tri radius must be at least 1; got {radius}")
    ramp = np.arange(1, radius + 2, dtype=np.float64)
    kernel = np.concatenate([ramp, ramp[-2::-1]]) / (radius + 1) ** 2
    # scipy's "reflect" repeats the edge sample, as MATLAB's 'symmetric' padding does
    out = correlate1d(np.asarray(image, dtype=np.float64), kernel, axis=0, mode="reflect")
    return correlate1d(out, kernel, axis=1, mode="reflect")


def edge_orientation(edges: np.ndarray) -> np.ndarray:
    """The normal's angle in [0, π) (x = columns, y = rows) from second derivatives of the smoothed map."""
    oy, ox = np.gradient(conv_tri(edges, 4))  # gradient2 = MATLAB gradient: central inside, one-sided at borders
    oxx = np.gradient(ox, axis=1)
    oyy, oxy = np.gradient(oy)
    return np.mod(np.arctan(oyy * np.sign(-oxy) / (oxx + 1e-5)), np.pi)


def _bilinear(image: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """`edgesNmsMex`'s interp: clamp to [0, size - 1.001], then bilinear from the four neighbours."""
    h, w = image.shape
    x = np.clip(x, 0.0, w - 1.001)
    y = np.clip(y, 0.0, h - 1.001)
    x0, y0 = x.astype(np.int64), y.astype(np.int64)
    dx, dy = x - x0, y - y0
    return (image[y0, x0] * (1 - dx) * (1 - dy) + image[y0, x0 + 1] * dx * (1 - dy)
            + image[y0 + 1, x0] * (1 - dx) * dy + image[y0 + 1, x0 + 1] * dx * dy)


def suppress(edges: np.ndarray, orientation: np.ndarray, radius: int = 1, border: int = 5,
             margin: float = 1.01) -> np.ndarray:
    """`edgesNmsMex(E, O, r, s, m)`: non-maxima along the normal set to 0, then the border fade."""
    edges = np.asarray(edges, dtype=np.float64)
    h, w = edges.shape
    out = edges.copy()
    ys, xs = np.nonzero(edges)
    cos_o, sin_o = np.cos(orientation[ys, xs]), np.sin(orientation[ys, xs])
    strength = edges[ys, xs] * margin
    beaten = np.zeros(len(ys), dtype=bool)
    for step in range(-radius, radius + 1):
        if step:
            beaten |= strength < _bilinear(edges, xs + step * cos_o, ys + step * sin_o)
    out[ys[beaten], xs[beaten]] = 0.0
    border = min(border, w // 2, h // 2)
    if border > 0:
        cols, rows = np.arange(w), np.arange(h)
        fade_x = np.minimum(np.minimum(cols, w - 1 - cols), border) / border
        fade_y = np.minimum(np.minimum(rows, h - 1 - rows), border) / border
        out *= fade_y[:, None] * fade_x[None, :]
    return out


def edge_nms(edges: np.ndarray) -> np.ndarray:
    """The full SE/HED chain on a (H, W) map in [0, 1]: smooth, orient, suppress (r=1, s=5, m=1.01)."""
    smoothed = conv_tri(edges, 1)
    return suppress(smoothed, edge_orientation(smoothed), radius=1, border=5, margin=1.01)
