"""core.analysis.group and core.analysis.comparison: what a report says beyond
ProjectScylla's Statistics."""

from __future__ import annotations

import random
import statistics

import pytest
from scipy import stats

from core.analysis.aggregate import ReportSettings, aggregate
from core.analysis.columns import Group
from core.analysis.comparison import compare, compare_experiments
from core.analysis.group import MAX_CALLS_TRACKED, analyse, context_by_call
from core.matrix import Scoring
from core.results.report import Comparison, ExperimentInfo, Verdict
from core.results.run import RunResult, RunStatus
from core.results.transcript import LLMCallMetrics
from tests.support.experiments import make_run


def _run(
    tier: str,
    scenario: str,
    index: int,
    *,
    passed: bool,
    composite: float | None = None,
    status: RunStatus = RunStatus.completed,
    calls: tuple[int, ...] = (),
) -> RunResult:
    """Composites spread a little by index, so medians and ranks are unambiguous."""
    return make_run(
        tier,
        scenario,
        index,
        passed=passed,
        composite=(0.8 if passed else 0.2) + index / 1000 if composite is None else composite,
        status=status,
        llm_calls=[LLMCallMetrics(input_tokens=t, output_tokens=1) for t in calls],
    )


def _runs(tier: str, scenario: str, passes: int, total: int, **extra: object) -> list[RunResult]:
    return [_run(tier, scenario, i, passed=i < passes, **extra) for i in range(total)]  # type: ignore[arg-type]


def _compare(runs: list[RunResult], reference_runs: list[RunResult], reference: str) -> Comparison:
    return compare(Group.of(runs), Group.of(reference_runs), reference)


def test_intervals_pass_at_k_and_flaky_scenarios_of_a_tier() -> None:
    runs = _runs("T", "a", 3, 10) + _runs("T", "b", 10, 10) + _runs("T", "c", 0, 4)
    infra = _run("T", "a", 99, passed=False, status=RunStatus.infra_error)
    result = analyse(Group.of([*runs, infra]))
    ci = stats.binomtest(13, 24).proportion_ci(method="wilson")
    assert result.pass_rate_ci is not None
    assert (result.pass_rate_ci.low, result.pass_rate_ci.high) == pytest.approx((ci.low, ci.high))
    assert result.pass_rate_ci.method.startswith("Wilson")
    # pass@k needs k runs of every scenario: c has only 4.
    assert sorted(result.pass_at_k) == [1, 3]
    assert result.pass_at_k[1] == pytest.approx((0.3 + 1.0 + 0.0) / 3)
    assert result.pass_hat_k[3] == pytest.approx((1 / 120 + 1.0 + 0.0) / 3)
    assert result.flaky_scenarios == ["a"]
    assert result.vs_baseline is None
    assert analyse(Group.of([infra])).pass_rate_ci is None  # infrastructure errors are not results


def test_bootstrap_interval_of_the_median_composite_is_deterministic() -> None:
    runs = _runs("T", "a", 6, 20)
    shuffled = random.Random(3).sample(runs, len(runs))
    first = analyse(Group.of(runs)).composite_median_ci
    assert first is not None and first == analyse(Group.of(shuffled)).composite_median_ci
    median = statistics.median(r.composite_score for r in runs)
    assert first.low < median < first.high


def test_compare_against_scipy_and_the_verdicts() -> None:
    worse = _compare(_runs("B", "s", 2, 12), _runs("A", "s", 10, 12), "A")
    assert worse.fisher_p == pytest.approx(stats.fisher_exact([[2, 10], [10, 2]]).pvalue)
    composites = [r.composite_score for r in _runs("B", "s", 2, 12)]
    reference = [r.composite_score for r in _runs("A", "s", 10, 12)]
    mwu = stats.mannwhitneyu(composites, reference)
    assert worse.mann_whitney_p == pytest.approx(mwu.pvalue)
    assert worse.prob_superior == pytest.approx(mwu.statistic / 144)
    assert worse.verdict is Verdict.worse and worse.pass_rate_delta == pytest.approx(-8 / 12)

    assert _compare(_runs("A", "s", 10, 12), _runs("B", "s", 2, 12), "B").verdict is Verdict.better
    same = _compare(_runs("A", "s", 5, 10), _runs("B", "s", 5, 10), "B")
    assert same.verdict is Verdict.no_difference and same.fisher_p == 1.0
    empty = _compare([], _runs("B", "s", 5, 10), "B")
    assert empty.verdict is Verdict.not_enough_runs and empty.fisher_p is None


