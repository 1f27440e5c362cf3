"""Statistics that respect how runs are drawn: a few scenarios, many runs of each.

The runs of one scenario share its difficulty, so they are not independent draws
(Miller 2024, "Adding Error Bars to Evals", arXiv 2411.00640). Two questions
follow, each with its own statistics:

- "on these scenarios": the scenarios are fixed; a tier is compared with the
  baseline within each scenario and the scenarios pooled as strata:
  Cochran-Mantel-Haenszel's test on passes (Mantel & Haenszel 1959), the
  Mantel-Haenszel common risk difference with Sato's variance (Sato, Greenland
  & Robins 1989, Biometrics 45:1323-1324), van Elteren's (1960) stratified
  rank-sum test on scores, and Breslow & Day's (1980) test of whether the odds
  ratio is the same in every scenario;
- "on scenarios like these": the scenarios are a sample; the data are the
  per-scenario differences of the means, tested with Student's t on n - 1
  degrees of freedom, and a tier's mean has a clustered standard error (the
  Liang-Zeger sandwich, CR0, with the G / (G - 1) small-sample factor, CR1) and
  a t interval on G - 1 degrees of freedom (Cameron & Miller 2015).

Planning: the design effect 1 + (m - 1) rho of m runs per scenario at an
intra-scenario correlation rho (Kish 1965) gives the smallest difference each
question detects with a given power. Pure Python; statsmodels and scipy check
every figure in the tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist, fmean

from core.stats.distributions import chi2_sf, t_quantile, t_two_sided
from core.stats.significance import average_ranks

# Fewer scenarios than this are too few to say much about scenarios like them.
MIN_SCENARIOS_TO_GENERALISE = 5
# Fewer scenarios than this are too few for any interval across scenarios: with two, the t
# interval has one degree of freedom (t 12.7 at 95%), wider than every rate's range, and
# says nothing the range does not.
MIN_SCENARIOS_FOR_INTERVAL = 3
# Planning's power, and the pass rate it assumes: at 0.5 a pass rate varies most (the
# cautious side).
PLANNING_POWER = 0.8
PLANNING_RATE = 0.5
# When no difference is detectable, planning says what would detect this one: 30 points of
# pass rate, a difference a change of prompt or model is commonly hoped to make.
PLANNING_TARGET = 0.3


def _t_interval(
    mean: float, se: float, df: int, confidence: float, bounds: tuple[float, float]
) -> tuple[float, float]:
    """mean +- t * se within `bounds`, the range the estimate can take: past it the
    interval would hold impossible values, not more uncertainty."""
    half = t_quantile(0.5 + confidence / 2, df) * se
    return max(bounds[0], mean - half), min(bounds[1], mean + half)


# --- a tier's mean with scenarios as clusters ------------------------------------------------


@dataclass(frozen=True)
class Clustered:
    mean: float
    clusters: int
    n: int
    se_independent: float
    se_cr0: float
    se_cr1: float
    df: int
    low: float
    high: float
    design_effect: float | None
    icc: float | None


def clustered_mean(clusters: Sequence[Sequence[float]], confidence: float = 0.95) -> Clustered:
    """The mean of every value, its SE with each inner sequence a cluster, and the t
    interval on clusters - 1 degrees of freedom (clipped to [0, 1]: a rate or a score).

    CR0 = sqrt(sum_g (sum_{i in g} (x_i - mean))^2) / N; CR1 = CR0 * sqrt(G / (G - 1)).
    The design effect is (CR0 / SE_independent)^2, SE_independent = sqrt(population
    variance / N); the intra-scenario correlation it implies, (deff - 1) / (m - 1),
    m the mean cluster size.
    """
    groups = [list(map(float, g)) for g in clusters if g]
    if len(groups) < 2:
        raise ValueError("clustered standard errors need at least two non-empty clusters")
    values = [x for g in groups for x in g]
    n, g_count = len(values), len(groups)
    mean = math.fsum(values) / n
    cr0 = math.sqrt(math.fsum(math.fsum(x - mean for x in g) ** 2 for g in groups)) / n
    cr1 = cr0 * math.sqrt(g_count / (g_count - 1))
    independent = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / n / n)
    deff = None if independent == 0 else (cr0 / independent) ** 2
    size = n / g_count
    icc = None if deff is None or size <= 1 else min(1.0, max(0.0, (deff - 1) / (size - 1)))
    low, high = _t_interval(mean, cr1, g_count - 1, confidence, (0.0, 1.0))
    return Clustered(mean, g_count, n, independent, cr0, cr1, g_count - 1, low, high, deff, icc)


# --- paired per-scenario differences ---------------------------------------------------------


@dataclass(frozen=True)
class Paired:
    n: int
    mean: float
    se: float
    df: int
    t: float | None
    p: float
    low: float
    high: float


def paired_t(differences: Sequence[float], confidence: float = 0.95) -> Paired:
    """One-sample t test of the differences against 0 (two-sided), with its t interval
    clipped to [-1, 1] (each a difference of two rates or scores in [0, 1]).

    With every difference the same the SE is 0 and t is undefined (its p of 0 would
    call 5 scenarios a certainty): p is then the exact two-sided sign test's, every
    one of the n differences on the same side, 2 / 2^n (1 when they are all 0)."""
    n = len(differences)
    if n < 2:
        raise ValueError("a paired t test needs at least two differences")
    mean = fmean(differences)
    # Equal differences have no spread, whatever rounding the mean leaves.
    sd = (
        0.0
        if max(differences) == min(differences)
        else math.sqrt(math.fsum((d - mean) ** 2 for d in differences) / (n - 1))
    )
    se = sd / math.sqrt(n)
    if se == 0:
        return Paired(
            n, mean, 0.0, n - 1, None, min(1.0, 2.0 ** (1 - n)) if mean else 1.0, mean, mean
        )
    t = mean / se
    low, high = _t_interval(mean, se, n - 1, confidence, (-1.0, 1.0))
    return Paired(n, mean, se, n - 1, t, t_two_sided(t, n - 1), low, high)


# --- stratified 2x2 tables -------------------------------------------------------------------


@dataclass(frozen=True)
class Stratum:
    """One scenario's 2x2 table: the tier's passes of its runs, the baseline's of its."""

    passes: int
    runs: int
    reference_passes: int
    reference_runs: int

    def __post_init__(self) -> None:
        if not (
            0 <= self.passes <= self.runs and 0 <= self.reference_passes <= self.reference_runs
        ):
            raise ValueError(f"passes must be within 0..runs: {self}")
        if self.runs < 1 or self.reference_runs < 1:
            raise ValueError(f"a stratum needs runs on both sides: {self}")

    @property
    def total(self) -> int:
        return self.runs + self.reference_runs

    @property
    def all_passes(self) -> int:
        return self.passes + self.reference_passes

    @property
    def informative(self) -> bool:
        """Passes and failures both occur: the table says something about the odds."""
        return 0 < self.all_passes < self.total


