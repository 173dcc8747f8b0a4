"""Instance segmentation (`instance-embedding/v1`): mask AP against pycocotools' `COCOeval(iouType="segm")` on
generated masks (crowded, overlapping, empty, tied) and on a case computed by hand; the resampled AP under integer
row weights against pycocotools on the images repeated; COCO's matching rules; the discriminative loss against a
plain per-instance transcription; the greedy clustering; the loss on `meta` (no host read-back); and the probe end
to end: features that carry instances are segmented, noise is not."""

from __future__ import annotations

import contextlib
import io
import warnings
from functools import partial

import numpy as np
import pytest
import torch
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from harness.core import paths
from harness.datasets.dense_targets import save_npy
from harness.datasets.manifest import Item, Manifest
from harness.probes import get_probe, resampled
from harness.probes.base import ProbeInputs, validate_probe_params
from harness.probes.dense.heads import build_head
from harness.probes.dense.streaming import Batch
from harness.probes.dense.train import train_step
from harness.probes.instances.clustering import greedy_clusters
from harness.probes.instances.embedding import (
    discriminative_loss,
    encode_instances,
    instance_loss,
    instance_masks,
)
from harness.probes.instances.mask_ap import (
    IOU_THRESHOLDS,
    image_columns,
    mask_ap,
    mask_iou,
    match_image,
    matched_bits,
)
from harness.runs.probe_run import check_result

SIZE = 24


# -- generated masks -------------------------------------------------------------------------------------

def _rectangle(rng: np.random.Generator, centre: np.ndarray | None = None) -> np.ndarray:
    mask = np.zeros((SIZE, SIZE), dtype=bool)
    cy, cx = centre if centre is not None else rng.integers(0, SIZE, 2)
    h, w = rng.integers(2, 10, 2)
    mask[max(cy - h // 2, 0): cy + (h + 1) // 2, max(cx - w // 2, 0): cx + (w + 1) // 2] = True
    return mask


def _lattice(rng: np.random.Generator) -> np.ndarray:
    """A union of 1–3 random 6×6 blocks of a 4×4 lattice: IoUs are small fractions (ties; exactly 0.5, 0.75)."""
    mask = np.zeros((SIZE, SIZE), dtype=bool)
    for _ in range(int(rng.integers(1, 4))):
        r, c = rng.integers(0, 4, 2) * 6
        mask[r:r + 6, c:c + 6] = True
    return mask


def _perturbed(rng: np.random.Generator, mask: np.ndarray, lattice: bool) -> np.ndarray:
    if lattice:
        return _lattice(rng) if rng.random() < 0.3 else mask.copy()
    shifted = np.roll(mask, tuple(rng.integers(-2, 3, 2)), axis=(0, 1))
    return shifted ^ (rng.random(mask.shape) < 0.03)


def _scenario(seed: int, lattice: bool = False) -> tuple[list[np.ndarray], list[tuple[np.ndarray, np.ndarray]]]:
    """Ten images of 0..6 objects (overlapping, half crowded around one spot; lattice blocks when `lattice`),
    detections near objects (0, 1 or 2 per object: duplicates), stray and empty detections, an image without
    objects and one without detections; `lattice` scores come from three values, so they tie."""
    rng = np.random.default_rng(seed)
    truths, found = [], []
    for image in range(10):
        n = 0 if image % 4 == 0 else int(rng.integers(1, 7))
        spot = rng.integers(4, SIZE - 4, 2)
        objects = [_lattice(rng) if lattice else _rectangle(rng, spot if rng.random() < 0.5 else None)
                   for _ in range(n)]
        truths.append(np.array(objects, dtype=bool).reshape(n, SIZE, SIZE))
        if image % 5 == 3:
            found.append((np.zeros((0, SIZE, SIZE), dtype=bool), np.zeros(0)))
            continue
        near = np.repeat(np.arange(n), rng.integers(0, 3, size=n))
        masks = [_perturbed(rng, objects[k], lattice) for k in near]
        masks += [_lattice(rng) if lattice else _rectangle(rng) for _ in range(int(rng.integers(0, 3)))]
        if rng.random() < 0.3:
            masks.append(np.zeros((SIZE, SIZE), dtype=bool))  # an empty mask: IoU 0 with everything
        scores = rng.choice([0.25, 0.5, 0.75], len(masks)) if lattice else rng.random(len(masks))
        found.append((np.array(masks, dtype=bool).reshape(-1, SIZE, SIZE), scores))
    return truths, found


def _rle(mask: np.ndarray) -> dict:
    return mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))


