"""Per-image BSDS boundary counts: threshold, thin, match each annotator one-to-one within a tolerance.

Follows `evaluation_bdry_image.m` (BSDS500 benchmark, Arbelaez et al. 2011) and SE's `edgesEvalImg.m`:
for every threshold t, `bmap = bwmorph(pb >= t, 'thin', inf)`; for every annotator,
`[match1, match2] = correspondPixels(bmap, gt, maxDist)`; then

    cntR += nnz(match2)   sumR += nnz(gt)     (summed over annotators)
    cntP  = nnz(match1 of ANY annotator)      sumP = nnz(bmap)

`correspondPixels` (Martin, Fowlkes & Malik's `match.cc`) links a predicted and a human pixel when their
distance is ≤ maxDist × the image diagonal and solves a min-cost assignment in which leaving a pixel
unmatched costs 100 × maxDist, so it maximises the number of matched pairs first (with an approximate
CSA solver on a randomly sparsified outlier graph) and their total distance second. Here the same graph
gets an exact maximum-cardinality matching (a unit-capacity maximum flow, `_max_matching`), so cntR is
at least the CSA's and usually equal. Which of several equally large matchings is
chosen is not distance-aware, so cntP (a union over annotators) can differ from the reference by a few
pixels; the tests bound both differences.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.ndimage import distance_transform_edt
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from harness.probes.boundary.thinning import thin


def bsds_thresholds(count: int) -> np.ndarray:
    """`linspace(1/(K+1), 1 - 1/(K+1), K)`: BSDS's K evenly spaced thresholds strictly inside (0, 1)."""
    if count < 1:
        raise ValueError(f"need at least one threshold; got {count}")
    return np.linspace(1.0 / (count + 1), 1.0 - 1.0 / (count + 1), count)


@lru_cache(maxsize=8)
def _offsets(max_dist_px: float) -> np.ndarray:
    """(K, 2) integer (dy, dx) with dy² + dx² ≤ max_dist², as `match.cc` enumerates its search window."""
    r = int(np.ceil(max_dist_px))
    dy, dx = np.mgrid[-r: r + 1, -r: r + 1]
    keep = dy * dy + dx * dx <= max_dist_px * max_dist_px
    return np.stack([dy[keep], dx[keep]], axis=1)


def _links(ys: np.ndarray, xs: np.ndarray, gt: np.ndarray, max_dist_px: float) -> tuple[np.ndarray, np.ndarray]:
    """(source index, human pixel index) of every pair within `max_dist_px`, sorted by source index; human
    pixels are numbered in `np.nonzero(gt)` order. Only sources near some human pixel are looked at."""
    if not gt.any() or len(ys) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    near = distance_transform_edt(~gt)[ys, xs] <= max_dist_px
    sources = np.flatnonzero(near)
    offsets = _offsets(max_dist_px)
    r = int(np.ceil(max_dist_px))
    node = np.full((gt.shape[0] + 2 * r, gt.shape[1] + 2 * r), -1, dtype=np.int64)  # a frame of "no pixel"
    node[r: r + gt.shape[0], r: r + gt.shape[1]][gt] = np.arange(int(gt.sum()))
    target = node[ys[sources, None] + r + offsets[None, :, 0], xs[sources, None] + r + offsets[None, :, 1]]
    row, _ = np.nonzero(target >= 0)  # row-major: sorted by source
    return sources[row], target[target >= 0]


def _max_matching(source: np.ndarray, target: np.ndarray, n_source: int, n_target: int) -> np.ndarray:
    """partner[i] = the human pixel matched to source i, or -1: a maximum-cardinality matching.

    Solved as a maximum flow on the unit-capacity network origin → sources → human pixels → sink with
    Dinic's algorithm (O(E √V), like Hopcroft–Karp). Not scipy's `maximum_bipartite_matching`: its
    Hopcroft–Karp search never marks dead ends and takes exponential time on layered graphs (scipy
    gh-26147), which chains of boundary pixels are; measured here, from milliseconds to minutes per call.
    """
    partner = np.full(n_source, -1, dtype=np.int64)
    if len(source) == 0:
        return partner
    rows, row = np.unique(source, return_inverse=True)  # only linked pixels enter the network
    cols, col = np.unique(target, return_inverse=True)
    n_rows, n_cols = len(rows), len(cols)
    sink = n_rows + n_cols + 1
    tails = np.concatenate([np.zeros(n_rows, dtype=np.int64), 1 + row, 1 + n_rows + np.arange(n_cols)])
    heads = np.concatenate([1 + np.arange(n_rows), 1 + n_rows + col, np.full(n_cols, sink)])
    network = csr_matrix((np.ones(len(tails), dtype=np.int32), (tails, heads)), shape=(sink + 1, sink + 1))
    flow = maximum_flow(network, 0, sink, method="dinic").flow.tocoo()
    used = (flow.data > 0) & (flow.row >= 1) & (flow.row <= n_rows) & (flow.col > n_rows) & (flow.col < sink)
    partner[rows[flow.row[used] - 1]] = cols[flow.col[used] - 1 - n_rows]
    return partner


