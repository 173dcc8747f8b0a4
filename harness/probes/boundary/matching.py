"""Per-image BSDS boundary counts: threshold, thin, match each annotator one-to-one within a tolerance.

Follows `evaluation_bdry_image.m` (BSDS500 benchmark, Arbelaez et al. 2011) and SE's `edgesEvalImg.m`:
for every threshold t, `bmap = bwmorph(pb >= t, 'thin', inf)`; for every annotator,
`[match1, match2] = correspondPixels(bmap, gt, maxDist)`; then

    cntR += nnz(match2)   sumR += nnz(gt)     (summed over annotators)
    cntP  = nnz(match1 of ANY annotator)      sumP = nnz(bmap)

`correspondPixels` (Martin, Fowlkes & Malik's `match.cc`) links a predicted and a human pixel when their
distance is ≤ maxDist × the image diagonal, weighs a link `rint(100 × distance)` and leaving a pixel
unmatched `ceil(100 × outlierCost)` (outlierCost = 100 × maxDist × diagonal, 43,277 on a BSDS image), and
solves the assignment with Goldberg's CSA on a graph whose outlier links are a random sample (6 per pixel).
A matching of k links then costs Σ weights + (n₁ + n₂ − k) × outlier weight: each link saves at least 100×
what it can cost, so the objective is, first, as many links as possible and, second, the least total
weight among those (`_cheapest_maximum_matching`). The two differ only where one more link needs an
alternating path of over 100 links, each a pixel longer than the one it replaces, which boundary maps do
not produce (the tests check the equivalence). Solved exactly here; CSA's answer is never better and
not always optimal (its outlier graph is sampled, from a clock seed, and its search approximate), so
the counts agree with the benchmark's up to CSA's misses and ties between equally cheap matchings (the
tests bound both; docs/protocols.md has the numbers on real maps).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.ndimage import distance_transform_edt
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import breadth_first_order, maximum_flow, min_weight_full_bipartite_matching

from harness.probes.boundary.thinning import thin

WEIGHT_PER_PIXEL = 100  # match.cc's `multiplier`: CSA needs integer weights, rint(100 × distance)


def bsds_thresholds(count: int) -> np.ndarray:
    """`linspace(1/(K+1), 1 - 1/(K+1), K)`: BSDS's K evenly spaced thresholds strictly inside (0, 1)."""
    if count < 1:
        raise ValueError(f"need at least one threshold; got {count}")
    return np.linspace(1.0 / (count + 1), 1.0 - 1.0 / (count + 1), count)


@lru_cache(maxsize=8)
def _offsets(max_dist_px: float) -> tuple[np.ndarray, np.ndarray]:
    """(K, 2) integer (dy, dx) with dy² + dx² ≤ max_dist², as `match.cc` enumerates its search window, and
    each offset's integer link weight."""
    r = int(np.ceil(max_dist_px))
    dy, dx = np.mgrid[-r: r + 1, -r: r + 1]
    keep = dy * dy + dx * dx <= max_dist_px * max_dist_px
    weight = np.rint(np.hypot(dy[keep], dx[keep]) * WEIGHT_PER_PIXEL).astype(np.int64)
    return np.stack([dy[keep], dx[keep]], axis=1), weight


def _links(ys: np.ndarray, xs: np.ndarray, gt: np.ndarray, max_dist_px: float) -> tuple[
        np.ndarray, np.ndarray, np.ndarray]:
    """(source index, human pixel index, weight) of every pair within `max_dist_px`, sorted by source and
    then human pixel (offsets run row-major, as human pixels are numbered: `np.nonzero(gt)` order). Only
    sources near some human pixel are looked at."""
    empty = np.zeros(0, dtype=np.int64)
    if not gt.any() or len(ys) == 0:
        return empty, empty, empty
    near = distance_transform_edt(~gt)[ys, xs] <= max_dist_px
    sources = np.flatnonzero(near)
    offsets, weights = _offsets(max_dist_px)
    r = int(np.ceil(max_dist_px))
    node = np.full((gt.shape[0] + 2 * r, gt.shape[1] + 2 * r), -1, dtype=np.int64)  # a frame of "no pixel"
    node[r: r + gt.shape[0], r: r + gt.shape[1]][gt] = np.arange(int(gt.sum()))
    target = node[ys[sources, None] + r + offsets[None, :, 0], xs[sources, None] + r + offsets[None, :, 1]]
    row, offset = np.nonzero(target >= 0)  # row-major: by source, then by offset, so by human pixel
    return sources[row], target[row, offset], weights[offset]


def _compact(index: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values of `index`, each entry's position among them): order-preserving, no sort."""
    present = np.zeros(size, dtype=bool)
    present[index] = True
    return np.flatnonzero(present), (np.cumsum(present) - 1)[index]


def _csr(counts: np.ndarray, heads: np.ndarray, data: np.ndarray, n_cols: int) -> csr_matrix:
    """A CSR matrix from each row's number of entries and the entries' columns in row order: no sorting and no
    COO round trip, which matter at ~10⁵ graphs a grid."""
    indptr = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=indptr[1:])
    return csr_matrix((data, heads.astype(np.int32, copy=False), indptr), shape=(len(counts), n_cols))


