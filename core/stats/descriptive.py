"""ProjectScylla's aggregate statistics over one metric's per-run values.

Median of an even count is the mean of the middle two, mode is the most common
value (the smallest of ties), std_dev is the population one: we hold every run,
not a sample.

Infinity: a run that never passes has an infinite cost of pass, so +inf is a
legitimate value. It is read as the limit of an ever-larger number: it sorts
last (min, max, median and mode follow from the order), makes the mean +inf,
and makes the spread +inf beside a finite value. Among infinite values alone
the spread is not defined (inf - inf): std_dev is None, never 0, which would say
the values agree (null in the report's JSON, "not defined" in its tables; NaN
would be unequal to itself in every report read back). An integer too large for
a float is read as +inf, and a mean or spread whose sum overflows is +inf: a
run's figures may make a statistic unbounded, never stop a report. NaN and -inf
are rejected as values: no metric here is undefined or unbounded below, so they
signal a bug upstream that a number in a report would hide.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Sequence

from core.results.report import Statistics


def statistics(values: Sequence[float]) -> Statistics:
    """Median, mean, mode, min, max, population std_dev and count of `values`."""
    checked = _checked(values)
    if not checked:
        return Statistics(count=0)
    ordered = sorted(checked)
    mean = _mean(ordered)
    spread = _population_variance(ordered, mean)
    return Statistics(
        median=_median(ordered),
        mean=mean,
        mode=_mode(ordered),
        min=ordered[0],
        max=ordered[-1],
        std_dev=None if spread is None else math.sqrt(spread),
        count=len(ordered),
    )


def variance(values: Sequence[float]) -> float | None:
    """Population variance: sum((v - mean)^2) / n; None when not defined (every value
    infinite)."""
    checked = _checked(values)
    if not checked:
        raise ValueError("variance of no values is undefined")
    return _population_variance(checked, _mean(checked))


def _checked(values: Sequence[float]) -> list[float]:
    try:
        checked = list(map(float, values))  # map, any, in: a report checks 100,000s of values
    except OverflowError:
        checked = list(map(_float, values))
    if any(map(math.isnan, checked)):
        raise ValueError("statistics got NaN; a metric value must be a number")
    if -math.inf in checked:
        raise ValueError("statistics got -Infinity; no metric is unbounded below")
    return checked


def _float(value: float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond a float's range
        return math.inf if value > 0 else -math.inf


def _median(ordered: list[float]) -> float:
    mid = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[mid]
    return ordered[mid - 1] / 2 + ordered[mid] / 2  # halves first: no sum beyond a float


def _mean(values: list[float]) -> float:
    if math.inf in values:
        return math.inf
    return _sum(values) / len(values)


def _mode(ordered: list[float]) -> float:
    counts = Counter(ordered)
    top = max(counts.values())
    return min(value for value, count in counts.items() if count == top)


def _population_variance(values: list[float], mean: float) -> float | None:
    """`mean`: _mean(values). None among infinite values alone: inf - inf."""
    if math.inf in values:
        return None if values.count(math.inf) == len(values) else math.inf
    if values.count(values[0]) == len(values):
        return 0.0
    deviations = [v - mean for v in values]
    return _sum(list(map(operator.mul, deviations, deviations))) / len(values)


def _sum(values: list[float]) -> float:
    # fsum: exact summation, so a mean does not depend on the runs' order.
    try:
        return math.fsum(values)
    except OverflowError:  # finite values whose sum is not: +-inf, as a float sum has it
        return sum(values)
