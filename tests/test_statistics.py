"""Leaderboard statistics: bootstrap intervals, paired tests, Holm, ties, rank correlation."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import scipy.stats

from harness.leaderboard.statistics.bootstrap import (
    MIN_CORRELATION_N,
    PairingError,
    average_ranks,
    bootstrap_ci,
    derived_seed,
    group_label,
    holm,
    kendall_tau_b,
    paired_bootstrap,
    rank_correlation,
    spearman_rho,
    tie_groups,
)


def bernoulli(p: float, n: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < p).astype(np.float64)


def test_derived_seed_is_a_stable_hash_of_the_names():
    expected = int.from_bytes(hashlib.sha256(b"ci\x1frun-a\x1ftop1").digest()[:8], "big")
    assert derived_seed("ci", "run-a", "top1") == expected
    assert derived_seed("ci", "run-a", "top1") != derived_seed("ci", "run-a", "top5")


def test_bootstrap_ci_covers_the_true_mean_of_a_bernoulli_sample():
    scores = bernoulli(0.7, 1000, seed=0)
    interval = bootstrap_ci(scores, seed=derived_seed("ci", "bernoulli", "top1"))
    assert interval.estimate == scores.mean()
    assert interval.low < 0.7 < interval.high
    # The normal-approximation width is 2 * 1.96 * sqrt(0.21 / 1000) ≈ 0.057.
    assert 0.045 < interval.high - interval.low < 0.07


def test_bootstrap_ci_is_deterministic():
    scores = bernoulli(0.4, 300, seed=1)
    first = bootstrap_ci(scores, seed=42)
    second = bootstrap_ci(scores.copy(), seed=42)
    as_bytes = [np.array([i.estimate, i.low, i.high]).tobytes() for i in (first, second)]
    assert as_bytes[0] == as_bytes[1]
    assert bootstrap_ci(scores, seed=43) != first


def test_bootstrap_ci_chunks_large_runs_without_changing_its_contract():
    scores = np.random.default_rng(2).normal(size=5000)  # 5000 × 2000 draws: resampled in chunks
    interval = bootstrap_ci(scores, seed=7)
    assert interval == bootstrap_ci(scores, seed=7)
    assert interval.low < scores.mean() < interval.high


def test_bootstrap_ci_refuses_empty_scores():
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_ci([], seed=0)


def test_paired_bootstrap_on_identical_runs():
    ids = [f"img{i}" for i in range(200)]
    scores = bernoulli(0.6, 200, seed=3)
    test = paired_bootstrap(ids, scores, ids, scores.copy(), seed=5)
    assert (test.difference, test.low, test.high, test.p_value, test.count) == (0.0, 0.0, 0.0, 1.0, 200)


def test_paired_bootstrap_aligns_by_sample_id_and_is_symmetric():
    ids = [f"img{i:03d}" for i in range(300)]
    a, b = bernoulli(0.8, 300, seed=6), bernoulli(0.7, 300, seed=7)
    reference = paired_bootstrap(ids, a, ids, b, seed=11)
    order = np.random.default_rng(0).permutation(300)
    shuffled = paired_bootstrap(ids, a, [ids[i] for i in order], b[order], seed=11)
    assert shuffled == reference  # rows matched by id, not by position
    swapped = paired_bootstrap(ids, b, ids, a, seed=11)
    assert swapped.difference == -reference.difference
    assert (swapped.low, swapped.high) == pytest.approx((-reference.high, -reference.low))
    assert swapped.p_value == reference.p_value
    assert reference.difference == pytest.approx(a.mean() - b.mean())


def test_paired_bootstrap_separates_very_different_runs():
    ids = [str(i) for i in range(400)]
    test = paired_bootstrap(ids, bernoulli(0.95, 400, 8), ids, bernoulli(0.5, 400, 9), seed=1)
    assert test.low > 0
    assert test.p_value == pytest.approx(2 / 2001)  # the smallest p-value 2000 resamples can give


def test_paired_bootstrap_refuses_different_sample_sets():
    with pytest.raises(PairingError, match="1 ids only in the first, 1 only in the second"):
        paired_bootstrap(["a", "b"], np.ones(2), ["a", "c"], np.ones(2), seed=0)
    with pytest.raises(PairingError, match="unique"):
        paired_bootstrap(["a", "a"], np.ones(2), ["a", "a"], np.ones(2), seed=0)


def test_holm_against_a_hand_computed_example():
    # Sorted: 0.005 (×4 = 0.02), 0.01 (×3 = 0.03), 0.03 (×2 = 0.06), 0.04 (×1 = 0.04 → kept monotone: 0.06).
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == [1.0, 1.0]  # 2 × 0.5 = 1.0, then 0.6 is raised to the running maximum
    assert holm([0.2]) == [0.2]
    assert holm([]) == []


def test_tie_groups_chain_down_the_ranking():
    assert tie_groups([]) == [0]
    # rows 1–2 tied, 2–3 separated, 3–4 tied, 4–5 separated (0.05 itself counts as tied)
    assert tie_groups([0.5, 0.01, 0.05, 0.0499]) == [0, 0, 1, 1, 2]
    assert [group_label(g) for g in (0, 1, 25, 26, 27, 701, 702)] == ["A", "B", "Z", "AA", "AB", "ZZ", "AAA"]


def test_identical_runs_are_tied_and_very_different_runs_are_not():
    ids = [str(i) for i in range(400)]
    same = bernoulli(0.8, 400, seed=10)
    runs = [bernoulli(0.99, 400, seed=11), same, same.copy(), bernoulli(0.4, 400, seed=12)]
    pairs = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    tests = {pair: paired_bootstrap(ids, runs[pair[0]], ids, runs[pair[1]], seed=pair[0] * 10 + pair[1])
             for pair in pairs}
    adjusted = dict(zip(pairs, holm([t.p_value for t in tests.values()]), strict=True))
    groups = tie_groups([adjusted[0, 1], adjusted[1, 2], adjusted[2, 3]])
    assert groups == [0, 1, 1, 2]


@pytest.mark.parametrize("seed", range(8))
def test_spearman_and_kendall_match_scipy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 30))
    x = rng.normal(size=n)
    y = x + rng.normal(size=n)
    if seed % 2:  # with ties
        x, y = np.round(x), np.round(y)
    assert float(spearman_rho(x, y)) == pytest.approx(scipy.stats.spearmanr(x, y).statistic, abs=1e-12)
    assert float(kendall_tau_b(x, y)) == pytest.approx(scipy.stats.kendalltau(x, y).statistic, abs=1e-12)
    ranks = average_ranks(x)
    assert ranks == pytest.approx(scipy.stats.rankdata(x))


def test_correlations_are_vectorised_over_rows():
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 4, size=(50, 7)), rng.integers(0, 4, size=(50, 7))
    rho, tau = spearman_rho(x, y), kendall_tau_b(x, y)
    for row in range(50):
        expected_rho = scipy.stats.spearmanr(x[row], y[row]).statistic
        expected_tau = scipy.stats.kendalltau(x[row], y[row]).statistic
        assert rho[row] == pytest.approx(expected_rho, nan_ok=True)
        assert tau[row] == pytest.approx(expected_tau, nan_ok=True)


def test_rank_correlation_reports_n_and_withholds_small_n_intervals():
    assert rank_correlation([], [], seed=0).spearman is None
    one = rank_correlation([0.5], [0.7], seed=0)
    assert (one.n, one.spearman, one.kendall, one.spearman_ci) == (1, None, None, None)
    three = rank_correlation([1, 2, 3], [1, 3, 2], seed=0)
    assert three.n == 3 < MIN_CORRELATION_N
    assert three.spearman == pytest.approx(0.5) and three.spearman_ci is None and three.kendall_ci is None
    constant = rank_correlation([1, 1, 1, 1], [1, 2, 3, 4], seed=0)
    assert constant.spearman is None and constant.spearman_ci is None


def test_rank_correlation_bootstraps_over_the_pairs():
    rng = np.random.default_rng(4)
    x = rng.normal(size=12)
    y = x + 0.3 * rng.normal(size=12)
    result = rank_correlation(x, y, seed=derived_seed("agreement", "b1", "b2"))
    assert result.n == 12
    assert result.spearman == pytest.approx(scipy.stats.spearmanr(x, y).statistic)
    assert -1 <= result.spearman_ci.low <= result.spearman <= result.spearman_ci.high <= 1
    assert -1 <= result.kendall_ci.low <= result.kendall <= result.kendall_ci.high <= 1
    assert result == rank_correlation(x, y, seed=derived_seed("agreement", "b1", "b2"))


def test_intervals_split_over_processes_are_the_same_bits_in_the_same_order():
    from harness.leaderboard.statistics.bootstrap import bootstrap_cis

    rng = np.random.default_rng(7)
    jobs = [(rng.random(int(n)), seed) for seed, n in enumerate(rng.integers(1, 300, size=23))]
    alone = bootstrap_cis(jobs, workers=1)
    assert alone == [bootstrap_ci(scores, seed) for scores, seed in jobs]
    assert bootstrap_cis(jobs, workers=2) == alone
    assert bootstrap_cis(jobs, workers=3) == alone
