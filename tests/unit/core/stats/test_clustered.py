"""core.stats.clustered and core.stats.distributions against independent implementations:
statsmodels (clustered OLS, StratifiedTable) and scipy (t, chi-squared, ranks), and the
worked example of the issue that asked for them (2 tiers x 4 scenarios x 20 runs)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import statsmodels.api as sm
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats
from statsmodels.stats.contingency_tables import StratifiedTable

from core.stats.clustered import (
    Stratum,
    breslow_day,
    clustered_mean,
    mantel_haenszel,
    paired_t,
    planned_detectable,
    runs_to_detect,
    scenarios_to_detect,
    van_elteren,
)
from core.stats.distributions import chi2_sf, incomplete_beta, t_quantile, t_two_sided
from tests.support.clusters import sato_risk_difference

# The issue's experiment: T0 passes 10 of 20 on every scenario, T1 20, 20, 10 and 6.
T0, T1, RUNS = (10, 10, 10, 10), (20, 20, 10, 6), 20


def _outcomes(passes: int, runs: int = RUNS) -> list[float]:
    return [1.0] * passes + [0.0] * (runs - passes)


def _table(strata: list[Stratum]) -> StratifiedTable:
    return StratifiedTable(
        np.array(
            [
                [
                    [s.passes, s.runs - s.passes],
                    [s.reference_passes, s.reference_runs - s.reference_passes],
                ]
                for s in strata
            ],
            dtype=float,
        ).transpose(1, 2, 0)
    )


# --- the distributions ------------------------------------------------------------------------

dfs = st.one_of(st.integers(1, 300), st.floats(0.5, 5000))


@given(t=st.floats(0, 60), df=dfs)
def test_t_tail_matches_scipy(t: float, df: float) -> None:
    assert t_two_sided(t, df) == pytest.approx(2 * stats.t.sf(t, df), rel=1e-9, abs=1e-300)


@given(p=st.floats(0.001, 0.999), df=dfs)
def test_t_quantile_matches_scipy(p: float, df: float) -> None:
    assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9, abs=1e-12)


@given(x=st.floats(0, 400), df=st.integers(1, 100))
def test_chi2_tail_matches_scipy(x: float, df: int) -> None:
    assert chi2_sf(x, df) == pytest.approx(stats.chi2.sf(x, df), rel=1e-9, abs=1e-300)


# Past 1e-300 scipy's own figures lose digits (subnormal x).
@given(a=st.floats(0.1, 50), b=st.floats(0.1, 50), x=st.just(0.0) | st.floats(1e-300, 1))
def test_incomplete_beta_matches_scipy(a: float, b: float, x: float) -> None:
    from scipy.special import betainc

    assert incomplete_beta(a, b, x) == pytest.approx(betainc(a, b, x), rel=1e-9, abs=1e-300)


# --- the worked example -----------------------------------------------------------------------


def test_the_worked_example_gives_the_issues_figures() -> None:
    t1 = clustered_mean([_outcomes(k) for k in T1])
    assert (t1.mean, t1.clusters, t1.n, t1.df) == (0.7, 4, 80, 3)
    assert round(t1.se_cr0, 3) == 0.154
    assert round(t1.se_cr1, 3) == 0.178
    assert round(t1.se_independent, 3) == 0.051  # what 80 independent runs would give

    paired = paired_t([(a - b) / RUNS for a, b in zip(T1, T0, strict=True)])
    assert round(paired.mean, 2) == 0.20
    assert round(paired.se, 3) == 0.178
    assert (round(paired.low, 2), round(paired.high, 2)) == (-0.37, 0.77)
    assert round(paired.p, 2) == 0.34

    mh = mantel_haenszel([Stratum(a, RUNS, b, RUNS) for a, b in zip(T1, T0, strict=True)])
    assert round(mh.p, 4) == 0.0072
    assert round(mh.p_continuity, 4) == 0.0118
    assert mh.risk_difference == pytest.approx(0.2)


# --- clustered means and paired differences ---------------------------------------------------

clusters = st.lists(
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]) | st.floats(0, 1), min_size=1, max_size=30),
    min_size=2,
    max_size=12,
)


@settings(max_examples=200)
@given(groups=clusters)
def test_clustered_standard_errors_are_statsmodels_cluster_robust_ones(
    groups: list[list[float]],
) -> None:
    values = np.array([x for g in groups for x in g])
    ids = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    fitted = sm.OLS(values, np.ones((len(values), 1)))
    c = clustered_mean(groups)
    assert c.mean == pytest.approx(values.mean(), abs=1e-12)
    # One regressor: statsmodels' correction G/(G-1) (N-1)/(N-K) is CR1's G/(G-1).
    for correction, se in ((False, c.se_cr0), (True, c.se_cr1)):
        robust = fitted.fit(
            cov_type="cluster", cov_kwds={"groups": ids, "use_correction": correction}
        )
        assert se == pytest.approx(float(robust.bse[0]), rel=1e-9, abs=1e-12)
    half = stats.t.ppf(0.975, len(groups) - 1) * c.se_cr1
    assert c.low == pytest.approx(max(0.0, c.mean - half), abs=1e-9)
    assert c.high == pytest.approx(min(1.0, c.mean + half), abs=1e-9)
    assert c.se_independent == pytest.approx(values.std() / math.sqrt(len(values)), abs=1e-12)


def test_design_effect_and_the_intra_scenario_correlation_it_implies() -> None:
    c = clustered_mean([_outcomes(k) for k in T1])
    assert c.design_effect == pytest.approx((c.se_cr0 / c.se_independent) ** 2)
    assert c.design_effect is not None
    assert c.icc == pytest.approx((c.design_effect - 1) / (RUNS - 1))
    # Every run the same: no spread, no design effect to speak of.
    flat = clustered_mean([[1.0, 1.0], [1.0, 1.0]])
    assert (flat.se_cr0, flat.design_effect, flat.icc) == (0.0, None, None)
    with pytest.raises(ValueError, match="two non-empty clusters"):
        clustered_mean([[1.0], []])


@settings(max_examples=200)
@given(d=st.lists(st.floats(-1, 1), min_size=2, max_size=30))
def test_paired_t_matches_scipy(d: list[float]) -> None:
    p = paired_t(d)
    if np.std(d) < 1e-9:
        return  # scipy's NaN; ours is the next test's
    expected = stats.ttest_1samp(d, 0.0)
    ci = expected.confidence_interval(0.95)
    assert p.p == pytest.approx(expected.pvalue, rel=1e-8, abs=1e-12)
    assert p.t == pytest.approx(expected.statistic, rel=1e-9)
    # scipy's interval, clipped to the range a difference of two rates can take.
    assert (p.low, p.high) == (
        pytest.approx(max(-1.0, ci.low), abs=1e-9),
        pytest.approx(min(1.0, ci.high), abs=1e-9),
    )
    assert -1.0 <= p.low <= p.high <= 1.0
    assert p.df == len(d) - 1


@pytest.mark.parametrize("n", [2, 3, 5, 6, 12])
@pytest.mark.parametrize("difference", [0.2, -1.0])
def test_paired_t_with_every_difference_the_same_is_the_sign_tests_p(
    n: int, difference: float
) -> None:
    """No spread, no t (its p of 0 called five scenarios a certainty): the exact sign
    test's p, scipy's binomial test of n differences of n on one side."""
    same = paired_t([difference] * n)
    assert same.t is None and same.se == 0.0
    assert same.p == pytest.approx(stats.binomtest(n, n, 0.5).pvalue, rel=1e-12)
    assert same.p > 0.05 if n <= 5 else same.p < 0.05


def test_paired_t_with_every_difference_zero() -> None:
    same = paired_t([0.0, 0.0])
    assert (same.p, same.t, same.low, same.high) == (1.0, None, 0.0, 0.0)


# --- stratified tables ------------------------------------------------------------------------


@st.composite
def strata(draw: st.DrawFn, min_size: int = 1) -> list[Stratum]:
    out = []
    for _ in range(draw(st.integers(min_size, 8))):
        n1, n0 = draw(st.integers(1, 40)), draw(st.integers(1, 40))
        out.append(Stratum(draw(st.integers(0, n1)), n1, draw(st.integers(0, n0)), n0))
    return out


@settings(max_examples=300)
@given(tables=strata())
def test_cochran_mantel_haenszel_matches_statsmodels(tables: list[Stratum]) -> None:
    mh = mantel_haenszel(tables)
    if not any(s.informative and s.total > 1 for s in tables):
        assert (mh.p, mh.p_continuity) == (1.0, 1.0)
        return
    table = _table([s for s in tables if s.total > 1])
    plain, corrected = table.test_null_odds(), table.test_null_odds(correction=True)
    assert mh.statistic == pytest.approx(plain.statistic, rel=1e-9)
    assert mh.p == pytest.approx(plain.pvalue, rel=1e-7, abs=1e-14)
    if abs(mh.excess) >= 0.5:  # below it statsmodels squares a negative difference
        assert mh.p_continuity == pytest.approx(corrected.pvalue, rel=1e-7, abs=1e-14)


def _sato(tables: list[Stratum]) -> tuple[float, float]:
    """The published formula's RD and variance (tests.support.clusters), exactly."""
    rd, variance = sato_risk_difference(
        [(s.passes, s.runs, s.reference_passes, s.reference_runs) for s in tables]
    )
    return float(rd), float(variance)