def test_a_better_pass_rate_with_worse_scores_is_mixed() -> None:
    # B passes more often, but its runs score lower than the reference's.
    b = [_run("B", "s", i, passed=i < 6, composite=0.5 if i < 6 else 0.0) for i in range(20)]
    a = [_run("A", "s", i, passed=False, composite=0.45) for i in range(20)]
    result = _compare(b, a, "A")
    assert result.fisher_p is not None and result.fisher_p < 0.05
    assert result.mann_whitney_p is not None and result.mann_whitney_p < 0.05
    assert result.prob_superior is not None and result.prob_superior < 0.5
    assert result.verdict is Verdict.mixed


def test_compare_experiments_pairs_tiers_and_scenarios_and_names_regressions() -> None:
    def info(exp_id: str, tiers: list[str]) -> ExperimentInfo:
        return ExperimentInfo(id=exp_id, name="n", created_at=0.0, tiers=tiers, scenarios=["s"])

    a = _runs("T0", "s", 5, 10) + _runs("T1", "s", 9, 10) + _runs("T9", "s", 1, 10)
    b = _runs("T0", "s", 5, 10) + _runs("T1", "s", 1, 10) + _runs("T2", "s", 1, 10)
    result = compare_experiments(info("A", ["T0", "T1", "T9"]), a, info("B", ["T0", "T1", "T2"]), b)
    assert list(result.tiers) == ["T0", "T1"]
    assert result.unmatched_tiers == ["T2", "T9"]
    assert result.regressions == ["T1"]
    assert result.scenarios["T1"]["s"].verdict is Verdict.worse
    assert result.tiers["T1"].reference == "A"


def test_context_by_call_counts_the_runs_that_made_each_call() -> None:
    runs = [
        _run("T", "s", 0, passed=True, calls=(100, 300)),
        _run("T", "s", 1, passed=True, calls=(200, 400, 900)),
        _run("T", "s", 2, passed=True, status=RunStatus.infra_error, calls=(5,)),
    ]
    by_call = context_by_call(Group.of(runs))
    assert [(s.mean, s.count) for s in by_call] == [(150, 2), (350, 2), (900, 1)]
    long = [_run("T", "s", 0, passed=True, calls=tuple(range(MAX_CALLS_TRACKED + 20)))]
    assert len(context_by_call(Group.of(long))) == MAX_CALLS_TRACKED


def test_aggregate_tests_each_tier_and_scenario_against_the_baseline() -> None:
    runs = (
        _runs("T0", "a", 2, 10)
        + _runs("T0", "b", 9, 10)
        + _runs("T1", "a", 9, 10)
        + _runs("T1", "b", 9, 10)
    )
    info = ExperimentInfo(
        id="exp", name="n", created_at=0.0, tiers=["T0", "T1"], scenarios=["a", "b"]
    )
    report = aggregate(info, runs, ReportSettings(baseline="T0", scoring=Scoring()))
    assert report.tiers["T0"].analysis.vs_baseline is None
    assert report.tiers["T0"].scenarios["a"].analysis.vs_baseline is None
    t1 = report.tiers["T1"]
    assert t1.analysis.vs_baseline is not None
    assert t1.analysis.vs_baseline.fisher_p == pytest.approx(
        stats.fisher_exact([[18, 2], [11, 9]]).pvalue
    )
    a = t1.scenarios["a"].analysis.vs_baseline
    b = t1.scenarios["b"].analysis.vs_baseline
    assert (
        a is not None and a.verdict is Verdict.better and (a.passes, a.reference_passes) == (9, 2)
    )
    assert b is not None and b.verdict is Verdict.no_difference
    assert report.tiers["T0"].analysis.flaky_scenarios == ["a", "b"]
    # Pure and deterministic: any order of the runs, the same report byte for byte.
    shuffled = aggregate(
        info,
        random.Random(5).sample(runs, len(runs)),
        ReportSettings(baseline="T0", scoring=Scoring()),
    )
    assert shuffled.model_dump_json() == report.model_dump_json()
