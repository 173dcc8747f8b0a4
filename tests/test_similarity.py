"""2AFC perceptual similarity: scoring against a plain per-triplet reference and DreamSim's score formula, the
NIGHTS loader on a fixture laid out like the release, the synthetic distortion ordering, and protocol names."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sklearn.metrics import f1_score

from harness.core.hashing import sha256_file
from harness.datasets.distortion_2afc import DISTORTIONS, prepare_distortion_2afc
from harness.datasets.kinds import prepare_dataset
from harness.datasets.manifest import Item, Manifest
from harness.datasets.structure_2afc import prepare_structure_2afc
from harness.datasets.two_afc import DISTORTION_ORDER, NIGHTS, NightsFormatError, prepare_nights
from harness.probes.base import ProbeInputs
from harness.probes.similarity import SIMILARITY, run_similarity
from harness.runs.extract import load_image
from harness.runs.probe_run import check_result

RNG = np.random.default_rng(0)


def _triplet_manifest(triplets: list[dict], *, human_votes: bool = True, reference: str = NIGHTS) -> Manifest:
    paths = sorted({t[side] for t in triplets for side in ("ref", "left", "right")})
    items = [Item(path, f"{index:064x}", "test") for index, path in enumerate(paths)]
    return Manifest("toy", "/nowhere", items, [], {},
                    {"triplets": triplets, "reference": reference, "human_votes": human_votes})


def _run(manifest: Manifest, features: dict[str, np.ndarray], **params):
    params = {"eval_split": "test", "min_votes": 0, **params}
    return run_similarity(ProbeInputs(manifest, lambda item: features[item.path], params, seed=0))


def _plain_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return math.fsum(float(x) * float(y) for x, y in zip(a, b, strict=True)) / (
        math.sqrt(math.fsum(float(x) ** 2 for x in a)) * math.sqrt(math.fsum(float(y) ** 2 for y in b)))


def _random_triplets(n: int) -> tuple[list[dict], dict[str, np.ndarray]]:
    features, triplets = {}, []
    for index in range(n):
        ref, left, right = (f"{index}/{side}.png" for side in ("ref", "left", "right"))
        features[ref], features[left] = RNG.normal(size=16), RNG.normal(size=16)
        # every fifth triplet: identical distortions, so the cosines tie exactly
        features[right] = features[left].copy() if index % 5 == 0 else RNG.normal(size=16)
        left_vote = int(RNG.integers(0, 6))
        right_vote = int(RNG.integers(0, 6))
        triplets.append({"id": str(index), "ref": ref, "left": left, "right": right,
                         "split": "test" if index % 7 else "val", "left_vote": float(left_vote),
                         "right_vote": float(right_vote), "votes": left_vote + right_vote,
                         "is_imagenet": bool(index % 3)})
    return triplets, features


# -- scoring ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("min_votes", [0, 4, 7])
def test_scores_match_a_plain_per_triplet_reference(min_votes):
    triplets, features = _random_triplets(300)
    result = _run(_triplet_manifest(triplets), features, min_votes=min_votes)

    expected, ids, human_ties, below, model_ties = [], [], 0, 0, 0
    truth, picked = [], []  # sides for sklearn's F1: 0 left, 1 right; a model tie picks "tie"
    for t in triplets:
        if t["split"] != "test":
            continue
        if t["votes"] < min_votes:
            below += 1
            continue
        if t["left_vote"] == t["right_vote"]:
            human_ties += 1
            continue
        to_left = _plain_cosine(features[t["ref"]], features[t["left"]])
        to_right = _plain_cosine(features[t["ref"]], features[t["right"]])
        if to_left == to_right:
            model_ties += 1
            expected.append(0.5)
        else:
            expected.append(1.0 if (to_left > to_right) == (t["left_vote"] > t["right_vote"]) else 0.0)
        ids.append(t["id"])
        truth.append("left" if t["left_vote"] > t["right_vote"] else "right")
        picked.append("tie" if to_left == to_right else "left" if to_left > to_right else "right")

    assert result.sample_ids == ids
    np.testing.assert_array_equal(result.samples["accuracy"], expected)
    assert result.metrics["accuracy"] == pytest.approx(np.mean(expected), abs=1e-15)
    assert result.metrics["triplets"] == len(ids)
    assert result.metrics["human_ties"] == human_ties > 0
    assert result.metrics["below_min_votes"] == below
    assert result.metrics["model_ties"] == model_ties > 0
    assert result.metrics["tie_rate"] == pytest.approx(model_ties / len(ids), abs=1e-15)
    assert result.metrics["f1"] == pytest.approx(
        f1_score(truth, picked, labels=["left", "right"], average="macro", zero_division=0), abs=1e-15)
    by_id = {t["id"]: t for t in triplets}
    for name, flag in (("accuracy_imagenet", True), ("accuracy_no_imagenet", False)):
        part = [s for i, s in zip(ids, expected, strict=True) if by_id[i]["is_imagenet"] is flag]
        assert result.metrics[name] == pytest.approx(np.mean(part), abs=1e-15)
    check_result(SIMILARITY, result)  # every column is its metric's mean; the headline is there


def test_unanimous_votes_score_as_dreamsims_2afc_formula():
    """DreamSim (evaluation/score.py): with distances d0, d1 and p = share of votes for the right side, a triplet
    scores 1 - p where d0 < d1, p where d1 < d0 and 0.5 where they are equal. Unanimous votes: p is 0 or 1."""
    triplets, features = _random_triplets(200)
    for t in triplets:
        t["split"], right = "test", bool(RNG.integers(2))
        t["left_vote"], t["right_vote"], t["votes"] = float(not right), float(right), 6
    result = _run(_triplet_manifest(triplets), features, min_votes=6)
    d0 = np.array([1 - _plain_cosine(features[t["ref"]], features[t["left"]]) for t in triplets])
    d1 = np.array([1 - _plain_cosine(features[t["ref"]], features[t["right"]]) for t in triplets])
    p = np.array([t["right_vote"] for t in triplets])
    dreamsim = (d0 < d1) * (1 - p) + (d1 < d0) * p + (d0 == d1) * 0.5
    np.testing.assert_array_equal(result.samples["accuracy"], dreamsim)


def test_min_votes_filters_human_votes_but_not_a_constructed_ordering():
    triplets, features = _random_triplets(40)
    for t in triplets:
        t["split"] = "test"
        t["left_vote"], t["right_vote"], t["votes"] = 1.0, 0.0, 1
    human = _run(_triplet_manifest(triplets), features, min_votes=1)
    assert human.metrics["triplets"] == 40
    with pytest.raises(ValueError, match="min_votes=2"):
        _run(_triplet_manifest(triplets), features, min_votes=2)
    constructed = _run(_triplet_manifest(triplets, human_votes=False, reference=DISTORTION_ORDER), features,
                       min_votes=6)
    assert constructed.metrics["triplets"] == 40 and constructed.metrics["below_min_votes"] == 0
    np.testing.assert_array_equal(constructed.samples["accuracy"], human.samples["accuracy"])


def test_unknown_split_and_non_finite_features_are_refused():
    triplets, features = _random_triplets(10)
    with pytest.raises(KeyError, match="valid: test, val"):
        _run(_triplet_manifest(triplets), features, eval_split="train")
    triplets[1].update(left_vote=3.0, right_vote=1.0, votes=4)
    features[triplets[1]["left"]] = np.full(16, np.nan)
    with pytest.raises(ValueError, match="non-finite"):
        _run(_triplet_manifest(triplets), features)


def test_protocol_is_named_by_the_dataset():
    assert SIMILARITY.resolve_protocol(_triplet_manifest([], reference=NIGHTS)) == "nights-2afc/v1"
    assert SIMILARITY.resolve_protocol(_triplet_manifest([], reference=DISTORTION_ORDER)) == "distortion-order-2afc/v1"
    assert SIMILARITY.resolve_protocol(None) == SIMILARITY.protocol
    with pytest.raises(KeyError, match="valid: nights, distortion-order, structure-over-pixels"):
        SIMILARITY.resolve_protocol(Manifest("other", "/x", [], extra={"pairs": []}))


# -- NIGHTS loader -----------------------------------------------------------------------------------

# The release's data.csv as pandas writes it (floats with ".0", booleans as True/False); the loader reads
# columns by name, so the columns it ignores (prompt, seeds) may be anywhere.
NIGHTS_HEADER = ("id,left_vote,right_vote,votes,ref_path,left_path,right_path,prompt,left_seed,right_seed,split,"
                 "is_imagenet")
NIGHTS_ROWS = [  # (id, left_vote, right_vote, votes, split, is_imagenet)
    (0, 1.0, 0.0, 6, "train", "True"), (1, 0.0, 1.0, 7, "test", "True"), (2, 1.0, 0.0, 6, "test", "False"),
    (10, 0.0, 1.0, 9, "test", "False"), (3, 1.0, 0.0, 8, "val", "True"),
]


def _nights_fixture(root: Path, rows=NIGHTS_ROWS) -> Path:
    lines = [NIGHTS_HEADER]
    for index, (triplet_id, left, right, votes, split, imagenet) in enumerate(rows):
        folder, name = f"{index // 2:03d}", f"{index % 2:03d}"
        ref, left_path, right_path = f"ref/{folder}/{name}.png", f"distort/{folder}/{name}_0.png", \
            f"distort/{folder}/{name}_1.png"
        for shade, rel in enumerate((ref, left_path, right_path)):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8), (index * 20, shade * 40, 7)).save(root / rel)
        lines.append(f"{triplet_id},{left},{right},{votes},{ref},{left_path},{right_path},"
                     f"\"An image of a thing, {index}\",{index},{index + 1},{split},{imagenet}")
    (root / "data.csv").write_text("\n".join(lines) + "\n")
    return root


def test_nights_loader_indexes_the_triplets_of_a_split(tmp_path):
    root = _nights_fixture(tmp_path / "nights")
    manifest = prepare_dataset("nights", {"kind": "nights", "root": str(root), "splits": ["test"]}, tmp_path / "out")
    assert Manifest.load(tmp_path / "out" / "manifest.json").identity == manifest.identity
    triplets = manifest.extra["triplets"]
    assert [t["id"] for t in triplets] == ["1", "2", "10"]  # natural id order within the split
    assert manifest.extra["reference"] == NIGHTS and manifest.extra["human_votes"] is True
    assert triplets[0] == {"id": "1", "ref": "ref/000/001.png", "left": "distort/000/001_0.png",
                           "right": "distort/000/001_1.png", "split": "test", "left_vote": 0.0, "right_vote": 1.0,
                           "votes": 7, "is_imagenet": True}
    assert [t["is_imagenet"] for t in triplets] == [True, False, False]
    assert {i.path for i in manifest.items} == {t[s] for t in triplets for s in ("ref", "left", "right")}
    assert all(i.sha256 == sha256_file(root / i.path) and i.split == "test" for i in manifest.items)

    limited = prepare_nights("nights", tmp_path / "o2", str(root), splits=["val", "test"], limit_per_split=2)
    assert [t["id"] for t in limited.extra["triplets"]] == ["3", "1", "2"]
    assert len(limited.items) == 9 and limited.identity != manifest.identity

    # pooled features where the majority side is the one nearer the reference: accuracy 1 on the test split
    features = {i.path: np.array([1.0, 0.0]) for i in manifest.items}
    for t in triplets:
        features[t["left"] if t["left_vote"] > t["right_vote"] else t["right"]] = np.array([1.0, 0.1])
        features[t["right"] if t["left_vote"] > t["right_vote"] else t["left"]] = np.array([0.0, 1.0])
    result = _run(manifest, features, min_votes=6)
    assert result.metrics["accuracy"] == 1.0 and result.metrics["triplets"] == 3
    assert set(result.metrics) >= {"accuracy_imagenet", "accuracy_no_imagenet"}


def test_nights_loader_names_the_missing_image(tmp_path):
    root = _nights_fixture(tmp_path / "nights")
    (root / "distort/001/000_1.png").unlink()
    with pytest.raises(FileNotFoundError, match=r"data\.csv: triplet 2 names distort/001/000_1\.png"):
        prepare_nights("nights", tmp_path / "out", str(root))


@pytest.mark.parametrize(("row", "message"), [
    ("4,one,0.0,6,ref/a.png,distort/a_0.png,distort/a_1.png,p,1,2,test,True", "must be numbers"),
    ("4,1.0,0.0,6.5,ref/a.png,distort/a_0.png,distort/a_1.png,p,1,2,test,True", "votes must be a count"),
    ("4,1.0,0.0,6,ref/a.png,distort/a_0.png,distort/a_1.png,p,1,2,test,maybe", "is_imagenet must be True or False"),
    ("4,1.0,0.0,6,/abs/a.png,distort/a_0.png,distort/a_1.png,p,1,2,test,True", "must be relative"),
    ("4,1.0,0.0,6,ref/a.png", "one value per column"),
    ("1,1.0,0.0,6,ref/a.png,distort/a_0.png,distort/a_1.png,p,1,2,test,True", "id '1' repeats line 3"),
])
def test_nights_loader_names_the_malformed_row(tmp_path, row, message):
    root = _nights_fixture(tmp_path / "nights")
    with open(root / "data.csv", "a") as handle:
        handle.write(row + "\n")
    with pytest.raises(NightsFormatError, match=rf"data\.csv:7: .*{message}"):
        prepare_nights("nights", tmp_path / "out", str(root))


def test_nights_loader_refuses_a_csv_without_the_columns_or_the_split(tmp_path):
    root = _nights_fixture(tmp_path / "nights")
    with pytest.raises(ValueError, match="nights splits are train, val, test"):
        prepare_nights("nights", tmp_path / "out", str(root), splits=["dev"])
    _nights_fixture(root, rows=[r for r in NIGHTS_ROWS if r[4] != "val"])
    with pytest.raises(NightsFormatError, match="no triplet of split 'val'"):
        prepare_nights("nights", tmp_path / "out", str(root), splits=["val"])
    (root / "data.csv").write_text("id,ref_path,left_path,right_path\n0,a,b,c\n")
    with pytest.raises(NightsFormatError, match=r"data\.csv: missing column\(s\) left_vote, right_vote, votes"):
        prepare_nights("nights", tmp_path / "out", str(root))
    with pytest.raises(FileNotFoundError, match=r"data\.csv not found"):
        prepare_nights("nights", tmp_path / "out", str(tmp_path / "absent"))


# -- the synthetic distortion ordering ---------------------------------------------------------------

SYNTHETIC = {"photos": ["skimage:astronaut", "sklearn:china.jpg"], "photo_size": 112, "size": 64,
             "crops_per_photo": 3, "distortions": sorted(DISTORTIONS), "seed": 0}


def test_distortion_2afc_is_deterministic_and_ordered_by_construction(tmp_path):
    first = prepare_dataset("d", {"kind": "distortion_2afc", **SYNTHETIC}, tmp_path / "a")
    second = prepare_distortion_2afc("d", tmp_path / "b", **SYNTHETIC)
    assert [(i.path, i.sha256) for i in first.items] == [(i.path, i.sha256) for i in second.items]
    assert first.identity == second.identity and first.extra == second.extra
    assert prepare_distortion_2afc("d", tmp_path / "c", **{**SYNTHETIC, "seed": 1}).identity != first.identity
    assert all(i.sha256 == sha256_file(tmp_path / "a" / i.path) for i in first.items)

    triplets = first.extra["triplets"]
    assert len(triplets) == 2 * 3 * len(DISTORTIONS) and first.extra["human_votes"] is False
    assert {t["split"] for t in triplets} == {"test"} and {t["votes"] for t in triplets} == {1}
    assert 0 < sum(t["left_vote"] for t in triplets) < len(triplets)  # the weaker side is not always left
    for t in triplets:
        levels = DISTORTIONS[t["distortion"]][1]
        weaker_left = levels.index(t["left_strength"]) < levels.index(t["right_strength"])
        assert (t["left_vote"], t["right_vote"]) == ((1.0, 0.0) if weaker_left else (0.0, 1.0))
        assert t["left"] != t["right"] and t["ref"].endswith("/ref.png")


def test_raw_pixels_order_the_synthetic_distortions(tmp_path):
    manifest = prepare_distortion_2afc("d", tmp_path / "d", **SYNTHETIC)
    pixels = {i.path: np.asarray(load_image(manifest.resolve(i)), dtype=np.float64).ravel() for i in manifest.items}
    result = _run(manifest, pixels, min_votes=6)
    assert result.metrics["triplets"] == len(manifest.extra["triplets"])
    assert result.metrics["accuracy"] >= 0.8
    assert {f"accuracy_{kind}" for kind in DISTORTIONS} <= set(result.metrics)
    check_result(SIMILARITY, result)
    assert SIMILARITY.resolve_protocol(manifest) == "distortion-order-2afc/v1"


def test_distortion_2afc_refuses_unknown_types_and_a_photo_too_small(tmp_path):
    with pytest.raises(ValueError, match="distortions are blur, noise, jpeg, contrast, shift"):
        prepare_distortion_2afc("d", tmp_path, **{**SYNTHETIC, "distortions": ["blur", "swirl"]})
    with pytest.raises(ValueError, match="photo_size"):
        prepare_distortion_2afc("d", tmp_path, **{**SYNTHETIC, "photo_size": 80})


# -- structure_2afc: pixel MSE wrong by construction -------------------------------------------------

STRUCTURE = {"photos": ["skimage:astronaut", "sklearn:china.jpg"], "photo_size": 128, "size": 64,
             "crops_per_photo": 2, "colour_shift": 0.15, "degradations": ["blur", "noise"],
             "ratios": [0.5, 0.25, 0.12], "seed": 0}


def test_structure_2afc_is_deterministic_and_pixel_mse_is_wrong_on_every_triplet(tmp_path):
    first = prepare_dataset("s", {"kind": "structure_2afc", **STRUCTURE}, tmp_path / "a")
    second = prepare_structure_2afc("s", tmp_path / "b", **STRUCTURE)
    assert [(i.path, i.sha256) for i in first.items] == [(i.path, i.sha256) for i in second.items]
    assert first.identity == second.identity and first.extra == second.extra
    assert prepare_structure_2afc("s", tmp_path / "c", **{**STRUCTURE, "seed": 1}).identity != first.identity

    triplets = first.extra["triplets"]
    assert len(triplets) == 2 * 2 * 2 * 3 and first.extra["human_votes"] is False
    assert 0 < sum(t["left_vote"] for t in triplets) < len(triplets)  # the answer is not always left
    pixels = {i.path: np.asarray(load_image(first.resolve(i)), dtype=np.float64) for i in first.items}
    for t in triplets:
        answer, other = (t["left"], t["right"]) if t["left_vote"] == 1.0 else (t["right"], t["left"])
        assert answer.endswith("/colour.png") and t["distortion"] in other
        ratio = int(t["distortion"].rsplit("_r", 1)[1]) / 100
        # recomputed from the written PNGs, not read from the triplet: the degraded side is nearer in pixels
        colour_mse = np.mean((pixels[t["ref"]] - pixels[answer]) ** 2)
        degraded_mse = np.mean((pixels[t["ref"]] - pixels[other]) ** 2)
        assert degraded_mse <= ratio * colour_mse + 1e-9
        assert (colour_mse, degraded_mse) == pytest.approx((t["colour_mse"], t["degraded_mse"]))
    # the probe runs on these triplets (raw pixels as features) and reports every difficulty level
    result = _run(first, {path: array.ravel() for path, array in pixels.items()}, min_votes=6)
    check_result(SIMILARITY, result)
    assert SIMILARITY.resolve_protocol(first) == "structure-2afc/v1"
    assert {f"accuracy_{kind}_r{r}" for kind in ("blur", "noise") for r in (50, 25, 12)} <= set(result.metrics)


def test_a_pixel_mse_judge_scores_zero(tmp_path):
    manifest = prepare_structure_2afc("s", tmp_path / "s", **STRUCTURE)
    pixels = {i.path: np.asarray(load_image(manifest.resolve(i)), dtype=np.float64) for i in manifest.items}
    judged = []
    for t in manifest.extra["triplets"]:
        left = np.mean((pixels[t["ref"]] - pixels[t["left"]]) ** 2)
        right = np.mean((pixels[t["ref"]] - pixels[t["right"]]) ** 2)
        judged.append(float((left < right) == (t["left_vote"] == 1.0)))
    assert judged and max(judged) == 0.0


def test_structure_2afc_refuses_bad_settings_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="degradations are blur, noise"):
        prepare_structure_2afc("s", tmp_path, **{**STRUCTURE, "degradations": ["swirl"]})
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        prepare_structure_2afc("s", tmp_path, **{**STRUCTURE, "ratios": [1.5]})
    with pytest.raises(ValueError, match="photo_size"):
        prepare_structure_2afc("s", tmp_path, **{**STRUCTURE, "photo_size": 80})
    with pytest.raises(ValueError, match="mildest"):
        prepare_structure_2afc("s", tmp_path, **{**STRUCTURE, "colour_shift": 0.0})