def _normal_interval(rd: float, variance: float) -> tuple[float, float]:
    half = stats.norm.ppf(0.975) * math.sqrt(max(variance, 0.0))
    return max(-1.0, rd - half), min(1.0, rd + half)


def test_the_worked_examples_risk_difference_interval_is_the_published_formulas() -> None:
    """The issue's experiment, by hand from Sato, Greenland & Robins (1989): every stratum
    has 20 runs a side, T = 40, weight N1 N0 / T = 10, W = 40. RD = sum (A1 - A0) / 2 / W
    = (10 + 10 + 0 - 4) / 2 / 40 = 1/5. P_i = 400 (A0 - A1) / 1600, so sum P = (-10 - 10 +
    0 + 4) / 4 = -4. Q_i = (A1 (20 - A0) + A0 (20 - A1)) / 80 = 200 / 80 in every stratum
    (200 + 0, 200 + 0, 100 + 100, 60 + 140), so sum Q = 10. Var = (-4/5 + 10) / 40^2 =
    23/4000, SE 0.0758: 0.200 [0.051, 0.349]."""
    tables = [Stratum(a, RUNS, b, RUNS) for a, b in zip(T1, T0, strict=True)]
    rd, variance = sato_risk_difference([(a, RUNS, b, RUNS) for a, b in zip(T1, T0, strict=True)])
    assert (rd, variance) == (Fraction(1, 5), Fraction(23, 4000))
    mh = mantel_haenszel(tables)
    assert mh.risk_difference == pytest.approx(0.2, abs=1e-15)
    low, high = _normal_interval(0.2, 23 / 4000)
    assert (mh.low, mh.high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))
    assert (round(mh.low, 3), round(mh.high, 3)) == (0.051, 0.349)
    # z 1.959964 x SE 0.075829: narrower than the paired t interval [-0.37, +0.77], as
    # it answers for these four scenarios only.
    assert (mh.high - mh.low) / 2 == pytest.approx(1.959964 * 0.075829, rel=1e-5)


