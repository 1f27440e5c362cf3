"""Inference beyond the seeds' descriptive statistics, in pure Python (scipy is for tests only).

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
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

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
    """Percentile bootstrap interval for the median (same median rule as core.stats)."""
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


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value of Fisher's exact test on the 2x2 table [[a, b], [c, d]]."""
    if min(a, b, c, d) < 0:
        raise ValueError("table cells must be non-negative counts")
    row1, row2, col1 = a + b, c + d, a + c
    total = row1 + row2
    if 0 in (row1, row2, col1, total - col1):
        return 1.0
    low, high = max(0, col1 - row2), min(row1, col1)
    # Unnormalized log-probabilities; dividing by their sum (instead of by C(total, col1))
    # cancels most of lgamma's rounding, and all tables sum to exactly 1.
    logs = [_log_comb(row1, x) + _log_comb(row2, col1 - x) for x in range(low, high + 1)]
    top = max(logs)
    weights = [math.exp(lp - top) for lp in logs]
    cutoff = logs[a - low] + math.log(_FISHER_RELATIVE_TOLERANCE)
    extreme = math.fsum(w for w, lp in zip(weights, logs, strict=True) if lp <= cutoff)
    return min(1.0, extreme / math.fsum(weights))


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


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
    ranks, tie_sizes = _ranks([*x, *y])
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


def _ranks(values: list[float]) -> tuple[list[float], list[int]]:
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
