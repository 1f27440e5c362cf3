"""What every table of a report is made of: the Table, how a number is written, the
headline pass rate, and the rows (each tier, then its scenarios).

One place decides how the numbers a reader sees are written, so every format
(markdown, HTML, github, the terminal) says the same thing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from core.analysis.comparison import CONFIDENCE
from core.results.report import ExperimentReport, Interval, NoInterval, Statistics, TierReport
from core.stats.significance import wilson_interval

ALL = "(all)"

# The headline pass rate, named by what it is wherever it is a column.
PASS_RATE = f"pass rate (passes/counted) [{CONFIDENCE:.0%} CI]"


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    # The first `label_columns` columns name the row (tier, scenario, metric): left-aligned.
    label_columns: int = 1
    # Columns a narrow terminal leaves out, first to go first; the others wrap.
    narrow_drop: tuple[str, ...] = ()
    # Columns of words (a verdict with where it came from): in the terminal they wrap
    # at their words within WORDS_WIDTH rather than widen the table until figures
    # are left out.
    words: tuple[str, ...] = ()
    # Per row, a command to copy ("" for none): the terminal prints it under its row,
    # whole on a line of its own, never wrapped or cut.
    commands: tuple[str, ...] = ()


WORDS_WIDTH = 32


# A figure with no value to give (the spread of infinite values: inf - inf), never 0.
NOT_DEFINED = "not defined"


def num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{_unsigned_zero(value, digits):.{digits}f}"


def _unsigned_zero(value: float, digits: int) -> float:
    """`value`, but 0 where it rounds to zero at `digits`: a difference of -0.00004
    printed "-0.000" reads as a loss that is not there."""
    return round(value, digits) + 0.0


def per_pass(cost_of_pass: float | None) -> str:
    """A tier's cost of pass in a "cost of pass $" column: "no pass" where it is
    infinite (the seed's definition: cost over a pass rate of 0), not "inf"."""
    if cost_of_pass is not None and math.isinf(cost_of_pass):
        return "no pass"
    return num(cost_of_pass, 4)


def points(difference: float) -> str:
    """A difference of pass rates in points, as a reader says it: 0.629 is 63 points."""
    shown = f"{difference * 100:.0f}"
    return f"{shown} point" + ("" if shown == "1" else "s")


def duration(seconds: float | None) -> str:
    """Seconds as a reader takes them in: a quick run in ms, not "0.0 s"."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


def median_spread(stats: Statistics, digits: int = 3) -> str:
    if stats.count == 0:
        return "-"
    if stats.count == 1:
        return num(stats.median, digits)
    return f"{num(stats.median, digits)} (±{num(stats.std_dev, digits)})"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{_unsigned_zero(value * 100, 1):+.1f}%"


def p_value(p: float | None) -> str:
    if p is None:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def with_interval(value: float | None, interval: Interval | None) -> str:
    if value is None:
        return "-"
    if interval is None:
        return num(value)
    return f"{num(value)} [{num(interval.low)}, {num(interval.high)}]"


def signed(value: float | None) -> str:
    return "-" if value is None else f"{_unsigned_zero(value, 3):+.3f}"


# In a table cell, where an interval is not reported: the note under the table says why.
NO_INTERVAL = "(no interval)"


def bounds(interval: Interval | None) -> tuple[float | None, float | None]:
    """An interval's ends, as a table of raw numbers or a chart takes them."""
    return (None, None) if interval is None else (interval.low, interval.high)


def bracket(interval: Interval | NoInterval | None) -> str:
    """The interval of a difference, signed as the difference is (and as github shows it)."""
    if isinstance(interval, NoInterval):
        return NO_INTERVAL
    return "-" if interval is None else f"[{signed(interval.low)}, {signed(interval.high)}]"


def signed_interval(value: float | None, interval: Interval | None) -> str:
    if value is None:
        return "-"
    if interval is None:
        return signed(value)
    return f"{signed(value)} [{signed(interval.low)}, {signed(interval.high)}]"


def pass_share(passes: int, counted: int) -> Interval | None:
    """The Wilson interval of passes / counted runs, None without counted runs; the share
    itself is `passes / counted` (analysis.pass_rate_ci is the same interval)."""
    if counted == 0:
        return None
    low, high = wilson_interval(passes, counted, CONFIDENCE)
    return Interval(low=low, high=high, confidence=CONFIDENCE, method="Wilson score")


def pass_rate(passes: int, counted: int) -> str:
    """The headline pass rate: passes / counted with its Wilson interval."""
    return with_interval(passes / counted if counted else None, pass_share(passes, counted))


def cells(
    report: ExperimentReport, scenario: str | None = None
) -> Iterable[tuple[str, str, TierReport]]:
    """(tier, scenario or ALL, report) for every tier, then its scenarios; with `scenario`,
    only that scenario of each tier."""
    for tier_id, tier in report.tiers.items():
        if scenario is None:
            yield tier_id, ALL, tier
        for scenario_id, cell in tier.scenarios.items():
            if scenario in (None, scenario_id):
                yield tier_id, scenario_id, cell
