"""The `corners` probe (protocol `corner-heatmap/v1`): where the corners are, from a heatmap head on frozen dense
features, scored by precision and recall at ε pixels and by repeatability across two renders of one scene.

Data: `procedural_scene_pairs`, whose views carry exact corners (`harness.datasets.scene_corners`: visible box
vertices and Shi–Tomasi texture corners of the albedo), their depth, and the pair's exact relative pose.

Protocol: the dense probes' read (`fit: squash`, the `layers` asked for), standardised per channel with the
training split's statistics (every view of every `train_split` pair). A head (`head`: `linear`, a 1×1 conv, or
`dpt`) outputs one logit map at `target_size`²; the target is, per target pixel, the largest of unit-peak Gaussian
bumps of standard deviation `sigma` image pixels at the view's corners (keypoints2d's encoding, at the corners'
exact positions); loss sigmoid + MSE (keypoints2d's: no weighting hyperparameter to tune per backbone, and the two
boards read alike), the bias started at the logit of the training targets' mean. AdamW for `epochs` epochs by the
dense probes' loop on the run's device.

Detection on each `eval_split` view: the heatmap's 3×3 local maxima with probability ≥ `score_threshold`, at
their target pixels' centres in image pixels, thinned greedily strongest first so no two lie within `nms_radius`
px (the ground truth's rule, `scene_corners.thin`), the best `max_corners` kept.

Metrics, each the mean of a per-pair column (unit "pair", id = the pair's folder):
`precision`, `recall`, `f1` (the default headline; `headline` picks `repeatability` instead): one-to-one matching
of a view's detections to its true corners within `epsilon` px (`matching.detection_score`), each the mean of the
pair's two views; `repeatability`: Mikolajczyk & Schmid's, of the detections under the true pose
(`matching.repeatability`); `oracle_repeatability`: the same rule on the true corners (the ceiling to read
`repeatability` against); `num_detections` and `num_corners` (per view, the mean of the two views).
`train_loss`: the last epoch's mean loss (no column).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, PositiveFloat, PositiveInt

from harness.datasets.manifest import Item, Manifest
from harness.datasets.scene_corners import local_maxima, thin
from harness.probes.base import ProbeInputs, ProbeResult, ProbeSpec, column_means, register_probe
from harness.probes.corners.matching import ViewPair, detection_score, repeatability
from harness.probes.dense.heads import build_head, logit
from harness.probes.dense.params import DenseParams
from harness.probes.dense.streaming import DenseStream
from harness.probes.dense.targets import load_target
from harness.probes.dense.train import predict_logits, train_dense_head

PROTOCOL = "corner-heatmap/v1"
CORNERS = "corners"  # each view's (N, 3) [x, y, kind] corners (harness.datasets.scene_corners)
DEPTH = "depth"  # each view's metric depth, which carries a corner into the other view
COLUMNS = ("precision", "recall", "f1", "repeatability", "oracle_repeatability", "num_detections", "num_corners")


class CornerParams(DenseParams):
    # no defaults but the headline: every value that shapes the number is written down in params.yaml and so in
    # the record's protocol_params
    sigma: PositiveFloat  # the target bumps' standard deviation, image px
    epsilon: PositiveFloat  # a detection matches a corner (or repeats) within this many image px
    nms_radius: PositiveFloat  # detections closer than this (image px) are suppressed, weaker first
    score_threshold: float = Field(gt=0.0, lt=1.0)  # the least heatmap probability a detection has
    max_corners: PositiveInt  # detections kept per view, strongest first
    headline: Literal["f1", "repeatability"] = "f1"


def corner_heatmap(points: np.ndarray, image_size: int, size: int, sigma: float) -> np.ndarray:
    """(size, size) float32: per target pixel, the largest unit-peak Gaussian of standard deviation `sigma` image px
    over the (N, 2) xy corner points, evaluated at the pixel's centre in image pixels."""
    centres = (np.arange(size, dtype=np.float64) + 0.5) * image_size / size
    heatmap = np.zeros((size, size))
    points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    if len(points):
        along_x = np.exp(-((centres[None, :] - points[:, :1]) ** 2) / (2.0 * sigma * sigma))
        along_y = np.exp(-((centres[None, :] - points[:, 1:]) ** 2) / (2.0 * sigma * sigma))
        heatmap = np.max(along_y[:, :, None] * along_x[:, None, :], axis=0)
    return heatmap.astype(np.float32)


