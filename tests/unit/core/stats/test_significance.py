"""core.stats.significance against scipy (the reference implementations), and core.metrics.formulas'
pass@k against combinatorics."""

from __future__ import annotations

import math
import random
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats
from statsmodels.stats.proportion import confint_proportions_2indep

from core.metrics.formulas import pass_at_k, pass_hat_k
from core.stats.choices import Correction
from core.stats.significance import (
    CliffsDelta,
    adjust_p,
    bootstrap_median_interval,
    cliffs_delta,
    detectable_difference,
    fisher_exact,
    lone_test_alpha,
    mann_whitney_u,
    risk_difference_interval,
    wilson_interval,
)
from tests.support.oracles import multipletests

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


# --- multiple comparisons, effect sizes, power ----------------------------------------------

P_VECTORS = [
    [0.01, 0.04, 0.03, 0.2, 1.0, 0.04],  # ties and p = 1
    [1.0, 1.0, 1.0],
    [0.0, 0.0, 0.5],
    [0.5],
    [0.001, 0.01, 0.01, 0.02, 0.5, 0.9, 1.0, 0.049, 0.051],
    [0.03, 0.02, 0.011, 0.04, 0.045],  # BH: every one survives at 0.05, Holm: none
]


@pytest.mark.parametrize("pvalues", P_VECTORS)
@pytest.mark.parametrize(("method", "statsmodels_method"), [("holm", "holm"), ("bh", "fdr_bh")])
def test_adjusted_p_values_match_statsmodels(
    pvalues: list[float], method: Correction, statsmodels_method: str
) -> None:
    expected = multipletests(pvalues, alpha=0.05, method=statsmodels_method)
    adjusted = adjust_p(pvalues, method)
    assert adjusted == pytest.approx(list(expected[1]), abs=1e-15)
    # Significant at the family's level exactly where statsmodels rejects.
    assert [p < 0.05 for p in adjusted] == list(expected[0])


@given(st.lists(st.one_of(st.sampled_from([0.0, 0.01, 0.05, 1.0]), st.floats(0, 1)), max_size=30))
def test_adjusted_p_values_match_statsmodels_on_any_vector(pvalues: list[float]) -> None:
    assert adjust_p(pvalues, "none") == pvalues
    if not pvalues:
        assert adjust_p(pvalues, "holm") == [] and adjust_p(pvalues, "bh") == []
        return
    assert adjust_p(pvalues, "holm") == pytest.approx(
        list(multipletests(pvalues, method="holm")[1]), abs=1e-12
    )
    bh = adjust_p(pvalues, "bh")
    assert bh == pytest.approx(list(multipletests(pvalues, method="fdr_bh")[1]), abs=1e-12)
    assert bh == pytest.approx(list(stats.false_discovery_control(pvalues)), abs=1e-12)


def test_adjust_p_refuses_what_is_not_a_p_value() -> None:
    with pytest.raises(ValueError, match="within"):
        adjust_p([0.5, 1.5], "holm")
    with pytest.raises(ValueError, match="within"):
        adjust_p([math.nan], "bh")
    assert lone_test_alpha(0.05, "holm", 4) == 0.0125
    assert lone_test_alpha(0.05, "bh", 10) == 0.005
    assert lone_test_alpha(0.05, "none", 10) == 0.05


@given(
    n1=st.integers(1, 80),
    n2=st.integers(1, 80),
    data=st.data(),
    confidence=st.sampled_from([0.9, 0.95]),
)
def test_risk_difference_interval_is_newcombes_as_statsmodels_computes_it(
    n1: int, n2: int, data: st.DataObject, confidence: float
) -> None:
    x1, x2 = data.draw(st.integers(0, n1)), data.draw(st.integers(0, n2))
    low, high = risk_difference_interval(x1, n1, x2, n2, confidence)
    expected = confint_proportions_2indep(
        x1, n1, x2, n2, method="newcomb", compare="diff", alpha=1 - confidence
    )
    assert (low, high) == pytest.approx(expected, abs=1e-9)
    assert -1 <= low <= x1 / n1 - x2 / n2 <= high <= 1


def _cliff_by_matrix(x: list[float], y: list[float], z: float) -> tuple[float, float, float]:
    """Cliff's delta, its consistent variance and Feng-Cliff interval from the whole
    dominance matrix, as the papers write them."""
    d = np.sign(np.subtract.outer(np.array(x), np.array(y)))
    n, m = d.shape
    delta = d.mean()
    rows, cols = d.mean(axis=1), d.mean(axis=0)
    s2 = (
        m * m * ((rows - delta) ** 2).sum()
        + n * n * ((cols - delta) ** 2).sum()
        - ((d - delta) ** 2).sum()
    ) / (n * m * (n - 1) * (m - 1))
    s2 = max(s2, (1 - delta**2) / (n * m - 1))
    spread = z * math.sqrt(s2) * math.sqrt((1 - delta**2) ** 2 + z * z * s2)
    denominator = 1 - delta**2 + z * z * s2
    return (
        delta,
        (delta - delta**3 - spread) / denominator,
        (delta - delta**3 + spread) / denominator,
    )


