"""Resampled statistics (`harness.probes.resampled`, `harness.probes.statistics`): macro-F1 against scikit-learn,
BSDS's ODS/OIS/AP against `boundary.metrics.summarise` on the run and on resamples, and the checks a run's
auxiliary columns pass."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score

from harness.probes import get_probe, resampled
from harness.probes.base import ProbeResult
from harness.probes.boundary import matching, metrics
from harness.probes.boundary.probe import EDGE_BSDS_PROBE
from harness.probes.classification import CLASSIFICATION
from harness.probes.statistics.boundary import count_columns, counts_of
from harness.probes.statistics.classification import macro_f1_name
from harness.runs.probe_run import check_result


def _random_counts(images: int, thresholds: int, rng: np.random.Generator) -> np.ndarray:
    """Plausible BSDS counts: recall and predicted pixels falling as the threshold rises."""
    sum_r = rng.integers(50, 400, size=(images, 1)).repeat(thresholds, axis=1)
    sum_p = np.sort(rng.integers(0, 900, size=(images, thresholds)), axis=1)[:, ::-1]
    cnt_p = (sum_p * rng.uniform(0.2, 1.0, size=(images, thresholds))).astype(int)
    cnt_r = np.minimum(sum_r, cnt_p * rng.uniform(0.5, 1.5, size=(images, thresholds))).astype(int)
    return np.stack([cnt_r, sum_r, cnt_p, sum_p], axis=-1).astype(float)


def _weights(index: np.ndarray, n: int) -> np.ndarray:
    return np.stack([np.bincount(row, minlength=n) for row in index]).astype(np.float64)


def test_macro_f1_is_sklearns_on_the_run_and_on_every_resample():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 7, size=60)
    predicted = np.where(rng.random(60) < 0.6, labels, rng.integers(0, 7, size=60))
    predicted[predicted == 6] = 5  # a class present but never predicted
    columns = {"label": labels.astype(float), "predicted": predicted.astype(float)}
    name = macro_f1_name(8)  # a class of the dataset that is neither present nor predicted counts 0
    assert resampled.evaluate(name, columns)[0] == pytest.approx(
        f1_score(labels, predicted, average="macro", labels=range(8), zero_division=0), abs=1e-15)
    index = rng.integers(0, 60, size=(25, 60))
    got = resampled.evaluate(name, columns, _weights(index, 60))
    want = [f1_score(labels[i], predicted[i], average="macro", labels=range(8), zero_division=0) for i in index]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


def test_bsds_statistics_equal_summarise_on_the_run_and_on_resamples():
    rng = np.random.default_rng(3)
    thresholds = matching.bsds_thresholds(15)
    counts = _random_counts(12, 15, rng)
    columns = count_columns(counts)
    assert len(columns) == 60 and "cnt_r_000" in columns and "sum_p_014" in columns
    np.testing.assert_array_equal(counts_of(columns), counts)
    full, _ = metrics.summarise(thresholds, counts)
    for metric, statistic in (("ods_f", "bsds_ods_f"), ("ois_f", "bsds_ois_f"), ("ap", "bsds_ap")):
        assert resampled.evaluate(statistic, columns)[0] == full[metric]  # the same bits
    index = rng.integers(0, 12, size=(300, 12))  # more than one chunk of best_f_batch
    weights = _weights(index, 12)
    for metric, statistic in (("ods_f", "bsds_ods_f"), ("ois_f", "bsds_ois_f"), ("ap", "bsds_ap")):
        got = resampled.evaluate(statistic, columns, weights)
        want = [metrics.summarise(thresholds, counts[i])[0][metric] for i in index]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


def test_best_f_batch_gives_each_curve_the_bits_best_f_gives_it_alone():
    rng = np.random.default_rng(4)
    thresholds = matching.bsds_thresholds(9)
    curves = [metrics.recall_precision(c) for c in _random_counts(40, 9, rng)]
    recall, precision = np.stack([r for r, _ in curves]), np.stack([p for _, p in curves])
    batch = metrics.best_f_batch(recall, precision)
    for i, (r, p) in enumerate(curves):
        alone = metrics.best_f(thresholds, r, p)
        assert (alone.f, alone.recall, alone.precision, alone.segment, alone.weight) == (
            batch.f[i], batch.recall[i], batch.precision[i], batch.segment[i], batch.weight[i])


def _exhaustive_best_f(recall, precision):
    """maxF over every segment's 100 points, no pruning: the first strictly better point in loop order."""
    steps = np.linspace(0.0, 1.0, 100)
    best = (metrics.f_measure(recall[0], precision[0]), recall[0], precision[0], 0, 0)
    for j in range(1, len(recall)):
        r = recall[j] * steps + recall[j - 1] * (1 - steps)
        p = precision[j] * steps + precision[j - 1] * (1 - steps)
        f = metrics.f_measure(r, p)
        k = int(np.argmax(f))
        if f[k] > best[0]:
            best = (f[k], r[k], p[k], j, k)
    return best