def detect_corners(probability: np.ndarray, image_size: int, score_threshold: float, nms_radius: float,
                   max_corners: int) -> np.ndarray:
    """(N, 2) float64 xy image pixels of a heatmap's detections, strongest first (see the module docstring)."""
    size = probability.shape[-1]
    rows, cols = np.nonzero(local_maxima(probability) & (probability >= score_threshold))  # raster order
    points = np.stack([(cols + 0.5) * image_size / size, (rows + 0.5) * image_size / size], axis=-1)
    kept = thin(points.astype(np.float64), probability[rows, cols].astype(np.float64), nms_radius)
    return points[kept[:max_corners]].astype(np.float64).reshape(-1, 2)


def _corner_points(manifest: Manifest, item: Item) -> np.ndarray:
    return np.asarray(load_target(manifest, item, CORNERS), dtype=np.float64).reshape(-1, 3)[:, :2]


def _heatmap_loss(logits: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(torch.sigmoid(logits[:, 0]), target)  # every pixel is scored: corners can be anywhere


def run_corners(inputs: ProbeInputs) -> ProbeResult:
    p = CornerParams(**inputs.params)
    manifest, size = inputs.manifest, p.target_size
    image_size = int(manifest.params["size"])
    pairs = [pair for pair in manifest.extra.get("pairs", []) if pair["split"] == p.eval_split]
    if not pairs:
        raise ValueError(f"dataset {manifest.name} has no pairs in split {p.eval_split!r} (corners reads a "
                         "procedural_scene_pairs dataset's extra['pairs'])")
    by_path = {item.path: item for item in manifest.items}
    train_items = manifest.split(p.train_split)
    eval_items = [by_path[pair[view]] for pair in pairs for view in ("view0", "view1")]

    def load(item: Item) -> tuple[np.ndarray, np.ndarray]:
        heatmap = corner_heatmap(_corner_points(manifest, item), image_size, size, p.sigma)
        return heatmap, np.ones(heatmap.shape, dtype=bool)

    prior = float(np.mean([load(item)[0].mean() for item in train_items]))  # one CPU pass: the bias's prior
    trained = train_dense_head(
        train_items, inputs.features, load, lambda in_channels, _: build_head(p.head, in_channels, 1, [logit(prior)]),
        _heatmap_loss, batch_size=p.batch_size, size=size, epochs=p.epochs, lr=p.lr, weight_decay=p.weight_decay,
        seed=inputs.seed, layer_channels=p.layer_channels, device=inputs.device)

    detections: dict[str, np.ndarray] = {}
    for batch in DenseStream(eval_items, inputs.features, p.batch_size, None, trained.statistics).batches():
        logits = predict_logits(trained.head, batch.features, size=size, layer_channels=p.layer_channels)
        probability = torch.sigmoid(logits[:, 0]).cpu().numpy()  # decoded on the CPU: NMS is sequential host work
        for item, heatmap in zip(batch.items, probability, strict=True):
            detections[item.path] = detect_corners(heatmap, image_size, p.score_threshold, p.nms_radius,
                                                   p.max_corners)

    rows: dict[str, list[float]] = {name: [] for name in COLUMNS}
    for pair in pairs:
        items = [by_path[pair[view]] for view in ("view0", "view1")]
        found = [detections[item.path] for item in items]
        truth = [_corner_points(manifest, item) for item in items]
        scores = [detection_score(f, t, p.epsilon) for f, t in zip(found, truth, strict=True)]
        # the pair's row averages its two views: both are evaluation images, and view 1 is no less a view
        rows["precision"].append((scores[0].precision + scores[1].precision) / 2.0)
        rows["recall"].append((scores[0].recall + scores[1].recall) / 2.0)
        rows["f1"].append((scores[0].f1 + scores[1].f1) / 2.0)
        views = ViewPair.from_pair(pair, *(load_target(manifest, item, DEPTH) for item in items), image_size)
        rows["repeatability"].append(repeatability(found[0], found[1], views, p.epsilon).repeatability)
        rows["oracle_repeatability"].append(repeatability(truth[0], truth[1], views, p.epsilon).repeatability)
        rows["num_detections"].append((len(found[0]) + len(found[1])) / 2.0)
        rows["num_corners"].append((len(truth[0]) + len(truth[1])) / 2.0)
    columns = {name: np.asarray(values, dtype=np.float64) for name, values in rows.items()}
    metrics = column_means(columns)
    metrics["train_loss"] = trained.train_loss
    return ProbeResult(metrics, [pair["id"] for pair in pairs], columns, unit="pair")


CORNERS_PROBE = register_probe(ProbeSpec(
    name="corners",
    level="low",
    protocol=PROTOCOL,
    feature_mode="dense",
    headline="f1",
    run=run_corners,
    params=CornerParams,
    lower_is_better=frozenset({"train_loss"}),
    headline_param="headline",
    fit="squash",  # the dense probes' read of the scenes: each view resized whole, so cells map back by a scale
    fewshot_unit="images",
    uses_device=True,
))