# No deadline: scipy's first call in a busy test process took 300 ms once (CI, loaded).
@settings(max_examples=200, deadline=None)
@given(x=st.lists(scores, min_size=2, max_size=30), y=st.lists(scores, min_size=2, max_size=30))
def test_cliffs_delta_matches_the_dominance_matrix_and_mann_whitney(
    x: list[float], y: list[float]
) -> None:
    result = cliffs_delta(x, y, 0.95)
    u = stats.mannwhitneyu(x, y).statistic
    assert result.delta == pytest.approx(2 * u / (len(x) * len(y)) - 1, abs=1e-12)
    if abs(result.delta) < 1:
        _, low, high = _cliff_by_matrix(x, y, stats.norm.ppf(0.975))
        assert (result.low, result.high) == pytest.approx((low, high), abs=1e-9)
    assert result.low is not None and result.high is not None
    assert -1 <= result.low <= result.delta <= result.high <= 1


def test_cliffs_delta_hand_computed_and_at_its_edges() -> None:
    # x = [1, 2, 3], y = [0, 2]: dominance rows [1, 0], [1, 0]... by hand:
    #   1 vs (0, 2): +1, -1;  2 vs (0, 2): +1, 0;  3 vs (0, 2): +1, +1  -> delta = 3/6
    assert cliffs_delta([1, 2, 3], [0, 2]).delta == 0.5
    # No overlap: delta = 1, the interval's other end at (N - z^2) / (N + z^2), N = 3*3 - 1.
    z2 = stats.norm.ppf(0.975) ** 2
    separated = cliffs_delta([4, 5, 6], [1, 2, 3])
    assert (separated.delta, separated.high) == (1.0, 1.0)
    inner = (8 - z2) / (8 + z2)
    assert separated.low == pytest.approx(inner)
    flipped = cliffs_delta([1, 2, 3], [4, 5, 6])
    assert (flipped.delta, flipped.low) == (-1.0, -1.0)
    assert flipped.high == pytest.approx(-inner)
    # Every value tied: delta 0, a symmetric interval.
    tied = cliffs_delta([0.5] * 4, [0.5] * 5)
    assert tied.delta == 0 and tied.low == pytest.approx(-tied.high)  # type: ignore[operator]
    # One value: no variance estimate, so no interval.
    assert cliffs_delta([1.0], [0.0, 0.5]) == CliffsDelta(1.0, None, None)


def _power(p0: float, n0: int, p1: float, n1: int, alpha: float) -> float:
    """Power of the two-sided normal test of two proportions, the far tail ignored."""
    sd = math.sqrt(p0 * (1 - p0) / n0 + p1 * (1 - p1) / n1)
    return float(stats.norm.cdf(abs(p1 - p0) / sd - stats.norm.ppf(1 - alpha / 2)))


@pytest.mark.parametrize(
    ("p0", "n0", "n1", "alpha"),
    [(0.5, 10, 10, 0.05), (0.1, 10, 10, 0.05), (0.3, 40, 20, 0.0125), (0.9, 100, 100, 0.01)],
)
def test_detectable_difference_has_80_percent_power_by_scipy(
    p0: float, n0: int, n1: int, alpha: float
) -> None:
    for direction in (1, -1):
        d = detectable_difference(p0, n0, n1, alpha, 0.8, direction)
        room = 1 - p0 if direction == 1 else p0

        def gap(x: float, sign: int = direction) -> float:
            return _power(p0, n0, p0 + sign * x, n1, alpha) - 0.8

        if d is None:  # no change within [0, 1] reaches 80% power
            assert gap(room - 1e-12) < 0
            continue
        assert _power(p0, n0, p0 + direction * d, n1, alpha) == pytest.approx(0.8, abs=1e-9)
        assert d == pytest.approx(optimize.brentq(gap, 1e-9, room - 1e-12), abs=1e-9)


def test_detectable_difference_at_the_bounds_hand_computed() -> None:
    k = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)  # 2.8016
    # From 0 only a rise is possible, and its variance is all the tier's: d = k^2 / (n + k^2).
    assert detectable_difference(0.0, 10, 10, 0.05, 0.8, 1) == pytest.approx(k * k / (10 + k * k))
    assert detectable_difference(0.0, 10, 10, 0.05, 0.8, -1) is None
    assert detectable_difference(1.0, 10, 10, 0.05, 0.8, 1) is None
    assert detectable_difference(1.0, 10, 10, 0.05, 0.8, -1) == pytest.approx(k * k / (10 + k * k))
    # At 0.5 with 10 runs a side: d^2 (1 + k^2/10) = k^2 * 0.25 * 0.2 -> d = 0.4689.
    assert detectable_difference(0.5, 10, 10, 0.05) == pytest.approx(
        math.sqrt(k * k * 0.05 / (1 + k * k / 10))
    )
    # From 0.9 with 10 runs a side no rise up to 1.0 is detectable.
    assert detectable_difference(0.9, 10, 10, 0.05, 0.8, 1) is None
