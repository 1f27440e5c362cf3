"""core.stats.descriptive against ProjectScylla's examples and Python's `statistics` module."""

from __future__ import annotations

import math
import statistics as reference

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.results.report import Statistics
from core.stats.descriptive import statistics, variance

# Small integers give ties (mode), wide floats give rounding (mean, std_dev).
values_strategy = st.lists(
    st.one_of(
        st.integers(min_value=-5, max_value=5).map(float),
        st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
    ),
    min_size=1,
    max_size=40,
)


def test_seed_example_2_ten_run_aggregation() -> None:
    pass_rates = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    result = statistics(pass_rates)
    assert result.median == 1.0
    assert result.mean == pytest.approx(0.8)
    assert result.mode == 1.0
    assert result.min == 0.0
    assert result.max == 1.0
    assert result.std_dev == pytest.approx(0.4)
    assert result.count == 10


def test_median_of_even_count_is_mean_of_middle_two() -> None:
    assert statistics([4.0, 1.0, 3.0, 2.0]).median == 2.5


def test_mode_is_smallest_of_ties() -> None:
    assert statistics([3.0, 2.0, 3.0, 2.0, 5.0]).mode == 2.0


def test_std_dev_is_population() -> None:
    assert statistics([1.0, 3.0]).std_dev == 1.0  # the sample std_dev would be 1.414


def test_empty_gives_count_zero_and_no_values() -> None:
    assert statistics([]) == Statistics(count=0)
    assert statistics([]).median is None


def test_one_value() -> None:
    result = statistics([0.3])
    assert (result.median, result.mean, result.mode, result.min, result.max) == (0.3,) * 5
    assert result.std_dev == 0.0


def test_integers_become_floats() -> None:
    assert statistics([1200, 1800]).median == 1500.0


@pytest.mark.parametrize("bad", [math.nan, -math.inf])
def test_nan_and_negative_infinity_are_rejected(bad: float) -> None:
    with pytest.raises(ValueError):
        statistics([1.0, bad])
    with pytest.raises(ValueError):
        variance([1.0, bad])


def test_infinity_sorts_last_and_makes_mean_and_spread_infinite() -> None:
    result = statistics([2.0, math.inf, 1.0])
    assert (result.min, result.median, result.max) == (1.0, 2.0, math.inf)
    assert result.mean == math.inf
    assert result.std_dev == math.inf
    assert result.mode == 1.0


def test_infinity_in_the_middle_two_makes_the_median_infinite() -> None:
    assert statistics([1.0, math.inf]).median == math.inf


def test_the_spread_of_infinite_values_alone_is_not_defined() -> None:
    """inf - inf has no value: a spread of 0 would say the runs agree."""
    result = statistics([math.inf, math.inf])
    assert (result.median, result.mean, result.mode) == (math.inf, math.inf, math.inf)
    assert result.std_dev is None and result.count == 2
    assert variance([math.inf]) is None
    assert statistics([1.0, math.inf]).std_dev == math.inf
    assert statistics([5.0, 5.0]).std_dev == 0.0


def test_variance_is_population_variance_seed_example_3() -> None:
    found = variance([0.70, 0.80, 0.85, 0.90])
    assert found == pytest.approx(0.00546875)
    assert found is not None and round(found, 5) == 0.00547


def test_variance_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        variance([])


@given(values_strategy)
def test_matches_python_statistics(values: list[float]) -> None:
    result = statistics(values)
    assert result.count == len(values)
    assert result.median == reference.median(values)
    assert result.mode == min(reference.multimode(values))
    assert result.min == min(values)
    assert result.max == max(values)
    assert result.mean is not None and result.std_dev is not None
    assert math.isclose(result.mean, reference.mean(values), rel_tol=1e-12, abs_tol=1e-9)
    assert math.isclose(result.std_dev, reference.pstdev(values), rel_tol=1e-9, abs_tol=1e-8)
    spread = variance(values)
    assert spread is not None
    assert math.isclose(spread, reference.pvariance(values), rel_tol=1e-9, abs_tol=1e-8)


@given(st.data(), values_strategy)
def test_order_of_values_does_not_matter(data: st.DataObject, values: list[float]) -> None:
    shuffled = data.draw(st.permutations(values))
    assert statistics(shuffled) == statistics(values)


def test_figures_beyond_a_float_make_statistics_unbounded_never_raise() -> None:
    """A run's figure too large for a float (an int of 400 digits) or values whose sum
    overflows are read as +inf: the report is made, with the statistic unbounded."""
    huge = statistics([10**400, 3, 4])
    assert (huge.max, huge.mean, huge.median, huge.min, huge.count) == (
        math.inf,
        math.inf,
        4.0,
        3.0,
        3,
    )
    wide = statistics([1e308, 1e308, 1e308])
    assert (wide.median, wide.mean, wide.std_dev) == (1e308, math.inf, 0.0)
    assert statistics([1e308, 1.7e308]).median == 1.35e308
