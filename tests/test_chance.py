"""Chance rows: each analytic value against an independent computation (sklearn's metrics over simulated
image-blind predictors, or exhaustive enumeration), and their place on the committed boards."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, f1_score

from harness.core import paths
from harness.leaderboard import rendered_pages
from harness.leaderboard.statistics.chance import chance_rows, expected_average_precision, expected_recall_at
from harness.runs.records import read_records

ROOT = Path(__file__).resolve().parents[1]


def classification_board(metrics=("top1", "top5", "macro_f1", "train_top1")) -> dict:
    return {"protocol": "linear-probe-adamw/v3", "headline_metric": "top1", "protocol_params": "{}",
            "metrics": [{"metric": m} for m in metrics]}


def ids_for(counts: dict[str, int]) -> list[str]:
    return [f"val/{label}/{i:04d}.png" for label, n in counts.items() for i in range(n)]


@pytest.mark.parametrize("gallery,relevant", [(2, 1), (5, 2), (6, 3), (7, 1)])
def test_expected_average_precision_enumerates_every_ranking(gallery, relevant):
    relevance = np.array([1] * relevant + [0] * (gallery - relevant))
    scores = np.arange(gallery, 0, -1, dtype=float)  # rank 1 first
    aps = [average_precision_score(relevance[list(order)], scores)
           for order in itertools.permutations(range(gallery))]
    assert expected_average_precision(gallery, relevant) == pytest.approx(np.mean(aps))


@pytest.mark.parametrize("gallery,relevant,k", [(6, 2, 1), (6, 2, 3), (7, 3, 2), (5, 1, 5)])
def test_expected_recall_enumerates_every_ranking(gallery, relevant, k):
    hits = [any(i < relevant for i in order[:k]) for order in itertools.permutations(range(gallery))]
    assert expected_recall_at(gallery, relevant, k) == pytest.approx(np.mean(hits))


def test_uniform_guess_on_a_balanced_split():
    (row,) = chance_rows(classification_board(), ids_for({c: 15 for c in "abcdefghij"}))
    assert row.predictor == "uniform guess"
    assert row.metrics == pytest.approx({"top1": 0.1, "top5": 0.5, "macro_f1": 0.1})


def test_imbalanced_split_gets_a_majority_row_matching_sklearn():
    counts = {"a": 60, "b": 25, "c": 10, "d": 5}
    labels = np.array([c for c, n in counts.items() for _ in range(n)])
    uniform, majority = chance_rows(classification_board(), ids_for(counts))
    assert majority.predictor == "majority class"
    predicted = np.full(len(labels), "a")
    assert majority.metrics["top1"] == pytest.approx(0.6)
    assert majority.metrics["top5"] == pytest.approx(1.0)  # four classes: any five-class list holds the label
    assert majority.metrics["macro_f1"] == pytest.approx(
        f1_score(labels, predicted, average="macro", labels=list(counts), zero_division=0))
    # uniform guessing, simulated: its mean macro-F1 approaches the value from expected confusion counts
    rng = np.random.default_rng(0)
    draws = [f1_score(labels, rng.choice(list(counts), size=len(labels)), average="macro", labels=list(counts),
                      zero_division=0) for _ in range(400)]
    assert uniform.metrics["top1"] == pytest.approx(0.25)
    assert uniform.metrics["macro_f1"] == pytest.approx(np.mean(draws), abs=0.01)


def test_retrieval_chance_uses_the_gallery_class_sizes():
    board = {"protocol": "cosine-retrieval/v1", "headline_metric": "map",
             "protocol_params": json.dumps({"query_split": "val", "gallery_split": "train", "recall_at": [1, 5]}),
             "dataset_params": json.dumps({"per_class": {"train": 30, "val": 15}}),
             "metrics": [{"metric": m} for m in ("map", "recall@1", "recall@5")]}
    (row,) = chance_rows(board, ids_for({c: 15 for c in "abcdefghij"}))
    assert row.metrics["map"] == pytest.approx(expected_average_precision(300, 30))
    assert row.metrics["recall@1"] == pytest.approx(0.1)
    assert row.metrics["recall@5"] == pytest.approx(expected_recall_at(300, 30, 5))
    # no class sizes in the record, or queries inside their own gallery: no row rather than a guess
    assert chance_rows({**board, "dataset_params": "{}"}, ids_for({"a": 2, "b": 2})) == []
    same = json.dumps({"query_split": "val", "gallery_split": "val", "recall_at": [1]})
    assert chance_rows({**board, "protocol_params": same}, ids_for({"a": 2, "b": 2})) == []


def test_boards_without_an_exact_floor_get_no_row():
    board = {"protocol": "probe3d-depth/v2", "headline_metric": "delta1", "protocol_params": "{}",
             "metrics": [{"metric": "delta1"}]}
    assert chance_rows(board, ["a.png"]) == []
    assert chance_rows(classification_board(), None) == []  # no per-sample ids, no labels


def test_committed_boards_show_chance_rows_unranked():
    corpus = read_records(ROOT / paths.CORPUS)
    if not corpus:
        pytest.skip("the committed corpus is empty")
    pages = rendered_pages(corpus, ROOT)
    classification = pages["tasks/classification.md"]
    rows = [line for line in classification.splitlines() if line.startswith("| chance |")]
    assert rows and all("chance: uniform guess" in row and "| 0.1000 | n/a |" in row for row in rows)
    similarity = pages["tasks/similarity.md"]
    assert "| chance | chance: coin flip | 0.5000 | n/a |" in similarity
    # a depth board has no exact floor
    assert "| chance |" not in pages["tasks/depth.md"]


def test_a_constant_anomaly_score_against_scikit_learn_and_the_aupro_definition():
    """The constant-score row: sklearn's metrics on a constant score, and MVTec AD's AUPRO of a constant map."""
    from sklearn.metrics import roc_auc_score, roc_curve

    from harness.probes.anomaly.metrics import aupro, f1_max, fpr_at_tpr

    counts = {"good": 30, "blob": 15, "stain": 15}
    ids = [f"test/{label}/{i:03d}.png" for label, n in counts.items() for i in range(n)]
    names = ("auroc", "aupr", "f1_max", "fpr95", "auroc_blob", "auroc_stain", "pixel_auroc", "aupro")
    board = {"protocol": "knn-patch-anomaly/v1", "headline_metric": "auroc", "protocol_params": "{}",
             "metrics": [{"metric": m} for m in names]}
    (row,) = chance_rows(board, ids)
    defective = np.array([not i.startswith("test/good/") for i in ids])
    constant = np.zeros(len(ids))
    assert row.predictor == "constant score"
    assert row.metrics["auroc"] == roc_auc_score(defective, constant) == row.metrics["auroc_blob"]
    assert row.metrics["aupr"] == pytest.approx(average_precision_score(defective, constant))
    assert row.metrics["f1_max"] == pytest.approx(float(f1_max(constant, defective)[0]))
    assert row.metrics["fpr95"] == float(fpr_at_tpr(constant, defective)[0]) == roc_curve(defective, constant)[0][-1]
    masks = np.zeros((4, 8, 8), dtype=int)
    masks[1, 2:4, 2:4], masks[2, 5:7, 1:3], masks[3, 0:2, 5:8] = 1, 2, 3  # three one-region defects
    assert row.metrics["aupro"] == pytest.approx(aupro(np.zeros((4, 8, 8)), masks))
    assert chance_rows(board, [i for i in ids if "/good/" in i]) == []  # no defective image: no curve


def test_head_family_chance_is_each_heads_uniform_guess():
    board = {"protocol": "head-family-sweep/v1", "headline_metric": "mlp_top1", "protocol_params": "{}",
             "metrics": [{"metric": m} for m in ("linear_top1", "knn_top1", "mlp_top1", "mlp_minus_linear")]}
    (row,) = chance_rows(board, ids_for({c: 15 for c in "abcde"}))
    assert row.metrics == {"linear_top1": 0.2, "knn_top1": 0.2, "mlp_top1": 0.2, "mlp_minus_linear": 0.0}


def test_a_uniform_orientation_scores_its_expectation_on_the_probes_own_metric():
    """The orientation row against Monte Carlo through `orientation_per_image`: uniform guesses, arbitrary
    truths and coherences (the expectation does not depend on either)."""
    from harness.probes.dense.orientation import orientation_per_image

    names = ("angular_error", "within_15", "within_30", "mean_error_unweighted")
    board = {"protocol": "structure-tensor-orientation/v1", "headline_metric": "angular_error",
             "protocol_params": "{}", "metrics": [{"metric": m} for m in names]}
    (row,) = chance_rows(board, None)
    rng = np.random.default_rng(0)
    guess, truth = rng.uniform(0, 2 * np.pi, (2, 200, 1, 32, 32))
    target = np.concatenate([np.cos(truth * 0.3), np.sin(truth * 0.3), rng.random((200, 1, 32, 32))], axis=1)
    pred = np.concatenate([np.cos(guess), np.sin(guess)], axis=1)
    columns = orientation_per_image(pred, target, np.ones((200, 32, 32), bool))
    assert row.predictor == "uniform orientation" and set(row.metrics) == set(names)
    for name in names:
        assert columns[name].mean() == pytest.approx(row.metrics[name], abs=0.01 * max(1.0, row.metrics[name]))


def test_target_overlap_chance_is_the_recorded_expectation_of_random_neighbours():
    """The random-neighbours row shows the runs' common `overlap_chance`; that value against Monte Carlo: k
    neighbours drawn uniformly (without replacement) from the reference split, the overlap averaged over draws."""
    from harness.probes.target_overlap import overlap_columns

    rng = np.random.default_rng(0)
    y_reference, y = rng.normal(size=(50, 3)) * [1.0, 2.0, 0.5], rng.normal(size=(8, 3)) + 0.5
    scores, _ = overlap_columns(rng.normal(size=(50, 4)), y_reference, rng.normal(size=(8, 4)), y, k=5)
    variance = np.var(y_reference, axis=0).sum()
    draws = np.argsort(rng.random((20000, len(y), 50)), axis=2)[..., :5]  # k distinct reference images each
    pairs = np.sum((y[None, :, None, :] - y_reference[draws]) ** 2, axis=3).mean(axis=2) / (2 * variance)
    simulated = pairs.mean(axis=0)
    spread = pairs.std(axis=0) / np.sqrt(len(pairs))
    assert np.all(np.abs(simulated - scores["overlap_chance"]) < 5 * spread)

    chance = float(scores["overlap_chance"].mean())
    board = {"protocol": "knn-target-overlap/v1", "headline_metric": "overlap", "protocol_params": "{}",
             "metrics": [{"metric": m} for m in ("overlap", "overlap_chance", "knn_r2")],
             "rows": [{"metrics": {"overlap": v, "overlap_chance": chance, "knn_r2": 0.1}} for v in (0.3, 0.6)]}
    (row,) = chance_rows(board, None)
    assert row.predictor == "random neighbours" and row.metrics == {"overlap": chance, "overlap_chance": chance}
    board["rows"][1]["metrics"]["overlap_chance"] = chance + 0.01  # runs that disagree on it: no row
    assert chance_rows(board, None) == []
    assert chance_rows({**board, "rows": []}, None) == []