def _pycocotools(truths: list[np.ndarray], found: list[tuple[np.ndarray, np.ndarray]]) -> list[float]:
    """AP, AP50, AP75 from COCOeval's `segm` evaluation, every mask as its RLE, one category."""
    images, annotations, results = [], [], []
    for image_id, (objects, (masks, scores)) in enumerate(zip(truths, found, strict=True), start=1):
        images.append({"id": image_id, "height": SIZE, "width": SIZE})
        for mask in objects:
            rle = _rle(mask)
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": 1,
                                "segmentation": rle, "area": float(mask_utils.area(rle)),
                                "bbox": mask_utils.toBbox(rle).tolist(), "iscrowd": 0})
        for mask, score in zip(masks, scores, strict=True):
            results.append({"image_id": image_id, "category_id": 1, "segmentation": _rle(mask), "score": float(score)})
    categories = [{"id": 1, "name": "object"}]
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": images, "annotations": annotations, "categories": categories}
        gt.createIndex()
        if results:
            dt = gt.loadRes(results)
        else:  # loadRes reads its first result: no detection at all is given as an empty result set
            dt = COCO()
            dt.dataset = {"images": images, "annotations": [], "categories": categories}
            dt.createIndex()
        evaluator = COCOeval(gt, dt, "segm")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return [float(v) for v in evaluator.stats[:3]]