@settings(max_examples=300)
@given(tables=strata())
def test_mantel_haenszel_risk_difference_is_the_published_formulas(
    tables: list[Stratum],
) -> None:
    mh = mantel_haenszel(tables)
    rd, variance = _sato(tables)
    low, high = _normal_interval(rd, variance)
    assert mh.risk_difference == pytest.approx(rd, abs=1e-12)
    assert mh.low == pytest.approx(low, abs=1e-9)
    assert mh.high == pytest.approx(high, abs=1e-9)


@st.composite
def common_difference(draw: st.DrawFn) -> list[Stratum]:
    """Strata whose risk differences are all the same, j / L: stratum k has L u runs on
    the tier's side passing at (r + j) / L and L v on the baseline's passing at r / L."""
    scale = draw(st.integers(1, 10))
    shift = draw(st.integers(-scale, scale))
    out = []
    for _ in range(draw(st.integers(1, 8))):
        u, v = draw(st.integers(1, 5)), draw(st.integers(1, 5))
        r = draw(st.integers(max(0, -shift), min(scale, scale - shift)))
        out.append(Stratum(u * (r + shift), scale * u, v * r, scale * v))
    return out


@settings(max_examples=300)
@given(tables=common_difference())
def test_satos_variance_of_a_common_difference_is_the_binomial_one(
    tables: list[Stratum],
) -> None:
    """An independent check of the formula itself: where every stratum's difference is
    the same, RD_MH is a fixed-weight mean of independent binomial differences, whose
    variance is sum_k w_k^2 (p1 q1 / n1 + p0 q0 / n0) / W^2 (w_k = n1 n0 / N): Sato's
    estimator must equal it exactly there (its large-strata consistency), whatever the
    strata's sizes and rates. A sign or factor wrong in P or Q would break it."""
    w = [Fraction(s.runs * s.reference_runs, s.total) for s in tables]
    binomial = (
        sum(
            (
                wk**2
                * (
                    Fraction(s.passes * (s.runs - s.passes), s.runs**3)
                    + Fraction(
                        s.reference_passes * (s.reference_runs - s.reference_passes),
                        s.reference_runs**3,
                    )
                )
                for wk, s in zip(w, tables, strict=True)
            ),
            Fraction(0),
        )
        / sum(w) ** 2
    )
    rd, variance = sato_risk_difference(
        [(s.passes, s.runs, s.reference_passes, s.reference_runs) for s in tables]
    )
    assert variance == binomial
    mh = mantel_haenszel(tables)
    low, high = _normal_interval(float(rd), float(binomial))
    assert mh.risk_difference == pytest.approx(float(rd), abs=1e-12)
    assert (mh.low, mh.high) == (pytest.approx(low, abs=1e-9), pytest.approx(high, abs=1e-9))