@dataclass(frozen=True)
class MantelHaenszel:
    statistic: float  # without continuity correction
    p: float
    p_continuity: float
    excess: float  # sum of (passes - expected): its sign is the direction
    risk_difference: float
    se: float  # of the risk difference: the square root of Sato's variance
    low: float
    high: float


def mantel_haenszel(strata: Sequence[Stratum], confidence: float = 0.95) -> MantelHaenszel:
    """Cochran-Mantel-Haenszel's test of no association in any stratum (chi-squared on 1
    df; p 1 when no stratum has both passes and failures) and the Mantel-Haenszel common
    risk difference with Sato's variance and a normal interval (clipped to [-1, 1]).

    CMH = (|sum(a_k - E a_k)| - c)^2 / sum Var a_k, E a_k = n1 m1 / N, Var a_k = n1 n0 m1 m0
    / (N^2 (N - 1)), c = 0 or 0.5. RD = sum (a n0 - c n1) / N / sum n1 n0 / N; Var = (RD P +
    Q) / W^2, P = sum (n1^2 c - n0^2 a + n1 n0 (n0 - n1) / 2) / N^2, Q = sum (a (n0 - c) +
    c (n1 - a)) / (2 N), W = sum n1 n0 / N.
    """
    if not strata:
        raise ValueError("need at least one stratum")
    excess = variance = 0.0
    rd_num = weights = p_sum = q_sum = 0.0
    for s in strata:
        a, n1, c, n0, total = s.passes, s.runs, s.reference_passes, s.reference_runs, s.total
        m1 = s.all_passes
        excess += a - n1 * m1 / total
        if total > 1:
            variance += n1 * n0 * m1 * (total - m1) / (total * total * (total - 1))
        rd_num += (a * n0 - c * n1) / total
        weights += n1 * n0 / total
        p_sum += (n1 * n1 * c - n0 * n0 * a + n1 * n0 * (n0 - n1) / 2) / (total * total)
        q_sum += (a * (n0 - c) + c * (n1 - a)) / (2 * total)
    if variance > 0:
        statistic = excess * excess / variance
        corrected = max(0.0, abs(excess) - 0.5) ** 2 / variance
        p, p_cc = chi2_sf(statistic, 1), chi2_sf(corrected, 1)
    else:
        statistic, p, p_cc = 0.0, 1.0, 1.0
    rd = rd_num / weights
    rd_variance = max(0.0, (rd * p_sum + q_sum) / (weights * weights))
    se = math.sqrt(rd_variance)
    half = NormalDist().inv_cdf(0.5 + confidence / 2) * se
    return MantelHaenszel(
        statistic, p, p_cc, excess, rd, se, max(-1.0, rd - half), min(1.0, rd + half)
    )