def _columns(truths: list[np.ndarray], found: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """The probe's per-image rows: detections in score order (stable), matched against the objects."""
    scores, matched = [], []
    for objects, (masks, score) in zip(truths, found, strict=True):
        order = np.argsort(-score, kind="stable")
        scores.append(score[order])
        matched.append(match_image(mask_iou(masks[order], objects)))
    return image_columns(scores, matched, [len(t) for t in truths])


def _ours(columns: dict[str, np.ndarray], weights: np.ndarray | None = None) -> list[float]:
    weights = np.ones((1, len(columns["num_objects"]))) if weights is None else weights
    return [float(resampled.evaluate(name, columns, weights)[0]) for name in ("mask_ap", "mask_ap:50", "mask_ap:75")]


# -- mask AP against pycocotools ---------------------------------------------------------------------------

def test_mask_iou_is_pixel_intersection_over_union_as_pycocotools_computes_it():
    rng = np.random.default_rng(0)
    a = np.array([_rectangle(rng) for _ in range(5)] + [np.zeros((SIZE, SIZE), bool)])
    b = np.array([_rectangle(rng) for _ in range(4)] + [a[0]])
    reference = mask_utils.iou([_rle(m) for m in a], [_rle(m) for m in b], [0] * len(b))
    np.testing.assert_allclose(mask_iou(a, b), reference, rtol=0, atol=1e-15)
    assert mask_iou(a[:1], a[:1])[0, 0] == 1.0 and mask_iou(a[-1:], a[-1:])[0, 0] == 0.0


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("lattice", [False, True])
def test_mask_ap_matches_pycocotools_segm(seed, lattice):
    truths, found = _scenario(seed, lattice)
    ours, reference = _ours(_columns(truths, found)), _pycocotools(truths, found)
    assert ours == pytest.approx(reference, abs=1e-12)
    assert 0.0 < ours[0] < 1.0


def test_mask_ap_matches_pycocotools_on_a_crowd_and_with_no_detection():
    rng = np.random.default_rng(7)
    spot = np.array([12, 12])
    crowd = np.array([_rectangle(rng, spot + rng.integers(-2, 3, 2)) for _ in range(12)])
    masks = np.array([_perturbed(rng, crowd[k], False) for k in rng.integers(0, 12, 20)])
    truths, found = [crowd], [(masks, rng.random(20))]
    assert _ours(_columns(truths, found)) == pytest.approx(_pycocotools(truths, found), abs=1e-12)
    nothing = [(np.zeros((0, SIZE, SIZE), bool), np.zeros(0))] * 2
    truths = [crowd, crowd[:3]]
    assert _ours(_columns(truths, nothing)) == _pycocotools(truths, nothing) == [0.0, 0.0, 0.0]


def test_the_objects_as_detections_score_one():
    truths, _ = _scenario(1)
    perfect = [(objects, np.linspace(1.0, 0.5, len(objects))) for objects in truths]
    assert _ours(_columns(truths, perfect)) == [1.0, 1.0, 1.0]


def test_mask_ap_by_hand():
    """Image 1: a stray mask (0.95) and an exact one (0.9); image 2: a mask covering 5 of its object's 8 pixels
    (IoU 0.625, a hit at IoU 0.5, 0.55 and 0.6 only, 0.8)."""
    first, second = np.zeros((1, 8, 8), bool), np.zeros((1, 8, 8), bool)
    first[0, :2, :2], second[0, 4:6, 4:8] = True, True
    stray = np.zeros((8, 8), bool)
    stray[7, 7] = True
    partial_mask = second[0].copy()
    partial_mask[5, 5:8] = False
    columns = _columns([first, second], [(np.array([stray, first[0]]), np.array([0.95, 0.9])),
                                         (partial_mask[None], np.array([0.8]))])
    hit = 2 / (3 + np.spacing(1))  # three detections, two true: precision 2/3 reached at recall 1
    half = 51 * 0.5 / 101  # precision 1/2 up to recall 1/2 (51 of 101 recall points), then nothing
    ap, ap50, ap75 = _ours(columns)
    assert ap50 == pytest.approx(hit, abs=1e-15) and ap75 == pytest.approx(half, abs=1e-15)
    assert ap == pytest.approx((3 * hit + 7 * half) / 10, abs=1e-15)


def test_cocos_matching_rules():
    # equal IoUs: the later object wins, leaving the first to the next detection
    assert match_image(np.array([[0.6, 0.6], [0.55, 0.0]]))[0].tolist() == [True, True]
    # matching is not monotone in the threshold: at 0.5 the first detection takes the object, from 0.65 the second
    matched = match_image(np.array([[0.6], [0.88]]))
    assert matched[:, 0].tolist() == [t <= 0.6 for t in IOU_THRESHOLDS]
    assert matched[:, 1].tolist() == [0.6 < t <= 0.88 for t in IOU_THRESHOLDS]
    assert matched_bits(matched).tolist() == [1 + 2 + 4, 8 + 16 + 32 + 64 + 128]
    assert match_image(np.array([[0.5, 0.75]]))[:, 0].sum() == 6  # thresholds are inclusive: 0.5 … 0.75
    assert match_image(np.zeros((2, 0))).shape == (10, 2)


def test_integer_row_weights_are_pycocotools_on_the_images_repeated():
    truths, found = _scenario(3)
    columns = _columns(truths, found)
    rng = np.random.default_rng(0)
    weights = np.vstack([rng.multinomial(len(truths), np.full(len(truths), 1 / len(truths))) for _ in range(3)])
    weights[0, :3] = [0, 2, 1]  # an image left out, one drawn twice
    got = np.stack([resampled.evaluate(name, columns, weights) for name in ("mask_ap", "mask_ap:50", "mask_ap:75")])
    for b, row in enumerate(weights):
        repeated = [i for i, count in enumerate(row) for _ in range(count)]  # each copy beside its original
        reference = _pycocotools([truths[i] for i in repeated], [found[i] for i in repeated])
        assert got[:, b] == pytest.approx(reference, abs=1e-12)


@pytest.mark.parametrize("seed", [3, 5, 8])
def test_row_weights_are_pycocotools_on_the_images_repeated_with_scores_tied_inside_an_image(seed):
    truths, found = _scenario(seed, lattice=True)  # three score values: ties inside images and between them
    columns = _columns(truths, found)
    rng = np.random.default_rng(seed)
    weights = np.vstack([rng.multinomial(len(truths), np.full(len(truths), 1 / len(truths))) for _ in range(3)])
    tied = [i for i, (_, score) in enumerate(found) if len(np.unique(score)) < len(score)]
    weights[0, tied] = 3  # every image with a tie inside it drawn three times
    got = np.stack([resampled.evaluate(name, columns, weights) for name in ("mask_ap", "mask_ap:50", "mask_ap:75")])
    for b, row in enumerate(weights):
        repeated = [i for i, count in enumerate(row) for _ in range(count)]  # each copy beside its original
        reference = _pycocotools([truths[i] for i in repeated], [found[i] for i in repeated])
        assert got[:, b] == pytest.approx(reference, abs=1e-12)
        literal = _columns([truths[i] for i in repeated], [found[i] for i in repeated])
        assert list(got[:, b]) == _ours(literal)  # the weighted count is the unweighted one on the copies, bit for bit
    assert tied, "the scenario must tie scores inside an image"


def test_the_statistic_refuses_fractional_weights():
    columns = _columns(*_scenario(0))
    with pytest.raises(ValueError, match="integer row weights"):
        mask_ap(columns, np.full((1, 10), 0.5))


def test_the_statistic_refuses_what_it_cannot_read():
    columns = _columns(*_scenario(0))
    with pytest.raises(ValueError, match="percentage"):
        resampled.evaluate("mask_ap:52", columns)
    broken = {k: v for k, v in columns.items() if k != "mask_matched_000"}
    with pytest.raises(ValueError, match="every slot"):
        mask_ap(broken, np.ones((1, 10)))
    empty = {"num_predicted": np.zeros(2), "num_objects": np.zeros(2)}
    assert np.isnan(mask_ap(empty, np.ones((1, 2)))).all()  # no object: no AP


# -- targets, loss and clustering --------------------------------------------------------------------------

def test_instances_are_renumbered_after_resampling():
    instance = np.zeros((8, 8), np.uint8)
    instance[:4, :4], instance[4:, 4:], instance[0, 7] = 7, 3, 9  # 9 is one pixel: gone at 4×4
    encoded, valid = encode_instances(instance, 4)
    assert valid.all() and encoded.dtype == np.int64
    assert encoded.tolist() == [[2, 2, 0, 0], [2, 2, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]  # 3 → 1, 7 → 2
    masks = instance_masks(encoded)
    assert masks.shape == (2, 4, 4) and masks[1, 0, 0] and masks[0, 3, 3]


def _reference_loss(embedding: torch.Tensor, ids: torch.Tensor, delta_v: float, delta_d: float) -> torch.Tensor:
    """De Brabandere et al.'s loss written per instance with loops, averaged over images with instances."""
    per_image = []
    for e, t in zip(embedding, ids, strict=True):
        labels = [int(k) for k in torch.unique(t) if k > 0]
        if not labels:
            continue
        means = [e[:, t == k].mean(dim=1) for k in labels]
        var = sum(((torch.linalg.norm(e[:, t == k] - mu[:, None], dim=0) - delta_v).clamp_min(0) ** 2).mean()
                  for k, mu in zip(labels, means, strict=True)) / len(labels)
        pairs = [(a, b) for a in range(len(labels)) for b in range(len(labels)) if a != b]
        dist = sum((2 * delta_d - torch.linalg.norm(means[a] - means[b])).clamp_min(0) ** 2 for a, b in pairs)
        dist = dist / len(pairs) if pairs else 0.0
        reg = sum(torch.linalg.norm(mu) for mu in means) / len(labels)
        per_image.append(var + dist + 0.001 * reg)
    return sum(per_image) / max(len(per_image), 1)


def test_the_discriminative_loss_matches_a_per_instance_transcription():
    rng = np.random.default_rng(0)
    ids = torch.from_numpy(rng.integers(0, 4, size=(3, 6, 6)))
    ids[1] = 0  # an image without instances adds nothing
    ids[2] = torch.where(ids[2] > 0, 2, 0)  # one instance: no push term
    embedding = torch.from_numpy(rng.normal(size=(3, 5, 6, 6)))
    got = discriminative_loss(embedding, ids, slots=4, delta_v=0.5, delta_d=1.5)
    assert float(got) == pytest.approx(float(_reference_loss(embedding, ids, 0.5, 1.5)), rel=1e-9)
    # every pixel on its instance's mean, the means more than 2δ_d apart: only the regulariser is left
    tight = torch.zeros(1, 2, 4, 4, dtype=torch.float64)
    two = torch.ones(1, 4, 4, dtype=torch.int64)
    two[0, :, 2:] = 2
    tight[0, 0][two[0] == 2] = 3.5
    loss = discriminative_loss(tight, two, slots=3, delta_v=0.5, delta_d=1.5)
    assert float(loss) == pytest.approx(0.001 * (np.sqrt(1e-8) + np.sqrt(3.5**2 + 1e-8)) / 2, rel=1e-12)


def test_the_loss_gives_finite_gradients_where_embeddings_coincide():
    logits = torch.zeros(1, 4, 5, 5, requires_grad=True)  # every pixel's embedding equal
    target = torch.from_numpy(np.repeat(np.array([[0, 1, 1, 2, 2]]), 5, axis=0))[None]
    value = instance_loss(logits, target, torch.ones(1, 5, 5, dtype=torch.bool), slots=3, delta_v=0.5, delta_d=1.5)
    value.backward()
    assert torch.isfinite(logits.grad).all() and float(value.detach()) > 0


def test_the_loss_trains_on_meta_without_reading_back():
    meta = torch.device("meta")
    torch.manual_seed(0)
    head = build_head("linear", [4], 1 + 3, [0.1, 0, 0, 0]).to(meta)
    optimiser = torch.optim.AdamW(head.parameters(), lr=0.01)
    target = torch.zeros(2, 12, 12, dtype=torch.int64)
    batch = Batch([], torch.zeros(2, 4, 6, 6), target, torch.ones(2, 12, 12, dtype=torch.bool))
    loss = partial(instance_loss, slots=4, delta_v=0.5, delta_d=1.5)
    value = train_step(head, optimiser, batch.to(meta), loss, size=12)
    assert value.device == meta and value.shape == ()


def test_greedy_clusters_recover_instances_the_loss_has_separated():
    rng = np.random.default_rng(2)
    ids = np.zeros((12, 12), np.int64)
    ids[1:5, 1:6], ids[6:11, 2:5], ids[7:10, 7:11] = 1, 2, 3
    centres = np.array([[0.0, 0.0], [3.1, 0.0], [0.0, 3.1], [3.1, 3.1]])  # means 2δ_d = 3 apart, and more
    embedding = centres[ids].transpose(2, 0, 1) + rng.uniform(-0.3, 0.3, size=(2, 12, 12))  # within δ_v
    probability = np.where(ids > 0, rng.uniform(0.6, 1.0, ids.shape), rng.uniform(0.0, 0.4, ids.shape))
    found = greedy_clusters(probability, embedding, foreground_threshold=0.5, radius=1.5, min_area=1,
                            max_detections=20)
    assert sorted(map(tuple, found.masks.reshape(3, -1).astype(int).tolist())) == sorted(
        map(tuple, instance_masks(ids).reshape(3, -1).astype(int).tolist()))
    assert np.all(np.diff(found.scores) <= 0)
    assert [probability[m].mean() for m in found.masks] == pytest.approx(found.scores.tolist(), abs=1e-15)
    capped = greedy_clusters(probability, embedding, foreground_threshold=0.5, radius=1.5, min_area=13,
                             max_detections=1)
    assert len(capped.masks) == 1 and capped.masks[0].sum() >= 13  # the 12-pixel instance is dropped, then one kept
    none = greedy_clusters(probability * 0.1, embedding, foreground_threshold=0.5, radius=1.5, min_area=1,
                           max_detections=20)
    assert none.masks.shape == (0, 12, 12) and none.scores.shape == (0,)


# -- the probe end to end ----------------------------------------------------------------------------------

PARAMS = {"head": "linear", "train_split": "train", "eval_split": "val", "target_size": 16, "epochs": 40,
          "lr": 0.03, "weight_decay": 0.0, "batch_size": 8, "embedding_dim": 8, "delta_v": 0.5, "delta_d": 1.5,
          "foreground_threshold": 0.5, "min_area": 2, "max_detections": 20}


def _instances(tmp_path, n_train: int = 48, n_val: int = 8):
    """16-px instance maps of 2–3 non-overlapping objects made of whole 2×2-pixel cells (an 8×8 feature grid)."""
    rng = np.random.default_rng(0)
    items, entries, maps = [], {}, {}
    with paths.workspace(tmp_path):
        prepared = paths.dataset_dir("tiny_instances")
        for index in range(n_train + n_val):
            split = "train" if index < n_train else "val"
            cells = np.zeros((8, 8), np.uint8)
            for k in range(1, int(rng.integers(2, 4)) + 1):
                for _ in range(20):  # a free 2×2 to 3×3 block of cells
                    r, c = rng.integers(0, 6, 2)
                    h, w = rng.integers(2, 4, 2)
                    if not cells[r:r + h, c:c + w].any():
                        cells[r:r + h, c:c + w] = k
                        break
            instance = np.kron(cells, np.ones((2, 2), np.uint8))
            path = f"{split}/{index:04d}"
            items.append(Item(path, f"h{index}", split))
            entries[path] = {"instance": save_npy(prepared, f"{path}/instance.npy", instance)}
            maps[path] = cells
        manifest = Manifest("tiny_instances", str(prepared), items, [], {"source": "test"}, {"targets": entries})
    return manifest, maps


@pytest.mark.parametrize("carried", ["instances", "foreground", "nothing"])
def test_the_probe_segments_features_that_carry_instances(tmp_path, monkeypatch, carried):
    """Features with an objectness channel and a colour per object (six colours, distinct within an image) are
    segmented; with objectness alone the foreground is found but no object is told from its neighbour (the head
    spreads noise apart and the masks fragment); noise gives nothing."""
    manifest, maps = _instances(tmp_path)
    rng = np.random.default_rng(5)
    colours = {path: rng.permutation(6) for path in maps}

    def features(item):
        cells = maps[item.path]
        values = rng.normal(scale=0.1, size=(7, 8, 8))
        if carried != "nothing":
            values[0] += cells > 0
        if carried == "instances":
            for k in range(1, int(cells.max()) + 1):
                values[1 + colours[item.path][k - 1]] += cells == k
        return values.astype(np.float32)

    spec = get_probe("instance_segmentation")
    monkeypatch.chdir(tmp_path)
    with paths.workspace(tmp_path):
        result = spec.run(ProbeInputs(manifest, features, validate_probe_params(spec.name, PARAMS), seed=0))
    check_result(spec, result)  # the metrics are the statistics of the auxiliary columns, as probe_run checks
    assert result.unit == "image" and result.sample_ids == [f"val/{i:04d}" for i in range(48, 56)]
    assert set(result.samples) == {"num_predicted", "foreground_iou"}
    assert set(result.statistics) == {"mask_ap", "mask_ap50", "mask_ap75"}
    assert {"mask_ap", "mask_ap50", "mask_ap75", "num_predicted", "foreground_iou", "train_loss"} == set(
        result.metrics)
    objects = result.auxiliary["num_objects"]
    assert objects.tolist() == [len(np.unique(maps[i])) - 1 for i in result.sample_ids]
    if carried == "instances":
        assert result.metrics["mask_ap50"] > 0.9 and result.metrics["mask_ap"] > 0.8
        assert result.metrics["foreground_iou"] > 0.9
        assert np.abs(result.samples["num_predicted"] - objects).mean() < 0.5
    elif carried == "foreground":
        assert result.metrics["foreground_iou"] > 0.9 and result.metrics["mask_ap50"] < 0.2
    else:
        assert result.metrics["foreground_iou"] < 0.5 and result.metrics["mask_ap50"] < 0.2


def test_the_probe_on_scenes_is_deterministic(scenes, fake_dense_features):
    spec = get_probe("instance_segmentation")
    params = validate_probe_params(spec.name, {**PARAMS, "epochs": 2, "target_size": 32})
    result = spec.run(ProbeInputs(scenes, fake_dense_features(scenes), params, seed=0))
    check_result(spec, result)
    assert result.sample_ids == sorted(item.path for item in scenes.split("val"))
    assert all(0.0 <= result.metrics[k] <= 1.0 for k in ("mask_ap", "mask_ap50", "mask_ap75", "foreground_iou"))
    again = spec.run(ProbeInputs(scenes, fake_dense_features(scenes), params, seed=0))
    assert again.metrics == result.metrics  # seeded, one thread: a re-run reproduces exactly


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_probe_trains_on_cuda_with_deterministic_kernels(scenes, fake_dense_features):
    """On a GPU the runs set torch's deterministic algorithms with `warn_only` (harness.core.devices): a kernel
    without a deterministic implementation (multi-dimensional scatter_add, which the loss avoids) would only warn,
    so a warning saying so fails here, and two runs give the same numbers."""
    from harness.core.devices import set_deterministic

    spec = get_probe("instance_segmentation")
    params = validate_probe_params(spec.name, {**PARAMS, "epochs": 2, "target_size": 32})
    enabled = torch.are_deterministic_algorithms_enabled()
    set_deterministic(torch.device("cuda:0"))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            runs = [spec.run(ProbeInputs(scenes, fake_dense_features(scenes), params, seed=0, device="cuda:0"))
                    for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(enabled)
    assert not [w for w in caught if "deterministic" in str(w.message)]
    assert runs[0].metrics == runs[1].metrics
    cpu = spec.run(ProbeInputs(scenes, fake_dense_features(scenes), params, seed=0))
    assert runs[0].metrics["train_loss"] == pytest.approx(cpu.metrics["train_loss"], rel=1e-3)


def test_the_probe_declares_its_protocol():
    spec = get_probe("instance_segmentation")
    assert (spec.protocol, spec.level, spec.headline, spec.feature_mode, spec.fit, spec.uses_device) == (
        "instance-embedding/v1", "mid", "mask_ap", "dense", "squash", True)
    assert dict(spec.statistics) == {"mask_ap": "mask_ap", "mask_ap50": "mask_ap", "mask_ap75": "mask_ap"}
    assert spec.higher_is_better({"mask_ap": 0.5, "train_loss": 1.0}) == {"mask_ap": True, "train_loss": False}
    with pytest.raises(ValueError, match="delta_d must exceed"):
        validate_probe_params(spec.name, {**PARAMS, "delta_d": 1.0})
    with pytest.raises(ValueError, match="max_detections"):
        validate_probe_params(spec.name, {**PARAMS, "max_detections": 101})
    with pytest.raises(ValueError, match="missing key 'delta_v'"):
        validate_probe_params(spec.name, {k: v for k, v in PARAMS.items() if k != "delta_v"})