@pytest.mark.parametrize("shape", ["random", "monotone", "flat"])
def test_best_f_batch_skips_only_segments_that_cannot_hold_the_maximum(shape):
    """The bound-pruned search returns, bit for bit, what sampling every segment returns (ties included: a flat
    curve's maximum is its first point, a plateau's first sample)."""
    rng = np.random.default_rng(9)
    if shape == "random":
        curves = [metrics.recall_precision(c) for c in _random_counts(300, 12, rng)]
        recall, precision = np.stack([r for r, _ in curves]), np.stack([p for _, p in curves])
    elif shape == "monotone":  # a real P/R curve: recall falls and precision rises with the threshold
        recall = np.sort(rng.uniform(0, 1, (300, 99)), axis=1)[:, ::-1]
        precision = np.sort(rng.uniform(0, 1, (300, 99)), axis=1)
    else:
        recall, precision = np.full((5, 20), 0.5), np.full((5, 20), 0.25)
    batch = metrics.best_f_batch(recall, precision)
    for i in range(len(recall)):
        f, r, p, segment, step = _exhaustive_best_f(recall[i], precision[i])
        assert (batch.f[i], batch.recall[i], batch.precision[i], batch.segment[i], batch.step[i]) == (
            f, r, p, segment, step)


def test_counts_of_refuses_a_missing_threshold():
    columns = count_columns(_random_counts(3, 4, np.random.default_rng(1)))
    del columns["sum_p_002"]
    with pytest.raises(ValueError, match="every threshold"):
        counts_of(columns)


def test_repeated_order_is_the_stable_sort_of_the_rows_repeated():
    rng = np.random.default_rng(7)
    rows, per_row = 6, rng.integers(0, 5, size=6)
    owner = np.repeat(np.arange(rows), per_row)
    score = rng.choice([0.2, 0.5, 0.9], size=len(owner))  # ties inside rows and between them
    order = np.argsort(-score, kind="stable")  # the reference's pooled order of the rows
    for counts in (np.ones(rows, dtype=int), np.array([0, 3, 1, 2, 0, 2]), rng.integers(0, 4, size=rows)):
        # the reference on the rows literally repeated, each copy beside its original: (copy's owner, item) pairs
        copies = [(r, item) for r in range(rows) for _ in range(counts[r]) for item in np.flatnonzero(owner == r)]
        literal = [item for _, item in sorted(copies, key=lambda copy: -score[copy[1]])]  # sorted() is stable
        got = order[resampled.repeated_order(owner[order], score[order], counts)]
        assert got.tolist() == literal


@pytest.mark.parametrize("name", ["anomaly_auroc", "anomaly_aupr", "anomaly_f1_max", "anomaly_fpr95"])
def test_score_ranking_statistics_under_weights_are_the_rows_repeated(name):
    rng = np.random.default_rng(3)
    n = 14
    columns = {"anomaly_score": rng.choice([0.1, 0.2, 0.3], n), "anomalous": rng.integers(0, 2, n).astype(float),
               "defect_type": np.zeros(n)}  # three score values: ties between rows of both kinds
    weights = rng.multinomial(n, np.full(n, 1 / n), size=8)
    weights[0] = 0
    weights[0, :5] = [3, 0, 2, 4, 5]
    got = resampled.evaluate(name, columns, weights)
    for b, counts in enumerate(weights):
        literal = resampled.evaluate(name, {k: np.repeat(v, counts) for k, v in columns.items()})[0]
        np.testing.assert_array_equal(got[b], literal)


def _classification_result(**changes) -> ProbeResult:
    labels = np.array([0, 1, 2, 1, 0])
    predicted = np.array([0, 1, 1, 1, 2])
    top1 = (labels == predicted).astype(float)
    fields = {"metrics": {"top1": float(top1.mean()), "macro_f1": float(f1_score(labels, predicted, average="macro"))},
              "sample_ids": [f"i{n}" for n in range(5)], "samples": {"top1": top1}, "unit": "image",
              "auxiliary": {"label": labels.astype(float), "predicted": predicted.astype(float)},
              "statistics": {"macro_f1": "macro_f1:3"}}
    return ProbeResult(**{**fields, **changes})


def test_check_result_recomputes_a_declared_statistic():
    check_result(CLASSIFICATION, _classification_result())  # consistent: passes
    wrong = _classification_result()
    wrong.metrics["macro_f1"] += 1e-9
    with pytest.raises(ValueError, match="is not macro_f1:3 of its auxiliary columns"):
        check_result(CLASSIFICATION, wrong)
    with pytest.raises(ValueError, match="its result names None"):
        check_result(CLASSIFICATION, _classification_result(statistics={}))


@pytest.mark.parametrize(("auxiliary", "message"), [
    ({"label": np.zeros(4), "predicted": np.zeros(5)}, "has 4 rows for 5 ids"),
    ({"label": np.full(5, np.nan), "predicted": np.zeros(5)}, "non-finite"),
    ({"label": np.zeros(5), "predicted": np.zeros(5), "top1": np.zeros(5)}, "both a per-sample score"),
    ({"label": np.zeros(5), "predicted": np.zeros(5), "macro_f1": np.zeros(5)}, "has the name of a metric"),
])
def test_check_result_refuses_bad_auxiliary_columns(auxiliary, message):
    with pytest.raises(ValueError, match=message):
        check_result(CLASSIFICATION, _classification_result(auxiliary=auxiliary))


@pytest.mark.parametrize("task", ["semantic_segmentation", "detection", "edge", "keypoints2d", "occlusion_edge"])
def test_pooled_headlines_are_declared_statistics(task):
    """These headlines pool pixels or detections over images: without a statistic their boards had no interval
    and no tie groups ("no per-sample scores")."""
    spec = get_probe(task)
    assert spec.headline in spec.statistics
    assert set(spec.statistics.values()) <= set(resampled.STATISTICS)


def test_boundary_declares_what_the_site_resamples():
    assert EDGE_BSDS_PROBE.statistics == {"ods_f": "bsds_ods_f", "ois_f": "bsds_ois_f", "ap": "bsds_ap"}
    assert set(EDGE_BSDS_PROBE.statistics.values()) <= set(resampled.STATISTICS)
