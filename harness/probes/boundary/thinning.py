"""Morphological thinning (Guo & Hall 1989), as MATLAB's `bwmorph(B, 'thin', inf)` that BSDS applies to
every thresholded boundary map, computed on the foreground pixels only.

Each iteration runs two parallel sub-iterations; in each, a foreground pixel is deleted when its 8
neighbours (x1..x8 counter-clockwise from east) satisfy
    G1: exactly one "crossing" (x_{2i-1} = 0 and (x_{2i} or x_{2i+1}) = 1, i = 1..4),
    G2: 2 ≤ min(n1, n2) ≤ 3 with n1 = Σ (x_{2k-1} or x_{2k}), n2 = Σ (x_{2k} or x_{2k+1}),
    G3: ((x2 or x3 or not x8) and x1) = 0 in the first sub-iteration, G3': ((x6 or x7 or not x4) and x5) = 0
    in the second;
until an iteration deletes nothing. Outside the image is background. scikit-image's `thin` computes the
same thing over the whole image at every sub-iteration; here only the surviving foreground pixels are
looked at, which is what makes thinning 99 thresholds per image cheap (the tests check equality).
"""

from __future__ import annotations

import numpy as np

# neighbour k = Guo & Hall's x_{k+1}, as (row, column) steps; rows grow downwards, so north is row - 1
_NEIGHBOURS = ((0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1), (1, 0), (1, 1))


def _deletion_tables() -> tuple[np.ndarray, np.ndarray]:
    """(256,) bool per sub-iteration: delete a pixel whose neighbour code Σ x_{k+1} 2^k is the index."""
    codes = np.arange(256)
    x = [((codes >> k) & 1).astype(bool) for k in range(8)]
    crossings = sum((~x[2 * i] & (x[2 * i + 1] | x[(2 * i + 2) % 8])).astype(int) for i in range(4))
    n1 = sum((x[2 * k] | x[2 * k + 1]).astype(int) for k in range(4))
    n2 = sum((x[2 * k + 1] | x[(2 * k + 2) % 8]).astype(int) for k in range(4))
    g12 = (crossings == 1) & (np.minimum(n1, n2) >= 2) & (np.minimum(n1, n2) <= 3)
    first = g12 & ~((x[1] | x[2] | ~x[7]) & x[0])
    second = g12 & ~((x[5] | x[6] | ~x[3]) & x[4])
    return first, second


_TABLES = _deletion_tables()


def thin(mask: np.ndarray) -> np.ndarray:
    """The thinned (H, W) bool map of a 2-D binary `mask`.

    A pixel kept by a sub-iteration's table keeps being kept by it until a neighbour is deleted, so each
    sub-iteration re-examines only pixels next to a deletion since its last pass: the same result as
    examining every pixel, at a cost that follows the deletions rather than the blob's area × iterations.
    """
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 2:
        raise ValueError(f"thin needs a 2-D map; got shape {mask.shape}")
    h, w = mask.shape
    canvas = np.zeros((h + 2, w + 2), dtype=bool)  # a background frame: no neighbour lookup leaves the array
    canvas[1:-1, 1:-1] = mask
    flat = canvas.reshape(-1).view(np.uint8)
    steps = np.array([dy * (w + 2) + dx for dy, dx in _NEIGHBOURS])
    pending = [canvas.reshape(-1).copy(), canvas.reshape(-1).copy()]  # per sub-iteration: pixels to examine
    while True:
        deleted = False
        for index, table in enumerate(_TABLES):
            pixels = np.flatnonzero(pending[index] & canvas.reshape(-1))
            pending[index][:] = False
            codes = np.zeros(len(pixels), dtype=np.uint8)
            for bit, step in enumerate(steps):
                codes |= flat[pixels + step] << bit
            gone = pixels[table[codes]]
            if len(gone):
                flat[gone] = 0  # parallel: every code was read before any deletion
                touched = (gone[:, None] + steps[None, :]).ravel()
                pending[0][touched] = pending[1][touched] = True
                deleted = True
        if not deleted:
            return canvas[1:-1, 1:-1].copy()