def _tolerance_px(shape: tuple[int, ...], max_dist: float) -> float:
    return float(max_dist * np.hypot(*shape))  # correspondPixels: maxDist × the image diagonal


def correspond_pixels(pred: np.ndarray, gt: np.ndarray, max_dist: float = 0.0075) -> tuple[np.ndarray, np.ndarray]:
    """(matched predicted pixels, matched human pixels), two (H, W) bool maps of a one-to-one matching of
    maximum size between pixels at most `max_dist` × diagonal apart."""
    pred, gt = np.asarray(pred) != 0, np.asarray(gt) != 0
    if pred.shape != gt.shape or pred.ndim != 2:
        raise ValueError(f"pred and gt must be 2-D maps of one shape; got {pred.shape} and {gt.shape}")
    py, px = np.nonzero(pred)
    gy, gx = np.nonzero(gt)
    partner = _max_matching(*_links(py, px, gt, _tolerance_px(gt.shape, max_dist)), len(py), len(gy))
    matched = partner >= 0
    match_pred, match_gt = np.zeros(pred.shape, dtype=bool), np.zeros(gt.shape, dtype=bool)
    match_pred[py[matched], px[matched]] = True
    match_gt[gy[partner[matched]], gx[partner[matched]]] = True
    return match_pred, match_gt


def boundary_counts(
    pred: np.ndarray, annotators: np.ndarray, thresholds: np.ndarray, max_dist: float = 0.0075,
) -> np.ndarray:
    """(K, 4) float64 [cntR, sumR, cntP, sumP] per threshold for one image.

    `pred` is (H, W) in [0, 1] (after NMS), `annotators` (A, H, W) 0/1 boundary maps. Every thinned map is a
    subset of the map at the lowest threshold, so the pixel pairs within tolerance are listed once for
    those candidates and each threshold only filters them; a threshold that keeps the same pixels as the
    one below it (maps are nested, so the same count means the same map) reuses its counts.
    """
    pred = np.asarray(pred, dtype=np.float64)
    annotators = np.asarray(annotators) != 0
    if annotators.ndim != 3 or annotators.shape[1:] != pred.shape:
        raise ValueError(f"annotators must be (A, H, W) with (H, W) = {pred.shape}; got {annotators.shape}")
    thresholds = np.asarray(thresholds, dtype=np.float64)
    counts = np.zeros((len(thresholds), 4), dtype=np.float64)
    counts[:, 1] = annotators.sum()
    cy, cx = np.nonzero(pred >= thresholds.min())
    tolerance = _tolerance_px(pred.shape, max_dist)
    links = [_links(cy, cx, gt, tolerance) for gt in annotators]
    sizes = [int(gt.sum()) for gt in annotators]
    previous = None  # (threshold map size, its counts): nested maps of one size are the same map
    for k, threshold in enumerate(thresholds):
        bmap = pred >= threshold
        size = np.count_nonzero(bmap)
        if size == 0:  # nothing predicted: cntR = cntP = sumP = 0
            continue
        if previous is not None and previous[0] == size:
            counts[k] = previous[1]
            continue
        kept = thin(bmap)[cy, cx]
        any_match = np.zeros(len(cy), dtype=bool)
        for (source, target), n_gt in zip(links, sizes, strict=True):
            live = kept[source]
            partner = _max_matching(source[live], target[live], len(cy), n_gt)
            any_match |= partner >= 0
            counts[k, 0] += np.count_nonzero(partner >= 0)
        counts[k, 2] = np.count_nonzero(any_match)
        counts[k, 3] = np.count_nonzero(kept)
        previous = (size, counts[k].copy())
    return counts