def test_satos_variance_in_one_large_stratum_is_the_binomial_one() -> None:
    # One stratum: the risk difference is p1 - p0 and its variance p1 q1 / n1 + p0 q0 / n0.
    mh = mantel_haenszel([Stratum(300, 1000, 200, 1000)])
    se = math.sqrt(0.3 * 0.7 / 1000 + 0.2 * 0.8 / 1000)
    assert mh.risk_difference == pytest.approx(0.1)
    assert (mh.high - mh.low) / 2 == pytest.approx(stats.norm.ppf(0.975) * se, rel=1e-3)


@settings(max_examples=300)
@given(tables=strata(min_size=2))
@example(tables=[Stratum(0, 4, 4, 6), Stratum(2, 2, 4, 28)])
@example(tables=[Stratum(10, 16, 9, 12), Stratum(18, 20, 0, 1)])
def test_breslow_day_matches_statsmodels(tables: list[Stratum]) -> None:
    result = breslow_day(tables)
    kept = [s for s in tables if s.informative]
    table = _table(kept) if len(kept) >= 2 else None
    with np.errstate(divide="ignore"):  # statsmodels' pooled odds ratio of 1 / 0
        pooled = None if table is None else table.oddsratio_pooled
    if table is None or pooled is None or not 0 < pooled < math.inf:
        assert result is None
        return
    assert result is not None
    expected = table.test_equal_odds()
    assert result.df == len(kept) - 1
    if not math.isfinite(expected.statistic):
        # statsmodels solves (1 - OR) x^2 + ... = 0 by the quadratic formula: 0 / 0 when
        # the pooled odds ratio is exactly 1 (a found case: 0/4 vs 4/6 and 2/2 vs 4/28),
        # and a root on a margin, so an infinite statistic, when it is 1 up to rounding
        # (10/16 vs 9/12 and 18/20 vs 0/1).
        assert pooled == pytest.approx(1)
        statistic = _breslow_day_at_odds_one(kept)
        assert result.statistic == pytest.approx(statistic, rel=1e-9)
        assert result.p == pytest.approx(stats.chi2.sf(statistic, len(kept) - 1), rel=1e-6)
        return
    assert result.statistic == pytest.approx(expected.statistic, rel=1e-7, abs=1e-9)
    assert result.p == pytest.approx(expected.pvalue, rel=1e-6, abs=1e-12)


def _breslow_day_at_odds_one(tables: list[Stratum]) -> float:
    """At a common odds ratio of 1 the expected first cell is the hypergeometric mean
    n1 m1 / N, and its variance 1 / sum(1 / cell) over the four expected cells."""
    statistic = 0.0
    for s in tables:
        n1, m1, total = s.runs, s.passes + s.reference_passes, s.runs + s.reference_runs
        e = n1 * m1 / total
        cells = np.array([e, n1 - e, m1 - e, total - n1 - m1 + e])
        statistic += (s.passes - e) ** 2 * float(np.sum(1 / cells))
    return statistic


def test_breslow_day_at_a_pooled_odds_ratio_of_one() -> None:
    # Mantel-Haenszel: ad/n = 0 + 2*24/30 = 1.6 and bc/n = 4*4/10 + 0 = 1.6, so OR = 1;
    # expected first cells 1.6 and 0.4: 2.56 (1/1.6 + 2/2.4 + 1/3.6) = 4.4444
    # plus 2.56 (1/0.4 + 1/1.6 + 1/5.6 + 1/22.4) = 8.5714.
    result = breslow_day([Stratum(0, 4, 4, 6), Stratum(2, 2, 4, 28)])
    assert result is not None and result.df == 1
    assert result.statistic == pytest.approx(4.444444 + 8.571429, abs=1e-5)