def _partner_rows(row: np.ndarray, col: np.ndarray, matching: np.ndarray, n_cols: int) -> np.ndarray:
    """partner[c] = the row matched to column c, or -1."""
    partner = np.full(n_cols, -1, dtype=np.int64)
    partner[col[matching]] = row[matching]
    return partner


def _maximum_matching(row: np.ndarray, col: np.ndarray, n_rows: int, n_cols: int, start: np.ndarray) -> np.ndarray:
    """A maximum-cardinality matching of the links (row[i], col[i]), sorted by (row, col), as a mask over
    the links; grown from `start`, any matching (the previous threshold's, in `boundary_counts`).

    The missing links come from a maximum flow with Dinic's algorithm (O(E √V), like Hopcroft–Karp) on
    `start`'s residual network: origin → unmatched rows, row → column along unused links, column → row
    along used ones, unmatched columns → sink; a link that carries flow changes sides. Not scipy's
    `maximum_bipartite_matching`: its Hopcroft–Karp search never marks dead ends and takes exponential
    time on layered graphs (scipy gh-26147), which chains of boundary pixels are; measured here, from
    milliseconds to minutes per call.
    """
    partner = _partner_rows(row, col, start, n_cols)
    covered = np.zeros(n_rows, dtype=bool)
    covered[row[start]] = True
    free_rows = np.flatnonzero(~covered)
    if len(free_rows) == 0 or (partner >= 0).all():
        return start
    sink = n_rows + n_cols + 1
    unused = ~start
    counts = np.concatenate([[len(free_rows)], np.bincount(row[unused], minlength=n_rows), np.ones(n_cols, np.int64),
                             [0]])  # every column has one way on: back to its row, or on to the sink
    heads = np.concatenate([1 + free_rows, 1 + n_rows + col[unused], np.where(partner >= 0, 1 + partner, sink)])
    network = _csr(counts, heads, np.ones(len(heads), dtype=np.int32), sink + 1)
    result = maximum_flow(network, 0, sink, method="dinic")
    if result.flow_value == 0:
        return start
    flow = result.flow.tocoo()
    inner = (flow.data > 0) & (flow.row > 0) & (flow.row < sink) & (flow.col > 0) & (flow.col < sink)
    tail, head = flow.row[inner] - 1, flow.col[inner] - 1
    forward = tail < n_rows  # row → column: a new link; column → row: a link given up
    flow_row, flow_col = np.where(forward, tail, head), np.where(forward, head, tail) - n_rows
    flipped = np.searchsorted(row * n_cols + col, flow_row * n_cols + flow_col)
    matching = start.copy()
    matching[flipped] = ~matching[flipped]
    return matching


def _cheapest_rows(row: np.ndarray, col: np.ndarray, weight: np.ndarray, matching: np.ndarray, n_rows: int,
                   n_cols: int) -> np.ndarray:
    """`matching` (a maximum matching of links sorted by row, as a mask) with its rows re-chosen as a
    least-weight maximum matching would choose them.

    Dulmage–Mendelsohn: the rows some maximum matching leaves unmatched are those reached from an
    unmatched row by alternating paths (a link out of a row, the matching back from a column); call them D
    and the columns reached A. Every maximum matching matches all of A into D and matches all rows outside
    D; links that leave this block belong to no maximum matching. So which rows end up matched is decided
    by the least-weight matching of every column of A into D, alone (`min_weight_full_bipartite_matching`,
    LAPJVsp), a block smaller than the graph (on real maps, about half its pixels).
    """
    covered = np.zeros(n_rows, dtype=bool)
    covered[row[matching]] = True
    free = np.flatnonzero(~covered)
    if len(free) == 0:
        return matching
    partner = _partner_rows(row, col, matching, n_cols)
    origin = n_rows + n_cols
    unused = ~matching
    counts = np.concatenate([np.bincount(row[unused], minlength=n_rows), partner >= 0, [len(free)]])
    heads = np.concatenate([n_rows + col[unused], partner[partner >= 0], free])
    alternating = _csr(counts, heads, np.ones(len(heads), dtype=np.int8), origin + 1)
    reached = np.zeros(origin + 1, dtype=bool)
    reached[breadth_first_order(alternating, origin, directed=True, return_predecessors=False)] = True
    d_rows, a_cols = reached[:n_rows], reached[n_rows:origin]
    if not a_cols.any():
        return matching
    # the problem's rows are the columns of A (all matched), each listing its link in `matching` first:
    # scipy runs Hopcroft–Karp before LAPJVsp to check that a full matching exists, and with those links
    # first its first greedy pass finds one, leaving no room for that search's exponential case (above)
    block = np.flatnonzero(d_rows[row] & a_cols[col])
    block = block[np.argsort(2 * col[block] + unused[block], kind="stable")]
    d_index, a_index = np.cumsum(d_rows) - 1, np.cumsum(a_cols) - 1
    problem_row, problem_col = a_index[col[block]], d_index[row[block]]
    n_a = int(a_cols.sum())
    # + 1: LAPJVsp reads a zero weight as no link, and all |A| chosen links pay it, so the optimum stays
    biadjacency = _csr(np.bincount(problem_row, minlength=n_a), problem_col, weight[block] + 1.0, int(d_rows.sum()))
    _, chosen = min_weight_full_bipartite_matching(biadjacency)
    cheapest = matching.copy()
    cheapest[block] = problem_col == chosen[problem_row]
    return cheapest


