"""A single-scale, anchor-free FCOS head (Tian et al., ICCV 2019) on one frozen dense map: target
assignment, loss and decoding.

Geometry. The dense map covers the whole image squashed to the backbone's square input, so a pixel
(x, y) of a W×H image sits at grid coordinates (x·gw/W, y·gh/H), and cell (i, j) is centred at
(j + ½, i + ½). Everything here works in grid units; `decode` maps boxes back to pixels. IoU is invariant
to scaling x and y separately, so the GIoU loss in grid units equals the one in pixels.

Outputs per cell: K class logits, 4 distances (l, t, r, b) from the cell centre to the box sides, in
cells, as exp(raw) (FCOS's parameterisation; a box always contains its cell's centre), and optionally a
centerness logit.

Assignment (FCOS centre sampling). A cell is positive for an object when its centre lies strictly inside
the object's centre region: the object's centre ± `radius` cells, clipped to the object's box. A cell
positive for several objects takes the smallest (by box area), first in annotation order on ties. An
object whose region holds no cell centre (smaller than a cell, or off the cell lattice) takes the cell
that contains its centre, so no object goes untrained; that cell's regression target is still the
object's box, which the exp parameterisation can only cover together with the cell centre.

Loss (summed): sigmoid focal loss (α 0.25, γ 2, RetinaNet/FCOS) over every cell and class, divided by
the batch's number of positive cells (at least 1); the mean GIoU loss over positive cells; with
centerness, the mean binary cross-entropy of centerness logits against FCOS's
sqrt(min(l,r)/max(l,r) · min(t,b)/max(t,b)) (0 where a side is negative, i.e. for a centre fallback cell).

Decoding: per cell and class, sigmoid(class logit) > `score_threshold`; the score is that probability
times sigmoid(centerness) when the head has one (FCOS's ranking); the `pre_nms_top_k` best by score, then
class-wise NMS (`batched_nms`, IoU > `nms_iou` suppressed) in pixels, at most `max_detections` kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from harness.probes.detection.annotations import Detections, GroundTruth

FOCAL_ALPHA, FOCAL_GAMMA = 0.25, 2.0
PRIOR_PROBABILITY = 0.01  # RetinaNet's initial foreground probability (class bias = -log((1 - π) / π))
MAX_LOG_DISTANCE = 8.0  # clamp on the raw distance before exp: e^8 ≈ 3,000 cells, far beyond any grid


class FCOSHead(nn.Module):
    """`tower` 3×3 conv + ReLU layers of `width` channels (0: none, a linear 1×1 read-out), then one 1×1
    conv to K class logits, 4 distances and, optionally, 1 centerness logit per cell.

    Takes the dense probes' list of per-layer maps (same grid, concatenated along channels) and their
    output size argument, which it ignores: detection stays on the feature grid.
    """

    def __init__(self, in_channels: Sequence[int], num_classes: int, *, tower: int, width: int,
                 centerness: bool) -> None:
        super().__init__()
        if tower < 0:
            raise ValueError(f"tower must be >= 0 conv layers; got {tower}")
        self.num_classes, self.centerness = num_classes, centerness
        layers: list[nn.Module] = []
        channels = sum(in_channels)
        for _ in range(tower):
            layers += [nn.Conv2d(channels, width, kernel_size=3, padding=1), nn.ReLU()]
            channels = width
        self.tower = nn.Sequential(*layers)
        self.out = nn.Conv2d(channels, num_classes + 4 + int(centerness), kernel_size=1)
        with torch.no_grad():
            self.out.bias[:num_classes].fill_(-math.log((1 - PRIOR_PROBABILITY) / PRIOR_PROBABILITY))

    def forward(self, features: Sequence[torch.Tensor], size: int) -> torch.Tensor:
        return self.out(self.tower(torch.cat(list(features), dim=1)))


@dataclass(frozen=True)
class Outputs:
    """A head's raw output split by meaning, with distances and boxes decoded (grid units)."""

    logits: torch.Tensor  # (B, K, gh, gw)
    boxes: torch.Tensor  # (B, gh, gw, 4) x0, y0, x1, y1
    centerness: torch.Tensor | None  # (B, gh, gw) logits