@dataclass(frozen=True)
class BreslowDay:
    statistic: float
    df: int
    p: float


def breslow_day(strata: Sequence[Stratum]) -> BreslowDay | None:
    """Breslow & Day's test that the odds ratio is the same in every stratum, without
    Tarone's adjustment (statsmodels' StratifiedTable.test_equal_odds). Strata with only
    passes or only failures say nothing about an odds ratio and are left out; None with
    fewer than two left, or when the Mantel-Haenszel odds ratio is 0 or infinite."""
    kept = [s for s in strata if s.informative]
    if len(kept) < 2:
        return None
    ad = math.fsum(s.passes * (s.reference_runs - s.reference_passes) / s.total for s in kept)
    bc = math.fsum((s.runs - s.passes) * s.reference_passes / s.total for s in kept)
    if ad == 0 or bc == 0:
        return None
    odds = ad / bc
    statistic = 0.0
    for s in kept:
        n1, m1, total = s.runs, s.all_passes, s.total
        expected = _expected_first_cell(odds, n1, m1, total)
        cells = (expected, n1 - expected, m1 - expected, total - n1 - m1 + expected)
        # Divided by the variance of the first cell, 1 / sum(1 / cell).
        statistic += (s.passes - expected) ** 2 * math.fsum(1 / x for x in cells)
    return BreslowDay(statistic, len(kept) - 1, chi2_sf(statistic, len(kept) - 1))


def _expected_first_cell(odds: float, n1: int, m1: int, total: int) -> float:
    """The a of the table with these margins whose odds ratio is `odds`: the root of
    (1 - r) x^2 + (r (n1 + m1) + N - n1 - m1) x - r n1 m1 = 0 between its bounds."""
    low, high = max(0, n1 + m1 - total), min(n1, m1)
    if odds == 1:
        return n1 * m1 / total
    a = 1 - odds
    b = odds * (n1 + m1) + total - n1 - m1
    c = -odds * n1 * m1
    root = math.sqrt(b * b - 4 * a * c)
    # The product of the roots is c / a; the one computed without cancellation first.
    first = (-b - math.copysign(root, b)) / (2 * a)
    second = c / (a * first) if first else (-b + math.copysign(root, b)) / (2 * a)
    return first if low < first < high else second


# --- van Elteren's stratified rank-sum test --------------------------------------------------


@dataclass(frozen=True)
class VanElteren:
    z: float | None  # None when every stratum's values are all tied
    p: float


def van_elteren(strata: Sequence[tuple[Sequence[float], Sequence[float]]]) -> VanElteren:
    """van Elteren's test (two-sided, normal): each stratum's rank sum of the first sample
    weighted by 1 / (N_k + 1), its null variance with the tie correction. z > 0: the first
    sample scores higher. Strata with an empty side are left out."""
    statistic = expected = variance = 0.0
    for x, y in strata:
        n1, n0 = len(x), len(y)
        if not n1 or not n0:
            continue
        total = n1 + n0
        ranks, ties = average_ranks([*x, *y])
        weight = 1 / (total + 1)
        statistic += weight * math.fsum(ranks[:n1])
        expected += weight * n1 * (total + 1) / 2
        tie_term = sum(t**3 - t for t in ties) / (total * (total - 1)) if total > 1 else 0.0
        variance += weight * weight * n1 * n0 / 12 * ((total + 1) - tie_term)
    if variance <= 0:
        return VanElteren(None, 1.0)
    z = (statistic - expected) / math.sqrt(variance)
    return VanElteren(z, min(1.0, math.erfc(abs(z) / math.sqrt(2))))


