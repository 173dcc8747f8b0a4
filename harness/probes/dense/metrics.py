"""Dense metrics, per image (so per-sample columns exist) and accumulated over a split a batch at a time.

Every `*_per_image` function takes (N, ...) numpy arrays at the target resolution and returns (N,)
float64 columns; the dataset metric is the column's mean (every image weighs the same). Metrics that do
not decompose over images (mIoU from one confusion matrix, pooled Pearson r) are resampled statistics of
per-image auxiliary columns (`harness.probes.statistics.dense`); `PearsonAccumulator` is their reference.

- Depth (probe3d / Eigen et al.): on valid pixels (gt > 0), δ_k = fraction with max(p/g, g/p) < 1.25^k,
  abs_rel = mean |p − g| / g, rmse = sqrt(mean (p − g)²), per image then averaged. NO per-image median
  scaling: the probe predicts metric depth, as probe3d's NYU depth probe does.
- Surface normals: angular error = degrees(arccos(clip(⟨p̂, ĝ⟩, −1, 1))) on valid pixels; per image the
  mean, median and % within 11.25°, 22.5°, 30°, then averaged over images (probe3d pools pixels over the
  dataset instead; image-averaging is what lets every number have a per-image column).
- Binary segmentation: IoU of the positive class per image (1.0 when prediction and ground truth are
  both empty); the all-background baseline per image (1.0 for an empty mask, else 0.0); foreground
  fraction per image; `iou_pooled` from intersection and union summed over the split.
- Semantic segmentation: ONE confusion matrix over every evaluation pixel. miou averages IoU over the
  classes present in the prediction or the ground truth (a class absent from both is excluded, not
  counted as 0 or 1); pixel_acc = trace / total; mean_acc averages recall over classes present in the
  ground truth. `miou_per_image` applies the same rule to each image's own confusion matrix.
- Regression maps (edges, keypoints, occlusion): Pearson r over all pixels of the split pooled (0.0
  where either side is constant: no linear relation is measurable); per-image rmse and mae. Nothing is
  masked.
"""

from __future__ import annotations

import numpy as np

THRESHOLDS_DEG = (11.25, 22.5, 30.0)


def depth_per_image(pred: np.ndarray, gt: np.ndarray, valid: np.ndarray) -> dict[str, np.ndarray]:
    """(N, H, W) metres; an image without valid pixels scores NaN everywhere (the probe drops it)."""
    columns: dict[str, list[float]] = {k: [] for k in ("delta1", "delta2", "delta3", "abs_rel", "rmse")}
    for p, g, v in zip(pred.astype(np.float64), gt.astype(np.float64), valid, strict=True):
        p, g = p[v], g[v]
        if not g.size:
            for values in columns.values():
                values.append(np.nan)
            continue
        p = np.maximum(p, 1e-6)
        ratio = np.maximum(p / g, g / p)
        for k in (1, 2, 3):
            columns[f"delta{k}"].append(float(np.mean(ratio < 1.25**k)))
        columns["abs_rel"].append(float(np.mean(np.abs(p - g) / g)))
        columns["rmse"].append(float(np.sqrt(np.mean((p - g) ** 2))))
    return {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}


