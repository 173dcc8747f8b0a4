"""Zero-shot 2AFC perceptual similarity from pooled features (protocols `nights-2afc/v1`, `distortion-order-2afc/v1`,
`structure-2afc/v1`).

Each triplet is a reference and two distortions (left = NIGHTS' "0", right = "1"). The model calls the
distortion whose pooled feature has the higher cosine similarity to the reference's the more similar one,
and scores 1 where that is the side most judgements picked, 0 where it is not, and 0.5 where the two
cosines are exactly equal. This is DreamSim's 2AFC score (ssundaram21/dreamsim, `evaluation/score.py`
`score_nights_dataset`: distance to left < distance to right scores 1 - p, the reverse p, equality 0.5,
p = right_vote), with cosine distance (their `embed` + cosine, README "Feature extraction"). DreamSim's p is
the share of votes for the right side; where the votes are unanimous (what their `votes >= 6` filter keeps,
"unanimous votes" in its comment) p is 0 or 1 and both rules give the same number. Where votes split, this
probe scores the majority side (DreamSim's rule would give the expected agreement with one random voter).

Which triplets count: the `eval_split` triplets with at least `min_votes` human votes (DreamSim's
`TwoAFCDataset` keeps `votes >= 6`; the filter applies only where the dataset's votes are human, not to
orderings known by construction), less those whose votes tie (no majority; counted as `human_ties`).

Metrics: `accuracy` (headline), `f1`, `tie_rate`, `triplets` scored, `human_ties`, `model_ties`, `below_min_votes`;
on NIGHTS
`accuracy_imagenet` / `accuracy_no_imagenet` (DreamSim's test_imagenet / test_no_imagenet partition), on the
distortion ordering `accuracy_<type>` per distortion type, on the structure set `accuracy_<degradation>_r<ratio>`
per difficulty level. The partition accuracies have no column.

`f1` is the macro-F1 of the model's pick over the two sides (each side's F1 with that side as the positive class,
averaged; a model tie is a pick of neither side, so it counts against the side the judgements picked): unlike
accuracy it drops when a model favours one side. `tie_rate` is the share of triplets whose two cosines are
exactly equal (`model_ties` / `triplets`), where a monotone or saturated feature cannot tell the sides apart.

Per-sample scores (unit "triplet", id = the triplet id): `accuracy` (1, 0 or 0.5) and `tie_rate` (1 on a model
tie); each metric is its column's mean. `f1` does not decompose over triplets: each triplet's `label` (0: the
judgements picked left, 1: right) and `predicted` (0 left, 1 right, 2 tie) are auxiliary columns, from which
`harness.probes.statistics.classification.macro_f1` recomputes it over the two sides.
The protocol is named by the dataset (`protocol_for`), so NIGHTS and the synthetic ordering never share a board.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, PositiveInt

from harness.core.hashing import sha256_bytes
from harness.datasets.manifest import Item, Manifest
from harness.datasets.two_afc import DISTORTION_ORDER, NIGHTS, STRUCTURE_OVER_PIXELS
from harness.probes import resampled
from harness.probes.arrays import ARRAYS_DATASET, ArrayForm
from harness.probes.base import PooledParams, ProbeInputs, ProbeResult, ProbeSpec, register_probe
from harness.probes.statistics.classification import LABEL, PREDICTED, macro_f1_name

PROTOCOLS = {NIGHTS: "nights-2afc/v1", DISTORTION_ORDER: "distortion-order-2afc/v1",
             STRUCTURE_OVER_PIXELS: "structure-2afc/v1"}


def similarity_protocol(manifest: Manifest) -> str:
    reference = manifest.extra.get("reference")
    if reference not in PROTOCOLS:
        raise KeyError(f"dataset {manifest.name} has no 2AFC triplets of a known reference (extra.reference = "
                       f"{reference!r}); valid: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[reference]


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N,) float64 cosine similarity of matching rows of two (N, C) arrays."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    norms = np.maximum(np.linalg.norm(a, axis=1), 1e-12) * np.maximum(np.linalg.norm(b, axis=1), 1e-12)
    return np.einsum("nc,nc->n", a, b) / norms


def two_afc_scores(
    similarity_left: np.ndarray, similarity_right: np.ndarray, humans_pick_left: np.ndarray
) -> np.ndarray:
    """(N,) float64: 1 where the model's more similar side is the majority's, 0 where not, 0.5 on a model tie."""
    if not (np.isfinite(similarity_left).all() and np.isfinite(similarity_right).all()):
        raise ValueError("non-finite cosine similarity: the features hold NaN or inf")
    agree = (similarity_left > similarity_right) == humans_pick_left
    return np.where(similarity_left == similarity_right, 0.5, agree.astype(np.float64))


def select_triplets(triplets: list[dict], min_votes: int | None, human_votes: bool) -> tuple[list[dict], int, int]:
    """(triplets to score, how many fell below min_votes, how many human ties were left out)."""
    enough = [t for t in triplets if not human_votes or min_votes is None or t["votes"] >= min_votes]
    scored = [t for t in enough if t["left_vote"] != t["right_vote"]]
    return scored, len(triplets) - len(enough), len(enough) - len(scored)


class SimilarityParams(PooledParams):
    eval_split: str = Field(min_length=1)
    min_votes: PositiveInt | None  # DreamSim keeps triplets with votes >= 6 (human votes only); null: keep all


def run_similarity(inputs: ProbeInputs) -> ProbeResult:
    p, manifest = inputs.params, inputs.manifest
    similarity_protocol(manifest)  # refuse a dataset that is not a 2AFC triplet set before reading anything
    all_triplets = manifest.extra["triplets"]
    in_split = [t for t in all_triplets if t["split"] == p["eval_split"]]
    if not in_split:
        valid = sorted({t["split"] for t in all_triplets})
        raise KeyError(f"dataset {manifest.name} has no triplets of split {p['eval_split']!r}; "
                       f"valid: {', '.join(valid)}")
    triplets, below_min_votes, human_ties = select_triplets(in_split, p["min_votes"], manifest.extra["human_votes"])
    if not triplets:
        raise ValueError(f"no triplet of split {p['eval_split']!r} has at least min_votes={p['min_votes']} votes "
                         f"and a majority ({below_min_votes} below min_votes, {human_ties} human ties)")
    by_path = {item.path: item for item in manifest.items}
    features: dict[str, np.ndarray] = {}
    for triplet in triplets:
        for side in ("ref", "left", "right"):
            if triplet[side] not in features:
                features[triplet[side]] = inputs.features(by_path[triplet[side]])

    def stacked(side: str) -> np.ndarray:
        return np.stack([features[t[side]] for t in triplets])

    reference = stacked("ref")
    similarity_left = cosine_rows(reference, stacked("left"))
    similarity_right = cosine_rows(reference, stacked("right"))
    humans_pick_left = np.array([t["left_vote"] > t["right_vote"] for t in triplets])
    scores = two_afc_scores(similarity_left, similarity_right, humans_pick_left)
    tied = similarity_left == similarity_right
    auxiliary = {LABEL: np.where(humans_pick_left, 0.0, 1.0),
                 PREDICTED: np.where(tied, 2.0, np.where(similarity_left > similarity_right, 0.0, 1.0))}
    statistics = {"f1": macro_f1_name(2)}  # over the two sides; a tie (2) is neither
    metrics = {
        "accuracy": float(scores.mean()),
        "f1": float(resampled.evaluate(statistics["f1"], auxiliary)[0]),
        "tie_rate": float(tied.mean()),
        "triplets": float(len(triplets)),
        "human_ties": float(human_ties),
        "model_ties": float(np.sum(tied)),
        "below_min_votes": float(below_min_votes),
    }
    metrics.update(partition_accuracies(triplets, scores))
    return ProbeResult(metrics, [t["id"] for t in triplets], {"accuracy": scores, "tie_rate": tied.astype(np.float64)},
                       unit="triplet", auxiliary=auxiliary, statistics=statistics)


def partition_accuracies(triplets: list[dict], scores: np.ndarray) -> dict[str, float]:
    """Accuracy per NIGHTS ImageNet / no-ImageNet partition and per distortion type, where the triplets say."""
    groups: dict[str, list[float]] = {}
    for triplet, score in zip(triplets, scores, strict=True):
        if "is_imagenet" in triplet:
            name = "accuracy_imagenet" if triplet["is_imagenet"] else "accuracy_no_imagenet"
            groups.setdefault(name, []).append(score)
        if "distortion" in triplet:
            groups.setdefault(f"accuracy_{triplet['distortion']}", []).append(score)
    return {name: float(np.mean(values)) for name, values in sorted(groups.items())}


class TripletArrays(ArrayForm):
    """`probe.evaluate` on arrays: (N, 3, C) reference/left/right features and the share of judgements for left
    (N,) (1.0: left is the closer), scored against that share as against a synthetic ordering."""

    def manifest(self, features, targets, classes, prepared):
        items, rows, triplets = [], {}, []
        for split in sorted(features):
            x = np.asarray(features[split], dtype=np.float32)
            if x.ndim != 3 or x.shape[1] != 3:
                raise ValueError(f"similarity features are (N, 3, C): reference, left, right; got {x.shape}")
            shares = np.asarray(targets[split], dtype=np.float64)
            if len(shares) != len(x):
                raise ValueError(f"split {split}: {len(x)} triplets but {len(shares)} targets")
            for index, share in enumerate(shares):
                names = {}
                for side, row in zip(("ref", "left", "right"), x[index], strict=True):
                    path = f"{split}/{index:06d}_{side}"
                    items.append(Item(path, sha256_bytes(row.tobytes()), split))
                    rows[path] = row
                    names[side] = path
                triplets.append({"id": f"{split}/{index:06d}", **names, "split": split, "left_vote": float(share),
                                 "right_vote": float(1.0 - share), "votes": 1})
        extra = {"triplets": triplets, "reference": DISTORTION_ORDER, "human_votes": False}
        return Manifest(ARRAYS_DATASET, str(prepared), items, [], {"source": "arrays"}, extra), rows


TRIPLET_ARRAYS = TripletArrays()

SIMILARITY = register_probe(ProbeSpec(
    name="similarity",
    level="mid",
    protocol=PROTOCOLS[DISTORTION_ORDER],  # the embedded default's; a run records its dataset's (protocol_for)
    feature_mode="pooled",
    headline="accuracy",
    run=run_similarity,
    params=SimilarityParams,
    arrays=TRIPLET_ARRAYS,
    train_split_param=None,
    folder_layout="nights",
    lower_is_better=frozenset({"human_ties", "model_ties", "below_min_votes", "tie_rate"}),
    statistics={"f1": "macro_f1"},
    protocol_for=similarity_protocol,
))
