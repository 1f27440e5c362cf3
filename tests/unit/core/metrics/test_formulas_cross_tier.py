"""ProjectScylla's cross-tier metrics (docs/METRICS.md) against hand-computed examples,
edge cases included: consistency, frontier cost of pass, best-value tier, per-metric
uplift and the cross-tier variance of the impl rate."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from core.analysis.aggregate import ReportSettings, aggregate
from core.matrix import Scoring
from core.metrics import formulas
from core.results.report import CrossTierResult, ExperimentInfo, ExperimentReport
from core.results.run import RunResult
from tests.support.experiments import make_run

# Four runs a tier: (passed, impl rate) each, and every run's cost.
HAND = {
    "T0": ([(True, 0.8), (False, 0.2), (False, 0.2), (False, 0.4)], 1.0),
    "T1": ([(True, 1.0), (True, 1.0), (True, 0.8), (False, 0.6)], 2.0),
    "T2": ([(False, 0.0)] * 4, 0.5),
}


def _runs(spec: Mapping[str, tuple[list[tuple[bool, float]], float | None]]) -> list[RunResult]:
    return [
        make_run(tier, index=i, passed=passed, impl=impl, cost=cost)
        for tier, (outcomes, cost) in spec.items()
        for i, (passed, impl) in enumerate(outcomes)
    ]


def _report(runs: list[RunResult], tiers: list[str]) -> ExperimentReport:
    info = ExperimentInfo(id="exp", name="x", created_at=0.0, tiers=tiers, scenarios=["s1"])
    return aggregate(info, runs, ReportSettings(baseline=tiers[0], scoring=Scoring()))


def test_hand_computed_example() -> None:
    report = _report(_runs(HAND), list(HAND))
    t0, t1, t2 = (report.tiers[t] for t in HAND)
    # Composites (pass + impl) / 2. T0: 0.9, 0.1, 0.1, 0.2: mean 0.325, population std
    # sqrt(0.4475 / 4) = 0.3345 > mean, so 1 - std/mean < 0 is clamped to 0.
    assert t0.consistency == 0.0
    # T1: 1.0, 1.0, 0.9, 0.3: mean 0.8, std sqrt(0.34 / 4) = 0.29155 -> 1 - 0.29155/0.8.
    assert t1.consistency == pytest.approx(1 - math.sqrt(0.085) / 0.8)
    assert t1.consistency == pytest.approx(0.635565, abs=1e-6)
    # T2 scores 0 every run: mean 0, the same every time.
    assert t2.consistency == 1.0

    cross = report.cross_tier
    # Cost of pass = mean cost / pass share: T0 1.0 / 0.25 = 4, T1 2.0 / 0.75, T2 never.
    assert (t0.cost_of_pass, t2.cost_of_pass) == (4.0, math.inf)
    assert cross.frontier_cost_of_pass == pytest.approx(2 / 0.75)
    assert cross.frontier_tier == "T1"
    # Median composite per median $: T0 0.15 / 1.0, T1 0.95 / 2.0, T2 0 / 0.5.
    assert cross.best_value_tier == "T1"
    # Uplift: pass share 0.75 vs 0.25, impl medians 0.9 vs 0.3, composite medians
    # 0.95 vs 0.15, cost medians 2.0 vs 1.0.
    t1_up, t2_up = cross.uplift["T1"], cross.uplift["T2"]
    assert t1_up.pass_rate == pytest.approx(2.0)
    assert t1_up.impl_rate == pytest.approx(2.0)
    assert t1_up.composite == pytest.approx(0.8 / 0.15) == cross.tier_uplift["T1"]
    assert t1_up.cost_change == pytest.approx(1.0)
    assert (t2_up.pass_rate, t2_up.impl_rate, t2_up.composite) == (-1.0, -1.0, -1.0)
    assert t2_up.cost_change == pytest.approx(-0.5)
    assert "T0" not in cross.uplift
    # Impl medians 0.3, 0.9, 0.0: mean 0.4, (0.01 + 0.25 + 0.16) / 3.
    assert cross.impl_rate_variance == pytest.approx(0.14)


def test_nothing_passes_and_nothing_scores() -> None:
    cross = _report(
        _runs({"T0": ([(False, 0.0)] * 3, 1.0), "T1": ([(False, 0.0)] * 3, 2.0)}), ["T0", "T1"]
    ).cross_tier
    assert (cross.frontier_cost_of_pass, cross.frontier_tier) == (None, None)
    assert cross.best_value_tier is None
    # A zero baseline has no relative change: undefined, not 0 and not infinite.
    up = cross.uplift["T1"]
    assert (up.pass_rate, up.impl_rate, up.composite) == (None, None, None)
    assert up.cost_change == 1.0
    assert cross.impl_rate_variance == 0.0


def test_a_single_tier() -> None:
    report = _report(_runs({"T0": ([(True, 1.0), (False, 0.5)], 0.2)}), ["T0"])
    cross = report.cross_tier
    assert cross.uplift == {} and cross.impl_rate_variance == 0.0
    assert (cross.frontier_cost_of_pass, cross.frontier_tier) == (pytest.approx(0.4), "T0")
    assert cross.best_value_tier == "T0"
    # Composites 1.0 and 0.25: mean 0.625, std 0.375 -> 1 - 0.6 = 0.4.
    assert report.tiers["T0"].consistency == pytest.approx(0.4)


def test_a_free_tier_is_the_best_value_and_unknown_costs_stay_out() -> None:
    spec: dict[str, tuple[list[tuple[bool, float]], float | None]] = {
        "T0": ([(True, 1.0)] * 2, 1.0),
        "T1": ([(False, 0.2)] * 2, 0.0),  # free, composite 0.1
        "T2": ([(True, 1.0)] * 2, None),  # cost unknown
    }
    report = _report(_runs(spec), list(spec))
    cross = report.cross_tier
    assert cross.best_value_tier == "T1"
    assert cross.frontier_tier == "T0"  # T1 never passes, T2's cost is unknown
    assert cross.uplift["T2"].cost_change is None
    assert report.tiers["T2"].cost_of_pass is None


def test_formulas_alone() -> None:
    assert formulas.consistency(0.5, 0.1) == pytest.approx(0.8)
    assert formulas.consistency(0.5, 0.0) == 1.0
    assert formulas.consistency(0.1, 0.3) == 0.0
    assert formulas.consistency(0.0, 0.0) == 1.0
    with pytest.raises(ValueError, match="non-negative"):
        formulas.consistency(-0.1, 0.1)
    with pytest.raises(ValueError, match="non-negative"):
        formulas.consistency(math.nan, 0.1)
    assert formulas.frontier_cost_of_pass({"A": 2.0, "B": 1.0, "C": 1.0}) == (1.0, "B")
    assert formulas.frontier_cost_of_pass({"A": math.inf}) is None
    assert formulas.frontier_cost_of_pass({}) is None
    # Ties in value go to the higher score, then the first tier.
    assert formulas.best_value_tier({"A": (0.4, 2.0), "B": (0.2, 1.0)}) == "A"
    assert formulas.best_value_tier({"A": (0.2, 1.0), "B": (0.2, 1.0)}) == "A"
    assert formulas.best_value_tier({"A": (0.9, 1.0), "B": (0.1, 0.0)}) == "B"
    assert formulas.best_value_tier({"A": (0.0, 0.0)}) is None
    assert formulas.best_value_tier({}) is None


def test_reports_stored_before_these_metrics_still_load() -> None:
    old = CrossTierResult.model_validate({"baseline": "T0", "tier_uplift": {"T1": 0.2}})
    assert old.uplift == {} and old.frontier_tier is None and old.best_value_tier is None
