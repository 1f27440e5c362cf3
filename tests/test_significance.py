"""core.significance against scipy (the reference implementations), and core.formulas'
pass@k against combinatorics."""

from __future__ import annotations

import math
import random
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from core.formulas import pass_at_k, pass_hat_k
from core.significance import (
    bootstrap_median_interval,
    fisher_exact,
    mann_whitney_u,
    wilson_interval,
)

counts = st.integers(min_value=0, max_value=60)
# Composite-like scores: a few repeated grid values (ties) and arbitrary ones.
scores = st.one_of(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), st.floats(0.0, 1.0))


@given(trials=st.integers(1, 500), data=st.data(), confidence=st.sampled_from([0.8, 0.95, 0.99]))
def test_wilson_matches_scipy(trials: int, data: st.DataObject, confidence: float) -> None:
    successes = data.draw(st.integers(0, trials))
    low, high = wilson_interval(successes, trials, confidence)
    expected = stats.binomtest(successes, trials).proportion_ci(confidence, method="wilson")
    assert low == pytest.approx(expected.low, abs=1e-12)
    assert high == pytest.approx(expected.high, abs=1e-12)
    assert 0.0 <= low <= successes / trials <= high <= 1.0


@given(a=counts, b=counts, c=counts, d=counts)
def test_fisher_exact_matches_scipy(a: int, b: int, c: int, d: int) -> None:
    expected = stats.fisher_exact([[a, b], [c, d]], alternative="two-sided").pvalue
    assert fisher_exact(a, b, c, d) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_fisher_exact_is_fast_and_right_at_ten_thousand_runs() -> None:
    table = [[2500, 2500], [2600, 2400]]
    expected = stats.fisher_exact(table).pvalue
    assert fisher_exact(2500, 2500, 2600, 2400) == pytest.approx(expected, rel=1e-8)


@settings(max_examples=300)
@given(
    x=st.lists(scores, min_size=1, max_size=14),
    y=st.lists(scores, min_size=1, max_size=14),
    method=st.sampled_from(["auto", "exact", "asymptotic"]),
)
def test_mann_whitney_matches_scipy(x: list[float], y: list[float], method: str) -> None:
    if method == "asymptotic" and len(set(x + y)) == 1:
        return  # scipy divides by a zero variance (NaN); we answer p = 1 (no evidence)
    expected = stats.mannwhitneyu(x, y, alternative="two-sided", method=method)
    result = mann_whitney_u(x, y, method)  # type: ignore[arg-type]
    assert result.u == pytest.approx(expected.statistic)
    assert result.p == pytest.approx(expected.pvalue, rel=1e-9, abs=1e-15)


def test_mann_whitney_auto_chooses_like_scipy() -> None:
    assert mann_whitney_u([0.1, 0.2], [0.3, 0.4, 0.5]).method == "exact"
    assert mann_whitney_u([0.1, 0.2], [0.2, 0.4, 0.5]).method == "asymptotic"  # a tie
    assert mann_whitney_u(list(range(9)), [x + 0.5 for x in range(9)]).method == "asymptotic"
    assert mann_whitney_u([0.5] * 5, [0.5] * 7).p == 1.0  # all tied: no evidence either way


def test_mann_whitney_exact_with_one_small_sample_and_a_large_one() -> None:
    rng = random.Random(7)
    x = [rng.random() for _ in range(8)]
    y = [rng.random() + 0.05 for _ in range(400)]
    expected = stats.mannwhitneyu(x, y, method="exact").pvalue
    assert mann_whitney_u(x, y).p == pytest.approx(expected, rel=1e-9)


@given(values=st.lists(scores, min_size=1, max_size=40), seed=st.integers(0, 2**16))
def test_bootstrap_interval_is_deterministic_and_brackets_the_median(
    values: list[float], seed: int
) -> None:
    low, high = bootstrap_median_interval(values, resamples=200, seed=seed)
    assert (low, high) == bootstrap_median_interval(
        list(reversed(values)), resamples=200, seed=seed
    )
    assert min(values) <= low <= high <= max(values)


def test_bootstrap_median_has_the_law_of_resampling() -> None:
    """The order-statistic shortcut against plain resampling with numpy: the same law,
    so the same percentile interval up to Monte Carlo error (and scipy's own bootstrap)."""
    rng = np.random.default_rng(1)
    for values in (rng.normal(size=31), rng.normal(size=50), rng.integers(0, 5, size=40) / 4):
        naive = np.median(rng.choice(values, size=(20000, len(values))), axis=1)
        low, high = bootstrap_median_interval(list(values), resamples=20000, seed=3)
        spread = float(np.ptp(values))
        assert low == pytest.approx(np.quantile(naive, 0.025), abs=0.03 * spread)
        assert high == pytest.approx(np.quantile(naive, 0.975), abs=0.03 * spread)
        scipy_ci = stats.bootstrap(
            (values,), np.median, method="percentile", n_resamples=20000, random_state=4
        ).confidence_interval
        assert low == pytest.approx(scipy_ci.low, abs=0.03 * spread)
        assert high == pytest.approx(scipy_ci.high, abs=0.03 * spread)


def _by_enumeration(n: int, c: int, k: int) -> tuple[float, float]:
    """pass@k and pass^k by listing every k-subset of n runs, c of them passing."""
    subsets = list(combinations([i < c for i in range(n)], k))
    return (
        sum(any(s) for s in subsets) / len(subsets),
        sum(all(s) for s in subsets) / len(subsets),
    )


@given(n=st.integers(1, 12), data=st.data())
def test_pass_at_k_and_pass_hat_k_count_subsets(n: int, data: st.DataObject) -> None:
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    at, hat = _by_enumeration(n, c, k)
    assert pass_at_k(n, c, k) == pytest.approx(at)
    assert pass_hat_k(n, c, k) == pytest.approx(hat)
    assert pass_at_k(n, c, 1) == pytest.approx(pass_hat_k(n, c, 1)) == pytest.approx(c / n)


def test_pass_at_k_formula_and_bad_counts() -> None:
    assert pass_at_k(200, 13, 10) == pytest.approx(1 - math.comb(187, 10) / math.comb(200, 10))
    for bad in ((10, 11, 1), (10, 5, 0), (10, 5, 11), (0, 0, 1)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)
    with pytest.raises(ValueError):
        wilson_interval(3, 0)
    with pytest.raises(ValueError):
        bootstrap_median_interval([])
