"""ProjectScylla's aggregate statistics over one metric's per-run values.

Median of an even count is the mean of the middle two, mode is the most common
value (the smallest of ties), std_dev is the population one: we hold every run,
not a sample.

Infinity: a run that never passes has an infinite cost of pass, so +inf is a
legitimate value. It is read as the limit of an ever-larger number: it sorts
last (min, max, median and mode follow from the order), makes the mean +inf,
and makes the spread +inf unless every value is the same. So is an integer too
large for a float, and a mean or spread whose sum overflows is +inf: a run's
figures may make a statistic unbounded, never stop a report. NaN and -inf are
rejected: no metric here is undefined or unbounded below, so they signal a bug
upstream that a number in a report would hide.
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
    return Statistics(
        median=_median(ordered),
        mean=mean,
        mode=_mode(ordered),
        min=ordered[0],
        max=ordered[-1],
        std_dev=math.sqrt(_population_variance(ordered, mean)),
        count=len(ordered),
    )


def variance(values: Sequence[float]) -> float:
    """Population variance: sum((v - mean)^2) / n."""
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


def _population_variance(values: list[float], mean: float) -> float:
    """`mean`: _mean(values)."""
    if values.count(values[0]) == len(values):
        return 0.0
    if math.inf in values:
        return math.inf
    deviations = [v - mean for v in values]
    return _sum(list(map(operator.mul, deviations, deviations))) / len(values)


def _sum(values: list[float]) -> float:
    # fsum: exact summation, so a mean does not depend on the runs' order.
    try:
        return math.fsum(values)
    except OverflowError:  # finite values whose sum is not: +-inf, as a float sum has it
        return sum(values)
