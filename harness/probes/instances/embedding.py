"""The instance head's outputs, its targets and its loss: a foreground logit and a D-dimensional embedding per
pixel, trained with binary cross-entropy and the discriminative loss of De Brabandere, Neven & Van Gool
("Semantic Instance Segmentation with a Discriminative Loss Function", CVPR Workshops 2017).

Outputs: channel 0 is the foreground logit, channels 1..D the embedding, both at `target_size`² (the dense
heads' bilinear upsampling, `harness.probes.dense.heads`).

Targets: the instance map (0 = no object, k = object k) resampled to `target_size`² by nearest sampling at pixel
centres (`harness.probes.dense.targets.nearest`, as the dense probes' label maps), then renumbered 1..n in
increasing order of the original ids, so the loss can gather per-instance sums into a fixed number of slots. An
object with no pixel left at that size is not an object of the encoded image.

Loss of one image with instances c = 1..C, each with mean embedding μ_c over its N_c pixels x_i (δ_v, δ_d the
margins):

    L_var  = 1/C Σ_c 1/N_c Σ_i [‖μ_c − x_i‖ − δ_v]_+²      (pull each pixel to within δ_v of its mean)
    L_dist = 1/(C(C−1)) Σ_{a≠b} [2δ_d − ‖μ_a − μ_b‖]_+²     (push means at least 2δ_d apart)
    L_reg  = 1/C Σ_c ‖μ_c‖                                   (keep the means near the origin)

weighted 1, 1 and 0.001 (the paper's α, β, γ); it is averaged over the batch's images that have an instance (an image
with none adds nothing) and added to the mean binary cross-entropy of the foreground logit over valid pixels.
The embedding terms read the true instance pixels, not the predicted foreground. A norm is taken as
sqrt(Σ² + ε) (ε = 1e-8) so that its gradient at 0 is finite; that moves a norm by at most 10⁻⁴ (at 0).

Everything here runs on the logits' device with no read-back to the host (the dense probes' training loop's
contract; tests drive it on `meta`): the number of instance slots (1 + the most instances of any encoded training
target; slot 0 is background) is read from the training split on the CPU before training, by the probe.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from harness.probes.dense.targets import nearest

REGULARISER = 0.001  # γ, the paper's weight on L_reg
NORM_EPSILON = 1e-8


def encode_instances(instance: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(S, S) int64 instances renumbered 1..n (0 = no object) and an all-valid (S, S) mask (module docstring)."""
    if instance.ndim != 2:
        raise ValueError(f"an instance map must be (H, W); got shape {instance.shape}")
    sampled = nearest(np.asarray(instance), size).astype(np.int64)
    ids = np.unique(sampled)
    renumbered = np.searchsorted(ids[ids > 0], sampled) + 1  # id → its rank among the present ids, 1-based
    encoded = np.where(sampled > 0, renumbered, 0).astype(np.int64)
    return encoded, np.ones(encoded.shape, dtype=bool)


def instance_masks(encoded: np.ndarray) -> np.ndarray:
    """(n, S, S) bool masks of an encoded map's instances 1..n, in that order."""
    count = int(encoded.max(initial=0))
    return encoded[None] == np.arange(1, count + 1)[:, None, None]


def _norm(x: torch.Tensor) -> torch.Tensor:
    return torch.sqrt((x * x).sum(dim=-1) + NORM_EPSILON)


def discriminative_loss(embedding: torch.Tensor, ids: torch.Tensor, *, slots: int, delta_v: float,
                        delta_d: float) -> torch.Tensor:
    """The discriminative loss (module docstring) of (B, D, S, S) embeddings and (B, S, S) encoded instance ids
    (0 = none, at most `slots` − 1), averaged over the images that have an instance."""
    batch, dims = embedding.shape[:2]
    x = embedding.reshape(batch, dims, -1).transpose(1, 2)  # (B, P, D)
    index = ids.reshape(batch, -1).long()  # (B, P)
    # per-instance sums as products with a one-hot map, not scatter_add: CUDA's scatter_add over several dimensions
    # adds in whatever order its atomics land (no deterministic kernel), and a batched matrix product does not
    slot = torch.arange(slots, device=x.device)
    one_hot = (index[..., None] == slot).to(x.dtype)  # (B, P, K)
    counts = one_hot.sum(dim=1)  # (B, K)
    means = torch.bmm(one_hot.transpose(1, 2), x) / counts.clamp_min(1.0)[..., None]  # (B, K, D)
    present = ((counts > 0) & (slot > 0)[None]).to(x.dtype)  # (B, K): the instances (slot 0 is background)
    number = present.sum(dim=1)  # C per image
    # pull: each pixel's hinge, averaged per instance, then over instances
    own = torch.bmm(one_hot, means)  # (B, P, D): each pixel's instance mean
    pull = F.relu(_norm(x - own) - delta_v) ** 2 * (index > 0).to(x.dtype)
    per_instance = torch.bmm(one_hot.transpose(1, 2), pull[..., None])[..., 0] / counts.clamp_min(1.0)
    variance = (per_instance * present).sum(dim=1) / number.clamp_min(1.0)
    # push: every ordered pair of distinct present instances
    apart = _norm(means[:, :, None] - means[:, None])  # (B, K, K)
    pairs = present[:, :, None] * present[:, None] * (1.0 - torch.eye(slots, dtype=x.dtype, device=x.device))
    distance = (F.relu(2 * delta_d - apart) ** 2 * pairs).sum(dim=(1, 2)) / (number * (number - 1)).clamp_min(1.0)
    regulariser = (_norm(means) * present).sum(dim=1) / number.clamp_min(1.0)
    per_image = variance + distance + REGULARISER * regulariser
    with_instances = (number > 0).to(x.dtype)
    return (per_image * with_instances).sum() / with_instances.sum().clamp_min(1.0)


def instance_loss(logits: torch.Tensor, target: torch.Tensor, valid: torch.Tensor, *, slots: int, delta_v: float,
                  delta_d: float) -> torch.Tensor:
    """Foreground BCE over valid pixels plus the discriminative loss of the embedding (module docstring);
    `target` and `valid` as `encode_instances` gives them, batched, on the logits' device."""
    mask = valid.to(logits.dtype)
    foreground = (target > 0).to(logits.dtype)
    bce = F.binary_cross_entropy_with_logits(logits[:, 0], foreground, reduction="none")
    bce = (bce * mask).sum() / mask.sum().clamp_min(1.0)
    ids = torch.where(valid, target, torch.zeros_like(target))  # an invalid pixel belongs to no instance
    return bce + discriminative_loss(logits[:, 1:], ids, slots=slots, delta_v=delta_v, delta_d=delta_d)