def angular_error_deg(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """Angle in degrees between (..., 3) vectors, each normalised first."""
    p = pred / np.maximum(np.linalg.norm(pred, axis=-1, keepdims=True), 1e-12)
    g = gt / np.maximum(np.linalg.norm(gt, axis=-1, keepdims=True), 1e-12)
    return np.degrees(np.arccos(np.clip(np.sum(p * g, axis=-1), -1.0, 1.0)))


def normals_per_image(pred: np.ndarray, gt: np.ndarray, valid: np.ndarray) -> dict[str, np.ndarray]:
    """(N, 3, H, W) normals; (N, H, W) valid. Images without valid pixels score NaN."""
    names = ["mean_error", "median_error", *(f"within_{t}" for t in THRESHOLDS_DEG)]
    columns: dict[str, list[float]] = {k: [] for k in names}
    for p, g, v in zip(pred.astype(np.float64), gt.astype(np.float64), valid, strict=True):
        error = angular_error_deg(np.moveaxis(p, 0, -1)[v], np.moveaxis(g, 0, -1)[v])
        if not error.size:
            for values in columns.values():
                values.append(np.nan)
            continue
        columns["mean_error"].append(float(error.mean()))
        columns["median_error"].append(float(np.median(error)))
        for t in THRESHOLDS_DEG:
            columns[f"within_{t}"].append(float(np.mean(error < t)))
    return {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}


def binary_per_image(pred: np.ndarray, gt: np.ndarray) -> dict[str, np.ndarray]:
    """(N, H, W) boolean masks → iou, baseline_iou (predict all background), foreground_fraction."""
    pred, gt = pred.astype(bool), gt.astype(bool)
    axes = tuple(range(1, gt.ndim))
    inter = np.sum(pred & gt, axis=axes).astype(np.float64)
    union = np.sum(pred | gt, axis=axes).astype(np.float64)
    positives = np.sum(gt, axis=axes).astype(np.float64)
    return {
        "iou": np.where(union > 0, inter / np.maximum(union, 1.0), 1.0),
        "baseline_iou": (positives == 0).astype(np.float64),
        "foreground_fraction": positives / float(np.prod(gt.shape[1:])),
    }


def binary_counts(pred: np.ndarray, gt: np.ndarray) -> tuple[int, int]:
    """(intersection, union) of the positive class over all pixels, for `iou_pooled`."""
    pred, gt = pred.astype(bool), gt.astype(bool)
    return int(np.sum(pred & gt)), int(np.sum(pred | gt))


def confusion_matrix(pred: np.ndarray, gt: np.ndarray, num_classes: int) -> np.ndarray:
    """(K, K) int64 counts, rows = ground truth, columns = prediction (sklearn's convention)."""
    g, p = gt.reshape(-1).astype(np.int64), pred.reshape(-1).astype(np.int64)
    if g.size and (min(g.min(), p.min()) < 0 or max(g.max(), p.max()) >= num_classes):
        raise ValueError(f"labels outside 0..{num_classes - 1}")
    return np.bincount(g * num_classes + p, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def miou_from_confusion(matrix: np.ndarray) -> float:
    inter = np.diag(matrix).astype(np.float64)
    union = matrix.sum(axis=0) + matrix.sum(axis=1) - np.diag(matrix)
    present = union > 0
    return float(np.mean(inter[present] / union[present])) if present.any() else 1.0


def semantic_summary(matrix: np.ndarray) -> dict[str, float]:
    """miou, pixel_acc and mean_acc from one dataset-level confusion matrix."""
    truth = matrix.sum(axis=1)
    recall = np.diag(matrix)[truth > 0] / truth[truth > 0]
    return {"miou": miou_from_confusion(matrix), "pixel_acc": float(np.trace(matrix) / max(matrix.sum(), 1)),
            "mean_acc": float(recall.mean()) if recall.size else 1.0}


def confusion_matrices(pred: np.ndarray, gt: np.ndarray, num_classes: int, valid: np.ndarray | None = None
                       ) -> np.ndarray:
    """(N, K, K) int64: each image's confusion matrix over its valid pixels (the pooled metrics' per-image rows)."""
    if valid is None:
        valid = np.ones(gt.shape, dtype=bool)
    matrices = [confusion_matrix(p[v], g[v], num_classes) for p, g, v in zip(pred, gt, valid, strict=True)]
    return np.stack(matrices) if matrices else np.zeros((0, num_classes, num_classes), dtype=np.int64)


def semantic_per_image(
    pred: np.ndarray, gt: np.ndarray, num_classes: int, valid: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """miou_per_image (absent classes excluded per image) and pixel_acc per image, over valid pixels."""
    miou, acc = [], []
    if valid is None:
        valid = np.ones(gt.shape, dtype=bool)
    for p, g, v in zip(pred, gt, valid, strict=True):
        matrix = confusion_matrix(p[v], g[v], num_classes)
        miou.append(miou_from_confusion(matrix))
        acc.append(float(np.trace(matrix) / max(matrix.sum(), 1)))
    return {"miou_per_image": np.asarray(miou, dtype=np.float64), "pixel_acc": np.asarray(acc, dtype=np.float64)}


def regression_per_image(pred: np.ndarray, gt: np.ndarray) -> dict[str, np.ndarray]:
    diff = pred.astype(np.float64) - gt.astype(np.float64)
    flat = diff.reshape(len(diff), -1)
    return {"rmse": np.sqrt(np.mean(flat * flat, axis=1)), "mae": np.mean(np.abs(flat), axis=1)}


class PearsonAccumulator:
    """Pooled Pearson r over every pixel of every batch, from shifted float64 sums (shift = first batch's
    means, so large offsets do not cancel catastrophically)."""

    def __init__(self) -> None:
        self.shift: tuple[float, float] | None = None
        self.n = 0
        self.sx = self.sy = self.sxx = self.syy = self.sxy = 0.0

    def update(self, pred: np.ndarray, gt: np.ndarray) -> None:
        x, y = pred.astype(np.float64).ravel(), gt.astype(np.float64).ravel()
        if not x.size:
            return
        if self.shift is None:
            self.shift = (float(x.mean()), float(y.mean()))
        x, y = x - self.shift[0], y - self.shift[1]
        self.n += x.size
        self.sx += float(x.sum())
        self.sy += float(y.sum())
        self.sxx += float(x @ x)
        self.syy += float(y @ y)
        self.sxy += float(x @ y)

    def value(self) -> float:
        if self.n == 0:
            raise ValueError("Pearson r of no pixels")
        cov = self.sxy - self.sx * self.sy / self.n
        var_x = self.sxx - self.sx * self.sx / self.n
        var_y = self.syy - self.sy * self.sy / self.n
        if var_x <= 0 or var_y <= 0:
            return 0.0
        return float(np.clip(cov / np.sqrt(var_x * var_y), -1.0, 1.0))
