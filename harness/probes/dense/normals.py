"""Surface normals (protocol `probe3d-surface-normal/v3`): the dense probes' recipe (`probes.run_dense`) on the
dataset's `normals` target, (3, S, S) unit vectors in the camera frame.

Loss (`uncertainty`, default true): the **uncertainty-aware angular loss** the seed trains normals with, the
negative log-likelihood of Bae, Budvytis & Cipolla's angular von Mises–Fisher distribution ("Estimating and
Exploiting the Aleatoric Uncertainty in Surface Normal Estimation", ICCV 2021, eq. 4). The head predicts a fourth
channel, a concentration κ = ELU(z₄) + 1.01 > 0.01 per cell, and pays

    L = −log(κ² + 1) + κ·θ + log(1 + exp(−κπ)),   θ = arccos(clip(⟨n̂, n⟩, −1 + ε, 1 − ε)),  ε = 1e-4

(ε keeps arccos' gradient finite where the prediction is exact). Where the features cannot tell the orientation
κ falls and the cell weighs little: the head spends itself on the cells it can know. With `uncertainty: false`
the loss is the plain angular loss 1 − cos θ over valid cells (protocol v2's), three outputs.

The prediction is the first three channels normalised; κ is not scored. Metrics: angular error per image
(`metrics.normals_per_image`), headline `within_11.25` (share of pixels within 11.25°), mean/median error beside it.

**Near-chance warning.** Each run also scores the image-blind prior, the training split's mean normal predicted
everywhere (the head's starting point). Where the trained head closes less than 5% of the gap between that prior's
headline and 1 (`within_11.25`; not the mean error, see below), the record carries a warning (`Record.warnings`)
and the run prints it: the numbers are what ran, but they say more about the loss than the features when the
uncertainty-aware loss lets κ collapse on weak features; the warning names the off switch
(`probes.surface_normal.uncertainty: false`) to tell the two apart.

The uncertainty-aware loss lets the head give up on cells: where κ is low, a wrong direction costs almost nothing,
so those cells' errors can be large. Median error and the within-t shares read the cells the head commits to;
the mean error carries the given-up tail, and can exceed the prior's while the headline beats it.

**Normal source.** Where the ground-truth normals came from (rendered from the scene geometry, a dataset's own
normal maps, a user's folder) is the manifest's `target_sources["normals"]`, which every record carries in
`dataset.target_sources`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from harness.probes.dense import metrics as M
from harness.probes.dense import targets as T
from harness.probes.dense.params import DenseParams
from harness.probes.dense.probes import MEAN_CHANNELS, DenseTask, Prior, register_dense_probe

ARCCOS_EPS = 1e-4
KAPPA_FLOOR = 1.01  # κ = ELU(z) + 1.01: ELU > −1, so κ > 0.01 (Bae et al.'s lower bound)
HEADLINE = "within_11.25"
NEAR_CHANCE = 0.05  # a head that closes less than this share of the prior's gap to a perfect headline is near chance


class NormalParams(DenseParams):
    # the uncertainty-aware angular loss (four outputs); false: the plain angular loss 1 − cos θ (three)
    uncertainty: bool = True


def angular_vmf_nll(logits: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean over valid cells of the angular vMF negative log-likelihood; logits (B, 4, S, S): direction, κ."""
    cos = F.cosine_similarity(logits[:, :3], target, dim=1, eps=1e-6)
    theta = torch.acos(cos.clamp(-1.0 + ARCCOS_EPS, 1.0 - ARCCOS_EPS))
    kappa = F.elu(logits[:, 3]) + KAPPA_FLOOR
    nll = -torch.log1p(kappa * kappa) + kappa * theta + torch.log1p(torch.exp(-kappa * math.pi))
    return nll[valid].mean()


def cosine_loss(logits: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    cos = F.cosine_similarity(logits, target, dim=1, eps=1e-6)
    return (1.0 - cos)[valid].mean()


def _direction(logits: torch.Tensor) -> np.ndarray:
    # the one place a prediction leaves its device: the activation ran there, the metrics run on NumPy
    return F.normalize(logits[:, :3], dim=1, eps=1e-6).detach().cpu().numpy()


def _near_chance(metrics: dict[str, float], prior: dict[str, float], uncertainty: bool) -> list[str]:
    """The warning when the head closes less than `NEAR_CHANCE` of the gap between the image-blind prior's headline
    and a perfect score: judged on the headline (a share of pixels within 11.25°), not the mean error, which the
    uncertainty-aware loss lets a few given-up cells dominate."""
    head, blind = metrics[HEADLINE], prior[HEADLINE]
    gain = (head - blind) / (1.0 - blind) if blind < 1.0 else 0.0
    if gain >= NEAR_CHANCE:
        return []
    why = ("the uncertainty-aware loss can stall there when κ collapses on weak features: re-run with "
           "probes.surface_normal.uncertainty: false to tell the features from the loss" if uncertainty else
           "the features carry little this head can read about surface orientation; compare the random-init "
           "controls")
    return [f"near chance: {HEADLINE} {head:.3f} against {blind:.3f} for the image-blind prior (the training "
            f"split's mean normal everywhere) closes {gain:.1%} of the gap to 1, under {NEAR_CHANCE:.0%}; {why}"]


# the prior's three channels start the direction; κ's bias starts at 0 (κ = 1.01)
_MEAN_NORMAL_AND_KAPPA = Prior(MEAN_CHANNELS.statistic, lambda s: np.append(MEAN_CHANNELS.bias(s), 0.0))

NORMALS_UNCERTAIN = DenseTask(
    "normals", T.encode_normals, lambda m: 4, angular_vmf_nll, _direction,
    lambda p, t, v, k: M.normals_per_image(p, t, v), prior=_MEAN_NORMAL_AND_KAPPA,
    warn=lambda metrics, prior: _near_chance(metrics, prior, uncertainty=True))
NORMALS = DenseTask(
    "normals", T.encode_normals, lambda m: 3, cosine_loss, _direction,
    lambda p, t, v, k: M.normals_per_image(p, t, v), prior=MEAN_CHANNELS,
    warn=lambda metrics, prior: _near_chance(metrics, prior, uncertainty=False))


def normals_task(params: dict[str, Any]) -> DenseTask:
    """The task a run's parameters ask for (the schema's default when not given)."""
    return NORMALS_UNCERTAIN if params.get("uncertainty", NormalParams.model_fields["uncertainty"].default) \
        else NORMALS


SURFACE_NORMAL_PROBE = register_dense_probe(
    "surface_normal", "mid", "probe3d-surface-normal/v3", HEADLINE, normals_task,
    ("mean_error", "median_error"), params=NormalParams)
