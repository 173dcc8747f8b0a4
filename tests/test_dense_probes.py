"""Dense probes against independent references: sklearn's confusion matrix and Jaccard, scipy's Pearson,
numpy re-derivations of the depth and normal metrics; heads, streaming, training determinism; and an
end-to-end run on a tiny procedural-scenes dataset with fake dense features."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from scipy.stats import pearsonr
from sklearn.metrics import confusion_matrix as sk_confusion_matrix
from sklearn.metrics import jaccard_score

from harness.datasets.manifest import Item, Manifest
from harness.probes import PROBES, ProbeInputs, get_probe, resampled
from harness.probes.dense import metrics as M
from harness.probes.dense.heads import DPTHead, LinearHead, build_head, split_layers
from harness.probes.dense.streaming import DenseStream
from harness.probes.dense.targets import encode_depth, encode_occlusion_log1p, load_target, nearest
from harness.probes.dense.train import train_head
from harness.probes.statistics import dense as S
from harness.runs.probe_run import check_result

RNG = np.random.default_rng(0)


# -- metrics vs independent references ------------------------------------------------------------------

def test_depth_metrics_match_numpy_reference():
    gt = RNG.uniform(0.5, 10.0, size=(4, 12, 12))
    pred = gt * RNG.uniform(0.6, 1.6, size=gt.shape)
    valid = RNG.random(gt.shape) > 0.3
    got = M.depth_per_image(pred, gt, valid)
    for i in range(4):
        p, g = pred[i][valid[i]], gt[i][valid[i]]
        thresh = np.maximum(p / g, g / p)
        assert got["delta1"][i] == pytest.approx(np.sum(thresh < 1.25) / p.size, abs=1e-12)
        assert got["delta2"][i] == pytest.approx(np.sum(thresh < 1.25 ** 2) / p.size, abs=1e-12)
        assert got["delta3"][i] == pytest.approx(np.sum(thresh < 1.25 ** 3) / p.size, abs=1e-12)
        assert got["abs_rel"][i] == pytest.approx(np.sum(np.abs(p - g) / g) / p.size, rel=1e-12)
        assert got["rmse"][i] == pytest.approx(np.sqrt(np.sum((p - g) ** 2) / p.size), rel=1e-12)
    empty = M.depth_per_image(pred[:1], gt[:1], np.zeros_like(valid[:1]))
    assert all(np.isnan(v[0]) for v in empty.values())


def test_normal_metrics_match_arccos_reference():
    gt = RNG.normal(size=(3, 3, 10, 10))
    pred = gt + 0.5 * RNG.normal(size=gt.shape)
    valid = RNG.random((3, 10, 10)) > 0.2
    got = M.normals_per_image(pred, gt, valid)
    for i in range(3):
        p = pred[i].transpose(1, 2, 0)[valid[i]]
        g = gt[i].transpose(1, 2, 0)[valid[i]]
        p = p / np.linalg.norm(p, axis=1, keepdims=True)
        g = g / np.linalg.norm(g, axis=1, keepdims=True)
        error = np.degrees(np.arccos(np.clip((p * g).sum(axis=1), -1, 1)))
        assert got["mean_error"][i] == pytest.approx(error.mean(), rel=1e-10)
        assert got["median_error"][i] == pytest.approx(np.median(error), rel=1e-10)
        for t in (11.25, 22.5, 30.0):
            assert got[f"within_{t}"][i] == pytest.approx((error < t).mean(), abs=1e-12)


def test_binary_iou_matches_sklearn_jaccard():
    gt = RNG.random((5, 9, 9)) > 0.6
    pred = RNG.random((5, 9, 9)) > 0.5
    got = M.binary_per_image(pred, gt)
    for i in range(5):
        assert got["iou"][i] == pytest.approx(jaccard_score(gt[i].ravel(), pred[i].ravel()), abs=1e-12)
        assert got["foreground_fraction"][i] == gt[i].mean()
        assert got["baseline_iou"][i] == 0.0  # every image has foreground
    inter, union = M.binary_counts(pred, gt)
    assert inter / union == pytest.approx(jaccard_score(gt.ravel(), pred.ravel()), abs=1e-12)
    empty = np.zeros((1, 4, 4), dtype=bool)
    assert M.binary_per_image(empty, empty)["iou"][0] == 1.0
    assert M.binary_per_image(empty, empty)["baseline_iou"][0] == 1.0


def test_semantic_metrics_match_sklearn():
    k = 6
    gt = RNG.integers(0, 4, size=(4, 8, 8))  # classes 4 and 5 never in the ground truth
    pred = np.where(RNG.random(gt.shape) < 0.6, gt, RNG.integers(0, 5, size=gt.shape))  # 5 never predicted
    matrix = M.confusion_matrix(pred, gt, k)
    reference = sk_confusion_matrix(gt.ravel(), pred.ravel(), labels=np.arange(k))
    np.testing.assert_array_equal(matrix, reference)
    summary = M.semantic_summary(matrix)
    present = np.unique(np.concatenate([gt.ravel(), pred.ravel()]))  # class 5 excluded
    assert 5 not in present
    assert summary["miou"] == pytest.approx(
        jaccard_score(gt.ravel(), pred.ravel(), labels=present, average="macro"), abs=1e-12)
    assert summary["pixel_acc"] == pytest.approx((gt == pred).mean(), abs=1e-12)
    recalls = [np.mean(pred[gt == c] == c) for c in np.unique(gt)]
    assert summary["mean_acc"] == pytest.approx(np.mean(recalls), abs=1e-12)
    per_image = M.semantic_per_image(pred, gt, k)
    for i in range(4):
        labels = np.unique(np.concatenate([gt[i].ravel(), pred[i].ravel()]))
        expected = jaccard_score(gt[i].ravel(), pred[i].ravel(), labels=labels, average="macro")
        assert per_image["miou_per_image"][i] == pytest.approx(expected, abs=1e-12)
    assert per_image["pixel_acc"].mean() == pytest.approx(summary["pixel_acc"], abs=1e-12)


def test_regression_metrics_match_scipy():
    gt = RNG.random((6, 7, 7))
    pred = 3.0 + 0.5 * gt + 0.3 * RNG.random(gt.shape)
    pearson = M.PearsonAccumulator()
    for start in range(0, 6, 4):  # in batches, as the probe streams them
        pearson.update(pred[start: start + 4], gt[start: start + 4])
    assert pearson.value() == pytest.approx(pearsonr(pred.ravel(), gt.ravel()).statistic, abs=1e-10)
    got = M.regression_per_image(pred, gt)
    for i in range(6):
        assert got["rmse"][i] == pytest.approx(np.sqrt(np.mean((pred[i] - gt[i]) ** 2)), rel=1e-12)
        assert got["mae"][i] == pytest.approx(np.mean(np.abs(pred[i] - gt[i])), rel=1e-12)
    constant = M.PearsonAccumulator()
    constant.update(np.ones(10), np.arange(10.0))
    assert constant.value() == 0.0


def _repeated(columns: dict[str, np.ndarray], counts: np.ndarray) -> dict[str, np.ndarray]:
    """The rows drawn `counts` times each, literally: what integer bootstrap weights stand for."""
    return {name: np.repeat(column, counts) for name, column in columns.items()}


def test_semantic_statistics_are_the_pooled_confusion_matrix_on_the_run_and_on_resamples():
    k = 6
    gt = RNG.integers(0, 4, size=(7, 8, 8))  # classes 4 and 5 never in the ground truth: excluded from mIoU
    pred = np.where(RNG.random(gt.shape) < 0.6, gt, RNG.integers(0, 5, size=gt.shape))
    valid = RNG.random(gt.shape) > 0.2  # VOC's ignore label: pixels no metric reads
    valid[3] = False  # an image with no valid pixel
    columns = S.class_count_columns(M.confusion_matrices(pred, gt, k, valid))
    assert len(columns) == 3 * k
    summary = M.semantic_summary(M.confusion_matrix(pred[valid], gt[valid], k))
    for metric, statistic in S.SEMANTIC_STATISTICS.items():
        assert resampled.evaluate(statistic, columns)[0] == summary[metric]  # the same bits
    weights = RNG.multinomial(len(gt), np.full(len(gt), 1 / len(gt)), size=5)
    weights[0] = [0, 2, 0, 3, 1, 0, 1]
    for b, counts in enumerate(weights):
        drawn = np.repeat(np.arange(len(gt)), counts)
        expected = M.semantic_summary(M.confusion_matrix(pred[drawn][valid[drawn]], gt[drawn][valid[drawn]], k))
        for metric, statistic in S.SEMANTIC_STATISTICS.items():
            assert resampled.evaluate(statistic, columns, weights)[b] == expected[metric]
            assert resampled.evaluate(statistic, _repeated(columns, counts))[0] == expected[metric]
    nothing = S.class_count_columns(M.confusion_matrices(pred, gt, k, np.zeros_like(valid)))
    assert resampled.evaluate("semantic_miou", nothing)[0] == M.miou_from_confusion(np.zeros((k, k), dtype=int))
    with pytest.raises(ValueError, match="class_inter"):
        resampled.evaluate("semantic_miou", {n: c for n, c in columns.items() if n != "class_pred_002"})


def test_pooled_pearson_is_scipys_on_the_run_and_on_resamples():
    gt = RNG.random((9, 7, 7)) + 1e4  # a large common offset: the centred sums keep the digits
    pred = 3.0 + 0.5 * gt + 0.3 * RNG.random(gt.shape) + np.arange(9)[:, None, None] * 0.01
    columns = S.pearson_columns(pred, gt)
    accumulator = M.PearsonAccumulator()
    accumulator.update(pred, gt)
    assert resampled.evaluate("pooled_pearson", columns)[0] == pytest.approx(accumulator.value(), abs=1e-12)
    weights = RNG.multinomial(len(gt), np.full(len(gt), 1 / len(gt)), size=4)
    weights[0] = [0, 3, 0, 0, 2, 1, 0, 2, 1]
    got = resampled.evaluate("pooled_pearson", columns, weights)
    for b, counts in enumerate(weights):
        drawn = np.repeat(np.arange(len(gt)), counts)
        expected = pearsonr(pred[drawn].ravel(), gt[drawn].ravel()).statistic
        assert got[b] == pytest.approx(expected, abs=1e-10)
        assert got[b] == pytest.approx(resampled.evaluate("pooled_pearson", _repeated(columns, counts))[0], abs=1e-12)
    flat = S.pearson_columns(np.ones((3, 4, 4)), RNG.random((3, 4, 4)))
    assert resampled.evaluate("pooled_pearson", flat)[0] == 0.0  # a constant side, as the accumulator
    with pytest.raises(ValueError, match="pearson_sxy"):
        resampled.evaluate("pooled_pearson", {n: c for n, c in columns.items() if n != "pearson_sxy"})


# -- targets --------------------------------------------------------------------------------------------

def test_palette_png_is_read_as_raw_indices(tmp_path):
    labels = np.arange(16, dtype=np.uint8).reshape(4, 4) % 5
    image = Image.fromarray(labels).convert("P")
    image.putpalette([255 - v for v in range(256) for _ in range(3)])  # index i shows grey 255 - i
    image.save(tmp_path / "semantic.png")
    assert Image.open(tmp_path / "semantic.png").mode == "P"
    item = Item("rgb.png", "0" * 64, "val")
    manifest = Manifest("m", str(tmp_path), [item],
                        extra={"targets": {"rgb.png": {"semantic": {"path": "semantic.png", "sha256": ""}}}})
    np.testing.assert_array_equal(load_target(manifest, item, "semantic"), labels)


def test_target_encodings():
    depth = np.zeros((8, 8), dtype=np.float32)
    depth[:4, :4] = 2.0  # one quarter valid
    depth[0, 0] = 0.0
    encoded, valid = encode_depth(depth, 2)
    assert valid.tolist() == [[True, False], [False, False]]
    assert encoded[0, 0] == 2.0  # invalid zeros do not drag the mean down
    labels = np.arange(64).reshape(8, 8)
    np.testing.assert_array_equal(nearest(labels, 4), labels[1::2, 1::2])
    edges = np.zeros((8, 8), dtype=np.uint8)
    edges[1, 1] = 1  # a single edge pixel survives max-pooling
    occlusion, _ = encode_occlusion_log1p(edges, 4)
    assert occlusion[0, 0] == pytest.approx(np.log(2.0)) and occlusion.sum() == pytest.approx(np.log(2.0))


# -- heads, streaming, training -------------------------------------------------------------------------

def test_head_output_shapes():
    single = [torch.randn(2, 16, 8, 8)]
    multi = [torch.randn(2, 16, 8, 8), torch.randn(2, 24, 4, 4)]
    for kind in ("linear", "dpt"):
        assert build_head(kind, [16], 5)(single, 56).shape == (2, 5, 56, 56)
        assert build_head(kind, [16, 24], 3)(multi, 32).shape == (2, 3, 32, 32)
    dense = torch.randn(2, 40, 8, 8)
    parts = split_layers(dense, [16, 24])
    assert [p.shape[1] for p in parts] == [16, 24] and torch.equal(torch.cat(parts, 1), dense)
    assert split_layers(dense) == [dense]
    with pytest.raises(ValueError):
        split_layers(dense, [16, 16])
    assert isinstance(build_head("linear", [4], 1), LinearHead) and isinstance(build_head("dpt", [4], 1), DPTHead)


def _items(n: int) -> list[Item]:
    return [Item(f"img_{i:04d}.png", f"{i:064d}", "train") for i in range(n)]


def test_stream_yields_every_item_once_per_epoch_in_bounded_batches():
    items = _items(23)
    calls = []

    def features(item):
        calls.append(item.path)
        return np.full((2, 3, 3), int(item.path[4:8]), dtype=np.float32)

    stream = DenseStream(items, features, batch_size=5, load_target=lambda item: (np.zeros((4, 4)), np.ones((4, 4))))
    orders = []
    for epoch in range(3):
        seen = []
        for batch in stream.batches(shuffle=True, seed=1, epoch=epoch):
            assert len(batch.items) <= 5 and batch.features.shape[0] == len(batch.items) == batch.target.shape[0]
            assert batch.features[:, 0, 0, 0].tolist() == [int(i.path[4:8]) for i in batch.items]
            seen += [i.path for i in batch.items]
        assert sorted(seen) == sorted(i.path for i in items)
        orders.append(seen)
    assert orders[0] != orders[1]  # reshuffled per epoch
    assert [i.path for b in stream.batches(shuffle=True, seed=1, epoch=0) for i in b.items] == orders[0]
    assert len(calls) == 4 * 23  # read lazily, once per item per pass


def _synthetic_task():
    """Targets are a fixed linear function of the features: learnable by a 1×1 conv."""
    rng = np.random.default_rng(3)
    table = {i.path: rng.normal(size=(4, 6, 6)).astype(np.float32) for i in _items(24)}
    weights = np.array([1.0, -2.0, 0.5, 0.0], dtype=np.float32)

    def target(item):
        upsampled = torch.nn.functional.interpolate(torch.from_numpy(table[item.path])[None], size=(12, 12),
                                                    mode="bilinear", align_corners=False)[0].numpy()
        return np.tensordot(weights, upsampled, axes=1).astype(np.float32), np.ones((12, 12), dtype=bool)

    stream = DenseStream(_items(24), lambda item: table[item.path], batch_size=8, load_target=target)

    def loss(logits, t, v):
        return torch.nn.functional.mse_loss(logits[:, 0], t)

    return stream, loss


def test_training_decreases_loss_and_is_deterministic_across_threads():
    stream, loss = _synthetic_task()

    def fit(epochs, threads):
        previous = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return train_head(lambda: LinearHead([4], 1), stream, loss, size=12, epochs=epochs, lr=0.05,
                              weight_decay=0.0, seed=7)
        finally:
            torch.set_num_threads(previous)

    short, long = fit(1, 1), fit(30, 1)
    assert long.train_loss < 0.05 * short.train_loss
    again = fit(30, 2)
    assert again.train_loss == long.train_loss
    for a, b in zip(long.head.state_dict().values(), again.head.state_dict().values(), strict=True):
        assert torch.equal(a, b)


# -- end to end on procedural scenes --------------------------------------------------------------------

PARAMS = {"train_split": "train", "eval_split": "val", "epochs": 3, "lr": 0.01, "weight_decay": 0.0,
          "batch_size": 2, "head": "linear", "target_size": 16}  # several eval batches


@pytest.mark.parametrize(("task", "head"), [("depth", "linear"), ("semantic_segmentation", "linear"),
                                            ("depth", "dpt"), ("surface_normal", "linear"),
                                            ("generic_segmentation", "linear"), ("edge", "linear"),
                                            ("keypoints2d", "linear"), ("occlusion_edge", "dpt")])
def test_dense_probe_end_to_end(scenes, fake_dense_features, task, head):
    spec = get_probe(task)
    inputs = ProbeInputs(scenes, fake_dense_features(scenes), {**PARAMS, "head": head}, seed=0)
    result = spec.run(inputs)
    assert result.unit == "image"
    assert result.sample_ids == [i.path for i in scenes.split("val")]
    assert spec.headline in result.metrics and "train_loss" in result.metrics
    assert all(np.isfinite(v) for v in result.metrics.values())
    assert "train_loss" not in result.samples
    for name, column in result.samples.items():
        assert column.shape == (3,) and column.dtype == np.float64
        assert np.isclose(column.mean(), result.metrics[name], rtol=0, atol=1e-12), name
    if task == "semantic_segmentation":
        assert {"miou", "pixel_acc", "mean_acc", "miou_per_image"} <= set(result.metrics)
        assert "miou" not in result.samples
    # a pooled headline is a resampled statistic of the run's auxiliary rows, so its board gets intervals
    assert spec.headline in result.samples or spec.headline in result.statistics
    assert result.statistics.keys() == spec.statistics.keys()
    check_result(spec, result)
    if task == "keypoints2d":  # the seed's names (issue 49): keypoints found, matched and pooled
        assert {"recall@1px", "recall@10px", "auc@5px", "detections_per_image", "num_matches"} <= set(result.metrics)
    if task in ("edge", "occlusion_edge"):
        assert result.metrics["edge_correlation"] == result.metrics["pearson"]
    if task == "semantic_segmentation":  # the pooled confusion matrix, recounted from the predictions
        assert result.metrics["miou"] == resampled.evaluate("semantic_miou", result.auxiliary)[0]
    again = spec.run(ProbeInputs(scenes, fake_dense_features(scenes), {**PARAMS, "head": head}, seed=0))
    assert again.metrics == result.metrics  # seeded: a re-run reproduces exactly


def test_dense_specs():
    levels = {"depth": "mid", "surface_normal": "mid", "generic_segmentation": "mid", "occlusion_edge": "mid",
              "semantic_segmentation": "high", "edge": "low", "keypoints2d": "low"}
    for name, level in levels.items():
        spec = PROBES.get(name)()
        # v3: surface normals' uncertainty-aware loss (harness.probes.dense.normals)
        version = "/v3" if name == "surface_normal" else "/v2"
        assert spec.level == level and spec.feature_mode == "dense" and spec.protocol.endswith(version)
        assert "train_loss" in spec.lower_is_better and spec.headline not in spec.lower_is_better


def test_semantic_per_image_skips_invalid_pixels():
    rng = np.random.default_rng(1)
    pred, gt = rng.integers(0, 3, (2, 6, 6)), rng.integers(0, 3, (2, 6, 6))
    valid = rng.random((2, 6, 6)) > 0.3
    scores = M.semantic_per_image(pred, gt, 3, valid)
    for i in range(2):
        expected = np.mean(pred[i][valid[i]] == gt[i][valid[i]])
        assert scores["pixel_acc"][i] == pytest.approx(expected)


def test_heads_start_at_the_training_prior(scenes, fake_dense_features):
    """The output bias is the training split's prior: mean log-depth for depth, log class frequency for
    semantics. A zero-weight head therefore predicts exactly the prior."""
    from harness.probes.dense import probes as dense
    from harness.probes.dense.streaming import DenseStream

    def load(task, name):
        return lambda item: task.encode(dense.T.load_target(scenes, item, name), 16)

    train = scenes.split("train")
    depth = DenseStream(train, fake_dense_features(scenes), 4, load(dense.DEPTH, "depth"))
    bias = dense._prior_bias(dense.DEPTH, depth, 1)
    logs = [np.log(t[v]) for t, v in (load(dense.DEPTH, "depth")(i) for i in train)]
    assert bias[0] == pytest.approx(np.concatenate(logs).mean(), rel=1e-5)
    semantic = DenseStream(train, fake_dense_features(scenes), 4, load(dense.SEMANTIC, "semantic"))
    k = len(scenes.classes)
    bias = dense._prior_bias(dense.SEMANTIC, semantic, k)
    counts = np.bincount(np.concatenate([t.ravel() for t, _ in (load(dense.SEMANTIC, "semantic")(i) for i in train)]),
                         minlength=k)
    assert np.allclose(np.exp(bias), (counts + 1) / (counts.sum() + k), rtol=1e-5)
    head = build_head("linear", [16], k, bias)
    torch.nn.init.zeros_(head.output_layer.weight)
    logits = head([torch.randn(1, 16, 8, 8)], 16)
    assert torch.allclose(logits[0, :, 0, 0], torch.from_numpy(bias))


def test_edge_task_reads_the_target_each_dataset_has(scenes):
    from harness.probes.dense import probes as dense

    assert dense._target_name(dense.EDGE, scenes) == "texture_edges"
    bsds_like = Manifest("b", "/x", scenes.items[:1], extra={"targets": {scenes.items[0].path: {"edge": {}}}})
    assert dense._target_name(dense.EDGE, bsds_like) == "edge"
    with pytest.raises(KeyError, match="has no 'foreground' target; it has: edge"):
        dense._target_name(dense.GENERIC, bsds_like)
