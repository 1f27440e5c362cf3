"""Inference beyond ProjectScylla's descriptive statistics, in pure Python (scipy: tests only).

- Wilson score interval for a pass rate (no continuity correction).
- Percentile bootstrap interval for a median, seeded and deterministic. It does
  not materialize resamples: the median of a resample of n values is an order
  statistic of n uniform draws mapped through the sample's quantile function,
  and order statistics of uniforms have Beta laws. So each resample costs two
  Beta draws instead of n draws and a sort, and 10,000-run experiments stay fast.
- Fisher's exact test, two-sided: the probability of every table with the same
  margins that is no more likely than the observed one (R's and scipy's rule,
  with R's relative tolerance of 1e-7 for ties in probability).
- Mann-Whitney U, two-sided. "exact" counts the null distribution of U (no
  tie correction); "asymptotic" is the normal approximation with tie
  correction and a 0.5 continuity correction; "auto" takes exact when a
  sample has at most 8 values and there are no ties, else asymptotic:
  scipy.stats.mannwhitneyu's rule, so both give the same p-value.
- Adjusted p-values for a family of tests: Holm's step-down (family-wise error
  rate, any dependence) and Benjamini-Hochberg's step-up (false discovery
  rate), the values statsmodels' multipletests returns ("holm", "fdr_bh").
- Effect sizes with intervals: the risk difference of two pass rates with
  Newcombe's hybrid score interval (his method 10: Wilson intervals of each
  rate, no continuity correction), and Cliff's delta of two samples with
  Cliff's consistent variance estimator and Feng & Cliff's asymmetric interval.
- The smallest pass-rate difference a two-sided test at level alpha detects
  with a given power: the normal approximation of the difference of two
  proportions, its variance at the baseline's rate and the shifted one.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

from core.stats.choices import CORRECTIONS, Correction

MannWhitneyMethod = Literal["auto", "exact", "asymptotic"]

# Largest sample for which "auto" counts the exact distribution of U.
EXACT_MAX_SIZE = 8
# Tables whose probability is within this factor of the observed one count as
# "no more likely" (R's fisher.test: floating-point noise must not split ties).
_FISHER_RELATIVE_TOLERANCE = 1 + 1e-7


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


# --- intervals ------------------------------------------------------------------------------


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion."""
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials > 0, got {successes}/{trials}")
    z = _z(confidence)
    p = successes / trials
    scale = 1 + z * z / trials
    center = (p + z * z / (2 * trials)) / scale
    half = z / scale * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    # At 0/n and n/n the interval touches 0 and 1 exactly; the formula leaves rounding noise.
    low = 0.0 if successes == 0 else center - half
    high = 1.0 if successes == trials else center + half
    return low, high