def _cheapest_maximum_matching(source: np.ndarray, target: np.ndarray, weight: np.ndarray, n_source: int,
                               n_target: int, *, start: np.ndarray | None = None,
                               both_sides: bool = False) -> np.ndarray:
    """A maximum-cardinality matching of the links whose matched sources (and, with `both_sides`, matched
    human pixels) are those of one of least total weight, as a mask over the links; links sorted by
    (source, target), `start` a matching to grow from. (Which pixels are matched is all the counts read;
    the partners inside Dulmage–Mendelsohn's perfectly matched core are left as found.)"""
    if len(source) == 0:
        return np.zeros(0, dtype=bool)
    rows, row = _compact(source, n_source)
    cols, col = _compact(target, n_target)
    start = np.zeros(len(source), dtype=bool) if start is None else start
    matching = _maximum_matching(row, col, len(rows), len(cols), start)
    matching = _cheapest_rows(row, col, weight, matching, len(rows), len(cols))
    if both_sides:  # the human pixels' side is decided by its own block (A' into D'), disjoint from the first
        by_col = np.argsort(col, kind="stable")
        matching[by_col] = _cheapest_rows(col[by_col], row[by_col], weight[by_col], matching[by_col], len(cols),
                                          len(rows))
    return matching


def _tolerance_px(shape: tuple[int, ...], max_dist: float) -> float:
    return float(max_dist * np.hypot(*shape))  # correspondPixels: maxDist × the image diagonal


def correspond_pixels(pred: np.ndarray, gt: np.ndarray, max_dist: float = 0.0075) -> tuple[np.ndarray, np.ndarray]:
    """(matched predicted pixels, matched human pixels), two (H, W) bool maps of a one-to-one matching
    between pixels at most `max_dist` × diagonal apart: of maximum size, and of least total distance among
    those (`correspondPixels`' objective; see the module docstring)."""
    pred, gt = np.asarray(pred) != 0, np.asarray(gt) != 0
    if pred.shape != gt.shape or pred.ndim != 2:
        raise ValueError(f"pred and gt must be 2-D maps of one shape; got {pred.shape} and {gt.shape}")
    py, px = np.nonzero(pred)
    gy, gx = np.nonzero(gt)
    source, target, weight = _links(py, px, gt, _tolerance_px(gt.shape, max_dist))
    matching = _cheapest_maximum_matching(source, target, weight, len(py), len(gy), both_sides=True)
    match_pred, match_gt = np.zeros(pred.shape, dtype=bool), np.zeros(gt.shape, dtype=bool)
    match_pred[py[source[matching]], px[source[matching]]] = True
    match_gt[gy[target[matching]], gx[target[matching]]] = True
    return match_pred, match_gt


def boundary_counts(
    pred: np.ndarray, annotators: np.ndarray, thresholds: np.ndarray, max_dist: float = 0.0075,
) -> np.ndarray:
    """(K, 4) float64 [cntR, sumR, cntP, sumP] per threshold for one image.

    `pred` is (H, W) in [0, 1] (after NMS), `annotators` (A, H, W) 0/1 boundary maps. Every thinned map is a
    subset of the map at the lowest threshold, so the pixel pairs within tolerance are listed once for
    those candidates and each threshold only filters them; a threshold that keeps the same pixels as the
    one below it (maps are nested, so the same count means the same map) reuses its counts. Each
    annotator's matching grows from the one below (most of it survives a small step of the threshold).
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
    # per annotator, the last solved threshold's live links and matching (a mask over the links)
    lives = [np.zeros(len(source), dtype=bool) for source, _, _ in links]
    matchings = [np.zeros(len(source), dtype=bool) for source, _, _ in links]
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
        for (source, target, weight), n_gt, live_before, matching in zip(links, sizes, lives, matchings, strict=True):
            live = kept[source]
            # A higher threshold mostly drops pixels. When it adds no link and drops no matched pixel, the
            # last matching stays a least-weight maximum one (the choice only lost options it did not use).
            if (live & ~live_before).any() or (matching & ~live).any():
                found = _cheapest_maximum_matching(source[live], target[live], weight[live], len(cy), n_gt,
                                                   start=matching[live])
                matching[:] = False
                matching[live] = found
            live_before[:] = live
            any_match[source[matching]] = True
            counts[k, 0] += np.count_nonzero(matching)  # every maximum matching matches as many human pixels
        counts[k, 2] = np.count_nonzero(any_match)
        counts[k, 3] = np.count_nonzero(kept)
        previous = (size, counts[k].copy())
    return counts