def cell_centres(grid_hw: tuple[int, int], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(gh, gw) x and y of each cell centre, in grid units, on `device` (the head output's: they meet it)."""
    gh, gw = grid_hw
    y, x = torch.meshgrid(torch.arange(gh, dtype=torch.float32, device=device) + 0.5,
                          torch.arange(gw, dtype=torch.float32, device=device) + 0.5, indexing="ij")
    return x, y


def split_outputs(raw: torch.Tensor, num_classes: int, centerness: bool) -> Outputs:
    x, y = cell_centres((raw.shape[2], raw.shape[3]), raw.device)
    distances = torch.exp(raw[:, num_classes: num_classes + 4].clamp(max=MAX_LOG_DISTANCE))
    left, top, right, bottom = distances.unbind(dim=1)
    boxes = torch.stack([x - left, y - top, x + right, y + bottom], dim=-1)
    return Outputs(raw[:, :num_classes], boxes, raw[:, num_classes + 4] if centerness else None)


def to_grid(truth: GroundTruth, grid_hw: tuple[int, int]) -> np.ndarray:
    """(N, 4) object boxes in grid units."""
    gh, gw = grid_hw
    return truth.boxes * np.array([gw / truth.width, gh / truth.height, gw / truth.width, gh / truth.height])


def assign(truth: GroundTruth, grid_hw: tuple[int, int], radius: float) -> tuple[np.ndarray, np.ndarray]:
    """(5, gh, gw) float32 targets [class (-1 = background), x0, y0, x1, y1 in grid units] and the
    (gh, gw) positive mask, by FCOS centre sampling with the centre fallback (module docstring)."""
    gh, gw = grid_hw
    target = np.zeros((5, gh, gw), dtype=np.float32)
    target[0] = -1
    boxes = to_grid(truth, grid_hw)
    if len(boxes) == 0:
        return target, np.zeros((gh, gw), dtype=bool)
    x = (np.arange(gw) + 0.5)[None, None, :]
    y = (np.arange(gh) + 0.5)[None, :, None]
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    x0, x1 = np.maximum(boxes[:, 0], cx - radius), np.minimum(boxes[:, 2], cx + radius)
    y0, y1 = np.maximum(boxes[:, 1], cy - radius), np.minimum(boxes[:, 3], cy + radius)
    inside = ((x > x0[:, None, None]) & (x < x1[:, None, None]) & (y > y0[:, None, None]) & (y < y1[:, None, None]))
    for n in np.flatnonzero(~inside.any(axis=(1, 2))):
        inside[n, int(np.clip(np.floor(cy[n]), 0, gh - 1)), int(np.clip(np.floor(cx[n]), 0, gw - 1))] = True
    area = (truth.boxes[:, 2] - truth.boxes[:, 0]) * (truth.boxes[:, 3] - truth.boxes[:, 1])  # pixels
    owner = np.argmin(np.where(inside, area[:, None, None], np.inf), axis=0)  # first minimum on ties
    positive = inside.any(axis=0)
    target[0] = np.where(positive, truth.labels[owner], -1)
    target[1:] = np.where(positive[None], np.moveaxis(boxes[owner], -1, 0), 0.0)
    return target, positive


def centerness_target(x: torch.Tensor, y: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """FCOS's sqrt(min(l,r)/max(l,r) · min(t,b)/max(t,b)) of cell centres (x, y) in their (P, 4) target
    boxes; 0 when a centre lies outside its box (a centre fallback cell)."""
    left, top, right, bottom = x - boxes[:, 0], y - boxes[:, 1], boxes[:, 2] - x, boxes[:, 3] - y
    horizontal = torch.minimum(left, right).clamp_min(0) / torch.maximum(left, right).clamp_min(1e-12)
    vertical = torch.minimum(top, bottom).clamp_min(0) / torch.maximum(top, bottom).clamp_min(1e-12)
    return torch.sqrt(horizontal * vertical)


def fcos_loss(raw: torch.Tensor, target: torch.Tensor, positive: torch.Tensor, *, num_classes: int,
              centerness: bool) -> torch.Tensor:
    """The summed FCOS loss of a batch (module docstring); `target` and `positive` come from `assign`, on the
    device of `raw`. The positive count is read back to the host (on a GPU, one wait per batch): the focal term
    is divided by it as a Python number, as it always was, so the CPU's arithmetic is unchanged."""
    count = int(positive.sum())
    return fcos_loss_terms(raw, target, positive, npos=max(count, 1), any_positive=count > 0,
                           num_classes=num_classes, centerness=centerness)


def fcos_loss_terms(raw: torch.Tensor, target: torch.Tensor, positive: torch.Tensor, *, npos: int,
                    any_positive: bool, num_classes: int, centerness: bool) -> torch.Tensor:
    """`fcos_loss` given the batch's positive count (`npos`, at least 1) and whether it has any: nothing in here
    reads a tensor back to the host, so it runs on any device (tests drive it on `meta`)."""
    # torchvision here, not at the top: importing it imports torch._dynamo (~1.7 s on 2 cores), and every
    # params.yaml check and `visbench-harness list` imports this module through the probe registry
    from torchvision.ops import generalized_box_iou_loss, sigmoid_focal_loss

    out = split_outputs(raw, num_classes, centerness)
    labels = target[:, 0].long()
    one_hot = F.one_hot(labels.clamp_min(0), num_classes).permute(0, 3, 1, 2).float() * positive[:, None].float()
    loss = sigmoid_focal_loss(out.logits, one_hot, alpha=FOCAL_ALPHA, gamma=FOCAL_GAMMA, reduction="sum") / npos
    if not any_positive:
        return loss
    boxes = target[:, 1:].permute(0, 2, 3, 1)[positive]
    loss = loss + generalized_box_iou_loss(out.boxes[positive], boxes, reduction="mean")
    if out.centerness is not None:
        x, y = cell_centres((raw.shape[2], raw.shape[3]), raw.device)
        wanted = centerness_target(x.expand_as(positive)[positive], y.expand_as(positive)[positive], boxes)
        loss = loss + F.binary_cross_entropy_with_logits(out.centerness[positive], wanted)
    return loss


def decode(raw: torch.Tensor, width: int, height: int, *, num_classes: int, centerness: bool,
           score_threshold: float, pre_nms_top_k: int, nms_iou: float, max_detections: int) -> Detections:
    """One image's (C, gh, gw) raw head output → detections in pixel edges, best first; computed on the device
    of `raw` (the detection probe brings its outputs to the CPU first), returned as NumPy."""
    from torchvision.ops import batched_nms  # see fcos_loss

    out = split_outputs(raw[None], num_classes, centerness)
    gh, gw = raw.shape[1], raw.shape[2]
    probability = torch.sigmoid(out.logits[0]).permute(1, 2, 0).reshape(-1, num_classes)  # (cells, K)
    cell, label = torch.nonzero(probability > score_threshold, as_tuple=True)
    score = probability[cell, label]
    if out.centerness is not None:
        score = score * torch.sigmoid(out.centerness[0].reshape(-1))[cell]
    order = torch.sort(score, descending=True, stable=True).indices[:pre_nms_top_k]
    cell, label, score = cell[order], label[order], score[order]
    scale = torch.tensor([width / gw, height / gh, width / gw, height / gh], device=raw.device)
    boxes = out.boxes[0].reshape(-1, 4)[cell] * scale
    boxes = torch.stack([boxes[:, 0].clamp(0, width), boxes[:, 1].clamp(0, height),
                         boxes[:, 2].clamp(0, width), boxes[:, 3].clamp(0, height)], dim=1)
    keep = batched_nms(boxes, score, label, nms_iou)[:max_detections]
    return Detections(boxes[keep].double().cpu().numpy(), score[keep].double().cpu().numpy(),
                      label[keep].cpu().numpy().astype(np.int64))
