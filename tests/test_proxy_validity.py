"""Proxy validity (R², ρ, τ, mis-rank rate, threshold sweep) against independent implementations, and its page
and data table on the committed corpus."""

from __future__ import annotations

import csv
import io
import itertools
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from harness.core import paths
from harness.leaderboard import rendered_pages
from harness.leaderboard.sitemap import PROXY_DATA
from harness.leaderboard.statistics.bootstrap import MIN_CORRELATION_N, misrank_rate
from harness.leaderboard.statistics.proxy_validity import CSV_COLUMNS, estimates, proxy_fits
from harness.runs.records import read_records

ROOT = Path(__file__).resolve().parents[1]


def misranked_by_loops(proxy: list[float], target: list[float]) -> float:
    """The definition, pair by pair: of the pairs the target orders, the share the proxy orders the other way,
    a proxy tie counting one half."""
    wrong = counted = 0.0
    for i, j in itertools.combinations(range(len(proxy)), 2):
        if target[i] == target[j]:
            continue
        counted += 1
        if proxy[i] == proxy[j]:
            wrong += 0.5
        elif (proxy[i] - proxy[j]) * (target[i] - target[j]) < 0:
            wrong += 1
    return wrong / counted


@pytest.mark.parametrize("seed", range(6))
def test_misrank_rate_matches_the_pairwise_definition(seed):
    rng = np.random.default_rng(seed)
    proxy = rng.integers(0, 4, size=7).astype(float)  # small integers: ties on both sides
    target = rng.integers(0, 4, size=7).astype(float)
    if len(set(target)) == 1:
        target[0] += 1
    assert misrank_rate(proxy, target) == pytest.approx(misranked_by_loops(list(proxy), list(target)))


def test_misrank_rate_without_ties_is_half_of_one_minus_kendall_tau():
    rng = np.random.default_rng(3)
    proxy, target = rng.random(9), rng.random(9)
    tau = scipy.stats.kendalltau(proxy, target).statistic
    assert misrank_rate(proxy, target) == pytest.approx((1 - tau) / 2)


def test_misrank_rate_is_nan_when_the_target_orders_nothing():
    assert np.isnan(misrank_rate(np.array([1.0, 2.0, 3.0]), np.array([5.0, 5.0, 5.0])))


def test_estimates_match_scipy_and_carry_intervals():
    rng = np.random.default_rng(11)
    proxy = rng.random(7)
    target = proxy + 0.3 * rng.random(7)
    found = estimates(proxy, target, seed=5)
    assert found.n == 7
    assert found.r2.estimate == pytest.approx(scipy.stats.pearsonr(proxy, target).statistic ** 2)
    assert found.spearman.estimate == pytest.approx(scipy.stats.spearmanr(proxy, target).statistic)
    assert found.kendall.estimate == pytest.approx(scipy.stats.kendalltau(proxy, target).statistic)
    assert found.misrank.estimate == pytest.approx(misranked_by_loops(list(proxy), list(target)))
    for interval in (found.r2, found.spearman, found.kendall, found.misrank):
        assert interval.low <= interval.estimate <= interval.high
    assert estimates(proxy, target, seed=5) == found  # seeded: the same bits every build
    with pytest.raises(ValueError, match="at least"):
        estimates(proxy[:3], target[:3], seed=5)


def board(key: str, higher: bool = True) -> dict:
    return {"comparability_key": key, "higher_is_better": higher}


def cells_of(values: dict[str, dict[str, float]], controls: dict[str, float] = ()) -> dict:
    cells = {}
    for key, rows in values.items():
        for name, value in rows.items():
            cells[name, "null", key] = {"headline_value": value, "control": False}
    for name, value in dict(controls).items():
        cells[name, "null", "P"] = {"headline_value": value, "control": True}
    return cells


def test_fits_orient_lower_is_better_leave_out_controls_and_sweep_the_strong_rows():
    proxy = {f"b{i}": float(i) for i in range(6)}  # higher is better
    # lower is better on the target and it reverses the proxy's order among the strongest three
    target = {"b0": 6.0, "b1": 5.0, "b2": 4.0, "b3": 1.0, "b4": 2.0, "b5": 3.0}
    fits = proxy_fits([board("P"), board("Q", higher=False)],
                      cells_of({"P": proxy, "Q": target}, controls={"r0": 100.0}))
    fit = next(f for f in fits if (f.proxy, f.target) == ("P", "Q"))
    assert fit.n == 6 and fit.weakest == 0.0
    oriented_target = [-target[f"b{i}"] for i in range(6)]
    assert fit.whole.spearman.estimate == pytest.approx(
        scipy.stats.spearmanr(range(6), oriented_target).statistic)
    # thresholds past the weakest that leave MIN_CORRELATION_N rows: T = 1 (5 rows) and T = 2 (4 rows)
    assert [p.threshold for p in fit.sweep] == [1.0, 2.0]
    assert [p.estimates.n for p in fit.sweep] == [5, 4]
    strongest = fit.sweep[-1].estimates  # b2..b5: the target orders b3 > b4 > b5 > b2, the proxy the reverse
    assert strongest.spearman.estimate == pytest.approx(
        scipy.stats.spearmanr([2, 3, 4, 5], [-4.0, -1.0, -2.0, -3.0]).statistic)
    assert strongest.misrank.estimate == pytest.approx(misranked_by_loops([2, 3, 4, 5], [-4.0, -1.0, -2.0, -3.0]))
    # the reverse direction: thresholds are the target board's own values, in its own units (lower is better)
    back = next(f for f in fits if (f.proxy, f.target) == ("Q", "P"))
    assert back.weakest == 6.0 and [p.threshold for p in back.sweep] == [5.0, 4.0]


def test_pairs_below_the_minimum_are_listed_not_estimated():
    fits = proxy_fits([board("P"), board("Q")], cells_of({"P": {"a": 1.0, "b": 2.0, "c": 3.0},
                                                           "Q": {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.0}}))
    assert [(f.proxy, f.target, f.n, f.whole, f.sweep) for f in fits] == [("P", "Q", 3, None, []),
                                                                          ("Q", "P", 3, None, [])]


@pytest.fixture(scope="module")
def pages():
    corpus = read_records(ROOT / paths.CORPUS)
    if not corpus:
        pytest.skip("the committed corpus is empty")
    return rendered_pages(corpus, ROOT)


def test_the_page_and_data_table_agree_on_the_committed_corpus(pages):
    page = pages["proxy.md"]
    rows = list(csv.DictReader(io.StringIO(pages[PROXY_DATA])))
    assert rows and list(rows[0]) == list(CSV_COLUMNS)
    whole = [r for r in rows if r["threshold"] == ""]
    assert all(int(r["n"]) >= MIN_CORRELATION_N for r in rows)
    # every whole-range estimate is on the page, under its proxy's section, with its interval
    for row in whole:
        section = page.split(f"## {row['proxy_board']} as the proxy")[1].split("\n## ")[0]
        line = next(line for line in section.splitlines() if line.startswith(f"| [{row['target_board']}]"))
        rho = float(row["spearman"])
        assert f"{rho:.2f} [{float(row['spearman_low']):.2f}, {float(row['spearman_high']):.2f}]" in line
    # pairs with too few rows are named with their count, never estimated
    assert f"fewer than {MIN_CORRELATION_N} shared pretrained rows" in page
    # every proxy with a sweep has its figure, and the page shows it
    for code in sorted({r["proxy"] for r in rows if r["threshold"] != ""}):
        assert f"plots/proxy/{code}.svg" in pages
        assert f"(plots/proxy/{code}.svg)" in page