def bootstrap_median_interval(
    values: Sequence[float], confidence: float = 0.95, resamples: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval for the median (same median rule as core.stats.descriptive)."""
    if not values:
        raise ValueError("a bootstrap interval needs at least one value")
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    _z(confidence)
    ordered = sorted(values)
    rng = random.Random(seed)
    medians = sorted(_resampled_median(ordered, rng) for _ in range(resamples))
    tail = (1 - confidence) / 2
    return _quantile(medians, tail), _quantile(medians, 1 - tail)


def bootstrap_mean_interval(
    values: Sequence[float], confidence: float = 0.95, resamples: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean: within the values' range, so a
    reward's interval never leaves the rewards' own bounds."""
    if not values:
        raise ValueError("a bootstrap interval needs at least one value")
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    _z(confidence)
    rng = random.Random(seed)
    n = len(values)
    means = sorted(math.fsum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1 - confidence) / 2
    return _quantile(means, tail), _quantile(means, 1 - tail)


def _resampled_median(ordered: list[float], rng: random.Random) -> float:
    """The median of one bootstrap resample of `ordered`, drawn from its exact law.

    A resample draw is ordered[floor(n*U)] with U uniform, so the resample's
    j-th smallest value is ordered[floor(n*U_(j))], U_(j) the j-th order
    statistic of n uniforms: U_(j) ~ Beta(j, n-j+1), and given U_(j) = u the
    next one is u + (1-u) * Beta(1, n-j).
    """
    n = len(ordered)
    j = (n + 1) // 2
    u = rng.betavariate(j, n - j + 1)
    lower = ordered[min(int(n * u), n - 1)]
    if n % 2 == 1:
        return lower
    u_next = u + (1 - u) * rng.betavariate(1, n - j)
    return (lower + ordered[min(int(n * u_next), n - 1)]) / 2


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default percentile)."""
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


# --- Fisher's exact test --------------------------------------------------------------------


# Cached: a report asks for the same tables again when it corrects its tests as a family
# (core.analysis.comparison), and each costs a sum over up to 100,000s of tables.
@lru_cache(maxsize=1024)
def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value of Fisher's exact test on the 2x2 table [[a, b], [c, d]]."""
    if min(a, b, c, d) < 0:
        raise ValueError("table cells must be non-negative counts")
    row1, row2, col1 = a + b, c + d, a + c
    total = row1 + row2
    if 0 in (row1, row2, col1, total - col1):
        return 1.0
    low, high = max(0, col1 - row2), min(row1, col1)
    # Unnormalized log-probabilities, log C(row1, x) + log C(row2, col1 - x); dividing by
    # their sum (instead of by C(total, col1)) cancels most of lgamma's rounding, and all
    # tables sum to exactly 1. Written out, log(n!) of the margins taken once: there can
    # be 100,000s of tables.
    lgamma, log_row1, log_row2 = math.lgamma, math.lgamma(row1 + 1), math.lgamma(row2 + 1)
    logs = [
        (log_row1 - lgamma(x + 1) - lgamma(row1 - x + 1))
        + (log_row2 - lgamma(col1 - x + 1) - lgamma(row2 - col1 + x + 1))
        for x in range(low, high + 1)
    ]
    top = max(logs)
    weights = [math.exp(lp - top) for lp in logs]
    cutoff = logs[a - low] + math.log(_FISHER_RELATIVE_TOLERANCE)
    extreme = math.fsum(w for w, lp in zip(weights, logs, strict=True) if lp <= cutoff)
    return min(1.0, extreme / math.fsum(weights))


# --- Mann-Whitney U -------------------------------------------------------------------------


@dataclass(frozen=True)
class MannWhitney:
    u: float  # U of the first sample: pairs (x, y) with x > y, ties counting one half
    p: float  # two-sided
    method: Literal["exact", "asymptotic"]


def mann_whitney_u(
    x: Sequence[float], y: Sequence[float], method: MannWhitneyMethod = "auto"
) -> MannWhitney:
    """Two-sided Mann-Whitney U test of x against y."""
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    ranks, tie_sizes = average_ranks([*x, *y])
    u1 = math.fsum(ranks[:n1]) - n1 * (n1 + 1) / 2
    u = max(u1, n1 * n2 - u1)
    if method == "auto":
        small = min(n1, n2) <= EXACT_MAX_SIZE
        method = "exact" if small and not tie_sizes else "asymptotic"
    if method == "exact":
        # A tied U is a half-integer: truncated, as scipy does (the conservative side).
        p = 2 * _exact_sf(math.floor(u), n1, n2)
    elif method == "asymptotic":
        p = 2 * _normal_sf(u, n1, n2, tie_sizes)
    else:
        raise ValueError(f"unknown method {method!r}: auto, exact or asymptotic")
    return MannWhitney(u=u1, p=min(1.0, p), method=method)