# --- planning --------------------------------------------------------------------------------


def design_effect(runs: float, icc: float) -> float:
    """Kish's design effect of `runs` runs per scenario at intra-scenario correlation icc."""
    return 1 + (runs - 1) * icc


@dataclass(frozen=True)
class Detectable:
    these_scenarios: float  # the smallest pass-rate difference, "on these scenarios"
    like_these: float | None  # "on scenarios like these"; None with one scenario
    like_these_limit: float | None  # the same with unlimited runs per scenario


def planned_detectable(
    scenarios: int,
    runs: int,
    icc: float,
    alpha: float,
    power: float = PLANNING_POWER,
    rate: float = PLANNING_RATE,
) -> Detectable:
    """The smallest difference of two tiers' pass rates each question detects with
    `power` in a two-sided test at `alpha`, each tier with `runs` runs of each of
    `scenarios` scenarios, every run passing at `rate` with intra-scenario
    correlation icc (variance s2 = rate (1 - rate)).

    On these scenarios only the runs within a scenario vary: (z_{1-a/2} + z_power)
    sqrt(2 s2 (1 - icc) / (G m)). On scenarios like these the scenarios vary too:
    (t_{G-1,1-a/2} + t_{G-1,power}) sqrt(2 s2 deff / (G m)), deff = 1 + (m - 1) icc,
    which assumes the two tiers' scenario effects unrelated (the cautious side: a
    tier and the baseline finding the same scenarios hard cancels some of it). As m
    grows it tends to (t + t) sqrt(2 s2 icc / G): only more scenarios go below that.
    """
    if scenarios < 1 or runs < 1:
        raise ValueError("need at least one scenario and one run")
    if not 0.0 <= icc <= 1.0:
        raise ValueError(f"the intra-scenario correlation must be within [0, 1], got {icc}")
    if not 0.0 < rate < 1.0 or not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError("rate, alpha and power must be within (0, 1)")
    s2 = rate * (1 - rate)
    normal = NormalDist()
    z = normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(power)
    these = z * math.sqrt(2 * s2 * (1 - icc) / (scenarios * runs))
    if scenarios < 2:
        return Detectable(these, None, None)
    df = scenarios - 1
    t = t_quantile(1 - alpha / 2, df) + t_quantile(power, df)
    like = t * math.sqrt(2 * s2 * design_effect(runs, icc) / (scenarios * runs))
    limit = t * math.sqrt(2 * s2 * icc / scenarios)
    return Detectable(these, like, limit)


# Past this many scenarios or runs per scenario, planning says "more than" rather than search.
MOST_PLANNED = 100_000


def scenarios_to_detect(
    target: float, runs: int, icc: float, alpha: float, power: float = PLANNING_POWER
) -> int | None:
    """The fewest scenarios, each with `runs` runs, whose question on scenarios like
    these detects a pass-rate difference of `target` (planned_detectable); None past
    MOST_PLANNED."""
    return _fewest(lambda g: planned_detectable(g, runs, icc, alpha, power).like_these, target, 2)


def runs_to_detect(
    target: float, scenarios: int, icc: float, alpha: float, power: float = PLANNING_POWER
) -> int | None:
    """The fewest runs per scenario with which `scenarios` scenarios detect a pass-rate
    difference of `target` on scenarios like these; None when no number of runs does
    (the limit with unlimited runs is above it: only more scenarios go lower)."""
    return _fewest(
        lambda m: planned_detectable(scenarios, m, icc, alpha, power).like_these, target, 1
    )


def _fewest(detectable: Callable[[int], float | None], target: float, start: int) -> int | None:
    # The detectable difference falls as scenarios or runs grow: double, then bisect.
    high = start
    while (d := detectable(high)) is None or d > target:
        if high >= MOST_PLANNED:
            return None
        high = min(2 * high, MOST_PLANNED)
    low = max(start, high // 2)
    while low < high:
        middle = (low + high) // 2
        d = detectable(middle)
        if d is not None and d <= target:
            high = middle
        else:
            low = middle + 1
    return high
