"""The few-shot protocol's training subset: k items of a probe's training split, chosen by a seeded hash.

Every training item is ranked by SHA-256 of (seed, the item's content hash), and the k lowest-ranked
are kept: k of every class (unit "images_per_class", for classification) or k in all ("images", for
the dense probes). The rank depends on the file's bytes and the seed only, so the subset is the same
whatever order the manifest lists items in, whatever the files are called and wherever they live;
two seeds give independent subsets, and every backbone trained with one seed sees the same items.

The subset replaces the training split in a copy of the manifest (`fewshot_manifest`); every other
split, the dataset's identity and the evaluation are untouched. The record carries k, the unit, the
seed, the subset's size and a SHA-256 of the chosen items (`subset_sha256`), so its identity is
derived from what was trained on, not from a name.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING, Any, Literal

from harness.core.hashing import hash_json
from harness.core.run_key import RunKey, Shot

if TYPE_CHECKING:  # types only: the leaderboard reads SUBSET_PARAMS without importing the dataset loaders
    from harness.core.config import Params
    from harness.datasets.manifest import Item, Manifest

Unit = Literal["images_per_class", "images"]

# protocol_params keys the subset adds; the rest are the probe's own parameters. Runs that differ only
# in these lie on one learning curve (`harness.leaderboard.queries.comparability.curve_key`).
SUBSET_PARAMS = ("k_shot", "subset_seed", "subset_size", "subset_sha256")
UNIT_PARAM = "k_shot_unit"


class FewShotError(ValueError):
    """A training split that cannot give the requested subset (too few items, no labels)."""


def subset_rank(item: Item, seed: int) -> str:
    """The item's place in the seed's order: a hash of its content and the seed, never of its position."""
    return hashlib.sha256(f"visbench-fewshot/{seed}/{item.sha256}".encode()).hexdigest()


def _order(items: list[Item], seed: int) -> list[Item]:
    # Identical files (equal content hashes) tie on the rank; label and path break the tie so the
    # order is still total and independent of the input order.
    return sorted(items, key=lambda i: (subset_rank(i, seed), -1 if i.label is None else i.label, i.path))


def choose_subset(manifest: Manifest, split: str, unit: Unit, shot: Shot) -> list[Item]:
    """The k items (per class or in all) of `split` with the lowest `subset_rank`, in manifest order."""
    items = manifest.split(split)
    where = f"split {split!r} of dataset {manifest.name}"
    if unit == "images":
        if shot.k > len(items):
            raise FewShotError(f"k={shot.k} images exceeds the {len(items)} training images in {where}")
        chosen = _order(items, shot.seed)[: shot.k]
    elif unit == "images_per_class":
        if any(item.label is None for item in items):
            raise FewShotError(f"{where} has unlabelled items: k images per class needs a label on every item")
        unknown = sorted({item.label for item in items} - set(range(len(manifest.classes))))
        if unknown:
            raise FewShotError(f"{where} has labels {unknown} outside its {len(manifest.classes)} classes")
        chosen = []
        for label, name in enumerate(manifest.classes):
            members = [item for item in items if item.label == label]
            if shot.k > len(members):
                raise FewShotError(f"k={shot.k} images per class exceeds the {len(members)} training images of "
                                   f"class {name!r} in {where}")
            chosen += _order(members, shot.seed)[: shot.k]
    else:
        raise FewShotError(f"unknown few-shot unit {unit!r}; valid: images, images_per_class")
    keep = {id(item) for item in chosen}
    # Manifest order, as the full split is given: with every item chosen the probe sees the full run's input.
    return [item for item in items if id(item) in keep]


def subset_sha256(items: list[Item]) -> str:
    """SHA-256 of the chosen items' content hashes and labels, sorted: the subset's identity."""
    return hash_json(sorted([item.sha256, item.label] for item in items), length=64)


def fewshot_manifest(manifest: Manifest, split: str, unit: Unit, shot: Shot) -> tuple[Manifest, dict[str, Any]]:
    """A copy of `manifest` whose `split` holds only the chosen items, and the protocol_params that
    describe the subset (k_shot, k_shot_unit, subset_seed, subset_size, subset_sha256)."""
    chosen = choose_subset(manifest, split, unit, shot)
    keep = {id(item) for item in chosen}
    items = [item for item in manifest.items if item.split != split or id(item) in keep]
    described = {"k_shot": shot.k, UNIT_PARAM: unit, "subset_seed": shot.seed, "subset_size": len(chosen),
                 "subset_sha256": subset_sha256(chosen)}
    return dataclasses.replace(manifest, items=items), described


def stage_shots(params: Params, grid: str) -> list[Shot | None]:
    """The runs one probe stage of `grid` makes: [None] (the full split), or every (k, seed) of its
    `fewshot` spec, k-major."""
    spec = params.grids[grid].fewshot
    if spec is None:
        return [None]
    return [Shot(k, seed) for k in spec.k_shots for seed in spec.seeds]


def stage_run_ids(params: Params, stage: RunKey) -> list[str]:
    """The run ids of the records one probe stage writes, in the order it writes them."""
    return [stage.at(shot).run_id for shot in stage_shots(params, stage.grid)]