def average_ranks(values: list[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) and the sizes of the groups of tied values."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties = []
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        average = (start + end) / 2 + 1
        for i in range(start, end + 1):
            ranks[order[i]] = average
        if end > start:
            ties.append(end - start + 1)
        start = end + 1
    return ranks, ties


def _normal_sf(u: float, n1: int, n2: int, tie_sizes: list[int]) -> float:
    """P(U >= u) under the normal approximation, tie- and continuity-corrected."""
    n = n1 + n2
    tie_term = sum(t**3 - t for t in tie_sizes)
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:  # every value tied: no evidence either way
        return 0.5
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def _exact_sf(u: int, n1: int, n2: int) -> float:
    """P(U >= u) under the null without ties, by counting arrangements.

    The number of arrangements with U = k is the coefficient of q^k of the
    Gaussian binomial [n1+n2 choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i),
    m = min(n1, n2), n = max(n1, n2): m polynomial steps, exact integers.
    """
    m, n = min(n1, n2), max(n1, n2)
    counts = [1]
    for i in range(1, m + 1):
        grown = counts + [0] * n
        for k in range(len(grown) - 1, n + i - 1, -1):  # times (1 - q^(n+i))
            grown[k] -= grown[k - n - i]
        for k in range(i, len(grown)):  # divided by (1 - q^i)
            grown[k] += grown[k - i]
        counts = grown
    total = math.comb(n1 + n2, m)
    return sum(counts[max(u, 0) :]) / total


# --- multiple comparisons -------------------------------------------------------------------


def adjust_p(pvalues: Sequence[float], method: Correction) -> list[float]:
    """Adjusted p-values, in the order given: a test is significant at level alpha for the
    family when its adjusted p is below alpha. "none" returns them unchanged."""
    for p in pvalues:
        if not 0.0 <= p <= 1.0:  # also refuses NaN
            raise ValueError(f"p-values must be within [0, 1], got {p}")
    m = len(pvalues)
    order = sorted(range(m), key=pvalues.__getitem__)
    adjusted = list(map(float, pvalues))
    if method == "none":
        return adjusted
    if method == "holm":
        # Step down: the i-th smallest (0-based) times m - i, never below the ones before it.
        running = 0.0
        for rank, index in enumerate(order):
            running = max(running, min(1.0, (m - rank) * pvalues[index]))
            adjusted[index] = running
        return adjusted
    if method == "bh":
        # Step up: the i-th smallest (1-based) times m / i, never above the ones after it.
        running = 1.0
        for rank in range(m, 0, -1):
            index = order[rank - 1]
            running = min(running, m / rank * pvalues[index])
            adjusted[index] = running
        return adjusted
    raise ValueError(f"unknown correction {method!r}: {', '.join(CORRECTIONS)}")


def lone_test_alpha(alpha: float, method: Correction, tests: int) -> float:
    """The level one test must reach to be significant when every other test of its family
    is null: alpha / tests under Holm and Benjamini-Hochberg (the first step of both),
    alpha uncorrected."""
    if method == "none" or tests <= 1:
        return alpha
    return alpha / tests


# --- effect sizes ---------------------------------------------------------------------------


def risk_difference_interval(
    successes: int, trials: int, ref_successes: int, ref_trials: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Newcombe's hybrid score interval (method 10) of successes/trials - ref/ref_trials."""
    p1, p2 = successes / trials, ref_successes / ref_trials
    l1, u1 = wilson_interval(successes, trials, confidence)
    l2, u2 = wilson_interval(ref_successes, ref_trials, confidence)
    delta = p1 - p2
    low = delta - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = delta + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return max(-1.0, low), min(1.0, high)


@dataclass(frozen=True)
class CliffsDelta:
    delta: float  # P(x > y) - P(x < y), in [-1, 1]
    low: float | None  # the interval; None with fewer than two values in a sample
    high: float | None


def cliffs_delta(x: Sequence[float], y: Sequence[float], confidence: float = 0.95) -> CliffsDelta:
    """Cliff's delta of x over y with its interval.

    Variance: Cliff's (1993) consistent estimator from the dominance matrix
    d_ij = sign(x_i - y_j), floored at (1 - delta^2) / (n*m - 1), his lower
    bound (the estimator can come out at or below 0 in small samples).
    Interval: Feng & Cliff's asymmetric one, (delta - delta^3 +- z*s*
    sqrt((1 - delta^2)^2 + z^2*s^2)) / (1 - delta^2 + z^2*s^2), which stays in
    [-1, 1]; at delta = +-1 (no overlap) it is its limit under the floor,
    the other end at (N - z^2) / (N + z^2), N = n*m - 1.

    Computed from ranks, not the n*m matrix: row and column sums of the
    dominance matrix are rank counts, and sum((d_ij - delta)^2) = (pairs not
    tied) - n*m*delta^2.
    """
    n, m = len(x), len(y)
    if n == 0 or m == 0:
        raise ValueError("both samples need at least one value")
    z = _z(confidence)
    # (#y below, #y above) each value of x, and (#x below, #x above) each value of y: by
    # distinct value, as runs' scores repeat (pass or fail, a share of gates).
    y_around = _around(sorted(y), x)
    x_around = _around(sorted(x), y)
    # Row i: (#y below x_i) - (#y above x_i); column j likewise for x against y_j.
    rows = [below - above for below, above in map(y_around.__getitem__, x)]
    cols = [above - below for below, above in map(x_around.__getitem__, y)]
    pairs = n * m
    delta = math.fsum(rows) / pairs
    if n < 2 or m < 2:
        return CliffsDelta(delta, None, None)
    not_tied = sum(below + above for below, above in map(y_around.__getitem__, x))
    row_dev = math.fsum((r / m - delta) ** 2 for r in rows)
    col_dev = math.fsum((c / n - delta) ** 2 for c in cols)
    cell_dev = not_tied - pairs * delta * delta
    variance = (m * m * row_dev + n * n * col_dev - cell_dev) / (pairs * (n - 1) * (m - 1))
    floor = (1 - delta * delta) / (pairs - 1)
    if abs(delta) == 1.0:
        inner = (pairs - 1 - z * z) / (pairs - 1 + z * z)
        return CliffsDelta(delta, *sorted((delta, math.copysign(inner, delta))))
    s2 = max(variance, floor)
    spread = z * math.sqrt(s2) * math.sqrt((1 - delta * delta) ** 2 + z * z * s2)
    denominator = 1 - delta * delta + z * z * s2
    centre = delta - delta**3
    return CliffsDelta(delta, (centre - spread) / denominator, (centre + spread) / denominator)


def _around(ordered: list[float], values: Iterable[float]) -> dict[float, tuple[int, int]]:
    """value -> (how many of `ordered` are below it, how many above), for each of `values`."""
    return {
        v: (bisect_left(ordered, v), len(ordered) - bisect_right(ordered, v)) for v in set(values)
    }


# --- power ----------------------------------------------------------------------------------


def detectable_difference(
    reference_rate: float,
    reference_trials: int,
    trials: int,
    alpha: float,
    power: float = 0.8,
    direction: Literal[1, -1] = 1,
) -> float | None:
    """The smallest d > 0 a two-sided test at level `alpha` detects with `power` when the
    rate moves from `reference_rate` to reference_rate + direction * d.

    Normal approximation: detected when d >= (z_{1-alpha/2} + z_power) * sqrt(p0*q0/n0
    + p1*q1/n1), p1 the shifted rate (the far tail ignored). Squared, that is a
    quadratic in d with exactly one positive root, so it is exact and defined at
    p0 = 0 and p0 = 1. None when the smallest such d would leave [0, 1] (a
    baseline at 0 cannot be detected getting worse).
    """
    if not 0.0 <= reference_rate <= 1.0:
        raise ValueError(f"reference rate must be within [0, 1], got {reference_rate}")
    if reference_trials < 1 or trials < 1:
        raise ValueError("both groups need at least one trial")
    if not 0.0 < power < 1.0 or not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha and power must be within (0, 1), got {alpha}, {power}")
    room = 1 - reference_rate if direction == 1 else reference_rate
    if room == 0:
        return None
    k = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    p0, k2 = reference_rate, k * k
    # d^2 (1 + k2/n1) - d k2 s (1 - 2 p0) / n1 - k2 p0 q0 (1/n0 + 1/n1) >= 0
    a = 1 + k2 / trials
    b = -k2 * direction * (1 - 2 * p0) / trials
    c = -k2 * p0 * (1 - p0) * (1 / reference_trials + 1 / trials)
    d = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    return d if d <= room else None