def test_breslow_day_finds_the_worked_examples_scenarios_differ() -> None:
    tables = [Stratum(a, RUNS, b, RUNS) for a, b in zip(T1, T0, strict=True)]
    result = breslow_day(tables)
    assert result is not None and result.p < 0.001
    expected = _table(tables).test_equal_odds()
    assert result.statistic == pytest.approx(expected.statistic)


def _van_elteren(samples: list[tuple[list[float], list[float]]]) -> float:
    """van Elteren's z from scipy's ranks and tie correction."""
    total = expected = variance = 0.0
    for x, y in samples:
        n = len(x) + len(y)
        ranks = stats.rankdata([*x, *y])
        w = 1 / (n + 1)
        total += w * ranks[: len(x)].sum()
        expected += w * len(x) * (n + 1) / 2
        variance += w * w * len(x) * len(y) * (n + 1) / 12 * stats.tiecorrect(ranks)
    return (total - expected) / math.sqrt(variance)


scores = st.lists(st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0, 1), min_size=1, max_size=25)


@settings(max_examples=200)
@given(samples=st.lists(st.tuples(scores, scores), min_size=1, max_size=6))
def test_van_elteren_matches_its_formula_on_scipys_ranks(
    samples: list[tuple[list[float], list[float]]],
) -> None:
    result = van_elteren(samples)
    if result.z is None:
        assert result.p == 1.0
        return
    z = _van_elteren(samples)
    assert result.z == pytest.approx(z, rel=1e-9, abs=1e-12)
    assert result.p == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-9, abs=1e-300)


@given(x=scores, y=scores)
def test_van_elteren_of_one_stratum_is_mann_whitney_without_continuity(
    x: list[float], y: list[float]
) -> None:
    result = van_elteren([(x, y)])
    if result.z is None:
        return
    expected = stats.mannwhitneyu(x, y, use_continuity=False, method="asymptotic").pvalue
    assert result.p == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_van_elteren_on_pass_fail_of_equal_strata_is_cochran_mantel_haenszel() -> None:
    ranks = van_elteren([(_outcomes(a), _outcomes(b)) for a, b in zip(T1, T0, strict=True)])
    table = _table([Stratum(a, RUNS, b, RUNS) for a, b in zip(T1, T0, strict=True)])
    assert ranks.z is not None and ranks.z > 0
    assert ranks.p == pytest.approx(table.test_null_odds().pvalue)


# --- planning ---------------------------------------------------------------------------------


def test_planned_detectable_differences_follow_their_formulas() -> None:
    g, m, icc, alpha = 4, 20, 0.25, 0.05
    plan = planned_detectable(g, m, icc, alpha)
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(0.8)
    t = stats.t.ppf(1 - alpha / 2, g - 1) + stats.t.ppf(0.8, g - 1)
    deff = 1 + (m - 1) * icc
    assert plan.these_scenarios == pytest.approx(z * math.sqrt(2 * 0.25 * (1 - icc) / (g * m)))
    assert plan.like_these == pytest.approx(t * math.sqrt(2 * 0.25 * deff / (g * m)))
    assert plan.like_these_limit == pytest.approx(t * math.sqrt(2 * 0.25 * icc / g))
    # Miller's point: past a few runs per scenario, more scenarios buy more than more runs.
    more_runs = planned_detectable(g, 2 * m, icc, alpha).like_these
    more_scenarios = planned_detectable(2 * g, m, icc, alpha).like_these
    assert more_scenarios is not None and more_runs is not None
    assert more_scenarios < more_runs
    assert planned_detectable(1, m, icc, alpha).like_these is None
    with pytest.raises(ValueError, match="correlation"):
        planned_detectable(g, m, 1.5, alpha)


def test_the_fewest_scenarios_or_runs_that_detect_a_difference_are_the_fewest() -> None:
    icc, alpha = 0.3, 0.0125

    def like(g: int, m: int) -> float:
        d = planned_detectable(g, m, icc, alpha).like_these
        assert d is not None
        return d

    g = scenarios_to_detect(0.3, 5, icc, alpha)
    assert g is not None and like(g, 5) <= 0.3 < like(g - 1, 5)
    m = runs_to_detect(0.3, 40, icc, alpha)
    assert m is not None and like(40, m) <= 0.3 < like(40, m - 1)
    # Past the limit of unlimited runs only more scenarios go lower.
    assert runs_to_detect(0.3, 4, icc, alpha) is None
