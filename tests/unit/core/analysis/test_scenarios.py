"""A tier with its scenarios taken into account (core.analysis.scenarios), through the
report's own aggregation: which rows get the figures, the family they are corrected in,
the scenarios named against the grain, and a single-scenario report left as it was."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import StratifiedTable

from core.analysis.aggregate import ReportSettings, aggregate
from core.analysis.comparison import compare_experiments, correct_report
from core.matrix import Scoring
from core.results.report import ExperimentInfo, ExperimentReport
from core.results.run import RunResult, RunStatus
from scheduler.report.render import render
from scheduler.report.scenarios import questions_table
from tests.support.experiments import make_run
from tests.support.oracles import multipletests

RUNS = 20


def _report(passes: dict[str, Sequence[int]], runs: int = RUNS) -> ExperimentReport:
    scenarios = [f"s{i + 1}" for i in range(len(next(iter(passes.values()))))]
    made = [
        make_run(tier, scenario, i, passed=i < k, impl=1.0 if i < k else 0.0)
        for tier, counts in passes.items()
        for scenario, k in zip(scenarios, counts, strict=True)
        for i in range(runs)
    ]
    info = ExperimentInfo(id="e", name="n", created_at=0.0, tiers=list(passes), scenarios=scenarios)
    return aggregate(info, made, ReportSettings(baseline="T0", scoring=Scoring()))


def test_only_tier_rows_with_two_scenarios_get_the_figures() -> None:
    report = _report({"T0": (10, 10, 10, 10), "T1": (20, 20, 10, 6)})
    t0, t1 = report.tiers["T0"].analysis, report.tiers["T1"].analysis
    assert t0.pass_rate_clustered is not None and t0.across_scenarios is None  # the baseline
    assert t1.across_scenarios is not None
    assert t1.across_scenarios.reference == "T0"
    for cell in report.tiers["T1"].scenarios.values():
        a = cell.analysis
        assert (a.pass_rate_clustered, a.composite_mean_clustered, a.across_scenarios) == (
            None,
            None,
            None,
        )
    # The run-level family is what it was: two tests per tier and scenario row.
    assert report.multiplicity is not None and report.multiplicity.tests == 10
    assert report.multiplicity_across_scenarios is not None
    assert report.multiplicity_across_scenarios.tests == 4


def test_a_single_scenario_report_is_what_it_was() -> None:
    report = _report({"T0": (5,), "T1": (9,)}, runs=10)
    t1 = report.tiers["T1"].analysis
    assert (t1.pass_rate_clustered, t1.composite_mean_clustered, t1.across_scenarios) == (
        None,
        None,
        None,
    )
    assert report.multiplicity_across_scenarios is None
    assert report.multiplicity is not None and report.multiplicity.tests == 2
    vs = t1.vs_baseline
    assert vs is not None and (vs.verdict_from, vs.pooled_verdict) == (None, None)
    for fmt in ("markdown", "table", "html"):
        shown = render(report, fmt, width=250)
        assert "Scenarios as clusters" not in shown and "on scenarios like these" not in shown


def test_a_tier_with_scenarios_is_judged_on_them_not_on_its_pooled_runs() -> None:
    # s2 is easy for both; on s1 T1 passes 6 of 20 where T0 passes none. Pooled over
    # both, 26/40 against 20/40 is no significant difference; within the scenarios it is.
    report = _report({"T0": (0, 20), "T1": (6, 20)})
    vs = report.tiers["T1"].analysis.vs_baseline
    c = report.tiers["T1"].analysis.across_scenarios
    assert vs is not None and c is not None
    table = StratifiedTable(
        np.array([[[6, 14], [0, 20]], [[20, 0], [20, 0]]], dtype=float).transpose(1, 2, 0)
    )
    cmh_p = table.test_null_odds().pvalue
    assert c.these_scenarios.cmh_p == pytest.approx(cmh_p, rel=1e-9)
    # CMH and van Elteren (the same test here), first of the four Holm adjusts.
    assert c.these_scenarios.cmh_p_adjusted == pytest.approx(4 * cmh_p)
    assert 4 * cmh_p < 0.05
    assert vs.fisher_p_adjusted is not None and vs.fisher_p_adjusted > 0.05
    assert (vs.verdict, vs.pooled_verdict) == ("better", "no significant difference")
    assert vs.verdict_from == "CMH and van Elteren on these 2 scenarios"
    assert correct_report(report, "holm", 0.05) == report
    unadjusted = correct_report(report, "none", 0.05).tiers["T1"].analysis.vs_baseline
    assert unadjusted is not None and unadjusted.pooled_verdict == "no significant difference"
    for fmt in ("markdown", "table", "html"):
        shown = " ".join(html.unescape(render(report, fmt, width=250)).split())
        assert "better (CMH and van Elteren on these 2 scenarios)" in shown, fmt
        assert (
            "T1: better (CMH and van Elteren on these 2 scenarios); pooled over its runs, "
            "Fisher and Mann-Whitney say no significant difference" in shown
        ), fmt
    github = render(report, "github")
    assert github.splitlines()[0] == (
        "**✅ Against baseline T0: T1 better** (CMH and van Elteren on these 2 scenarios; "
        "Holm-corrected across the 4 across-scenario tests, alpha 0.05)"
    )


def test_the_family_is_corrected_with_the_reports_correction_and_redone_on_request() -> None:
    report = _report({"T0": (10, 10, 10, 10), "T1": (20, 20, 10, 6), "T2": (12, 9, 14, 11)})

    def family(r: ExperimentReport) -> tuple[list[float], list[float | None]]:
        raw, adjusted = [], []
        for tier in ("T1", "T2"):
            c = r.tiers[tier].analysis.across_scenarios
            assert c is not None
            these, like = c.these_scenarios, c.like_these
            raw += [these.cmh_p, these.van_elteren_p, like.pass_rate.p, like.composite.p]
            adjusted += [
                these.cmh_p_adjusted,
                these.van_elteren_p_adjusted,
                like.pass_rate.p_adjusted,
                like.composite.p_adjusted,
            ]
        return raw, adjusted

    raw, adjusted = family(report)
    assert adjusted == pytest.approx(list(multipletests(raw, method="holm")[1]))
    bh = correct_report(report, "bh", 0.05)
    assert family(bh)[1] == pytest.approx(list(multipletests(raw, method="fdr_bh")[1]))
    assert bh.multiplicity_across_scenarios is not None
    assert bh.multiplicity_across_scenarios.correction == "bh"
    assert correct_report(bh, "holm", 0.05) == report  # a stored report, corrected again


def test_a_scenario_significantly_against_the_grain_is_named_as_such() -> None:
    # Far better on three scenarios, far worse on the fourth.
    report = _report({"T0": (2, 2, 2, 20), "T1": (20, 20, 20, 0)})
    c = report.tiers["T1"].analysis.across_scenarios
    assert c is not None
    assert c.these_scenarios.verdict == "better"
    assert c.heterogeneity.opposite == ["s4"]
    assert c.heterogeneity.significant_opposite == ["s4"]
    shown = " ".join(render(report, "markdown").split())
    assert (
        "T1: better on these scenarios overall, but worse on s4 (0.000 against 1.000), "
        "significantly, by its own test" in shown
    )


def test_enough_scenarios_to_generalise_and_both_questions_agree() -> None:
    report = _report({"T0": (5, 6, 4, 5, 6), "T1": (18, 19, 17, 18, 20)})
    c = report.tiers["T1"].analysis.across_scenarios
    assert c is not None
    assert c.like_these.too_few_scenarios is False
    assert (c.these_scenarios.verdict, c.like_these.verdict) == ("better", "better")
    said = [note for note in questions_table(report).notes if note.startswith("T1:")]
    assert said and not any("too few" in n or "not shown to carry over" in n for n in said)


@pytest.mark.parametrize(
    ("scenarios", "verdict"), [(5, "no significant difference"), (8, "better")]
)
def test_the_same_difference_in_every_scenario_is_weighed_by_the_sign_test(
    scenarios: int, verdict: str
) -> None:
    """T1 passes every run and T0 none, in each scenario: every difference 1, no spread.
    The t test's p of 0 called 5 such scenarios a certainty about scenarios like these;
    the sign test's 2 / 2^5 = 0.0625 does not, and 8 (0.0078, Holm's 0.016) do."""
    report = _report({"T0": (0,) * scenarios, "T1": (RUNS,) * scenarios})
    c = report.tiers["T1"].analysis.across_scenarios
    assert c is not None and c.like_these.pass_rate.t is None
    assert c.like_these.pass_rate.p == pytest.approx(stats.binomtest(scenarios, scenarios).pvalue)
    assert c.like_these.verdict == verdict


def test_a_tier_without_counted_runs_has_nothing_to_compare() -> None:
    broken = [
        make_run("T1", s, i, passed=False, status=RunStatus.infra_error)
        for s in ("s1", "s2")
        for i in range(3)
    ]
    baseline = [make_run("T0", s, i) for s in ("s1", "s2") for i in range(3)]
    info = ExperimentInfo(
        id="e", name="n", created_at=0.0, tiers=["T0", "T1"], scenarios=["s1", "s2"]
    )
    empty = aggregate(info, [*baseline, *broken], ReportSettings(baseline="T0", scoring=Scoring()))
    t1 = empty.tiers["T1"].analysis
    assert (t1.pass_rate_clustered, t1.across_scenarios) == (None, None)


def test_planning_uses_the_intra_scenario_correlation_observed() -> None:
    report = _report({"T0": (10, 10, 10, 10), "T1": (20, 20, 10, 6)})
    c = report.tiers["T1"].analysis.across_scenarios
    t0 = report.tiers["T0"].analysis.pass_rate_clustered
    t1 = report.tiers["T1"].analysis.pass_rate_clustered
    assert c is not None and c.planning is not None and t0 is not None and t1 is not None
    plan = c.planning
    assert t0.icc == 0.0  # every scenario alike: no correlation to speak of
    assert t1.icc is not None and plan.icc == pytest.approx((t0.icc + t1.icc) / 2)
    assert (plan.scenarios, plan.runs, plan.alpha) == (4, RUNS, pytest.approx(0.05 / 4))
    level, icc = plan.alpha, plan.icc
    z = stats.norm.ppf(1 - level / 2) + stats.norm.ppf(0.8)
    t = stats.t.ppf(1 - level / 2, 3) + stats.t.ppf(0.8, 3)
    assert plan.these_scenarios == pytest.approx(z * math.sqrt(0.5 * (1 - icc) / (4 * RUNS)))
    deff = 1 + (RUNS - 1) * icc
    assert plan.like_these == pytest.approx(t * math.sqrt(0.5 * deff / (4 * RUNS)))
    assert plan.like_these_twice_the_scenarios is not None
    assert plan.like_these_twice_the_runs is not None
    assert plan.like_these is not None and plan.like_these_limit is not None
    assert plan.like_these_twice_the_scenarios < plan.like_these_twice_the_runs

    def like_these(g: int) -> float:
        t = stats.t.ppf(1 - level / 2, g - 1) + stats.t.ppf(0.8, g - 1)
        return float(t * math.sqrt(0.5 * (1 + (RUNS - 1) * icc) / (g * RUNS)))

    fewest = next(g for g in range(2, 1000) if like_these(g) <= 0.3)
    said = [n for n in questions_table(report).notes if "planning" in n]
    assert said == [
        "T1: planning, at the intra-scenario correlation observed (0.21), the smallest "
        "difference in pass rate 4 scenarios x 20 runs detect (80% power at 0.0125): on "
        f"these scenarios a difference of {plan.these_scenarios * 100:.0f} points or more; on "
        "scenarios like these none (the smallest it could detect, "
        f"{math.ceil(plan.like_these * 100)} points, is more than the 100 pass rates span), with "
        "twice "
        f"the scenarios a difference of {plan.like_these_twice_the_scenarios * 100:.0f} points "
        "or more, with twice the runs none (the smallest it could detect, "
        f"{math.ceil(plan.like_these_twice_the_runs * 100)} points, is more than the 100 pass "
        "rates "
        "span); more runs "
        "alone cannot be counted on to detect less: how much scenarios differ from one "
        "another bounds what more runs per scenario can detect, and 4 scenarios cannot "
        f"measure it; more scenarios can: {fewest} scenarios x {RUNS} runs would detect 30 "
        "points at this correlation"
    ]


def _runs(passes: dict[str, Sequence[int]]) -> list[RunResult]:
    return [
        make_run(tier, f"s{j + 1}", i, passed=i < k, impl=1.0 if i < k else 0.0)
        for tier, counts in passes.items()
        for j, k in enumerate(counts)
        for i in range(RUNS)
    ]


def test_compare_judges_a_tier_with_scenarios_on_them_in_a_family_of_its_own() -> None:
    def info(exp_id: str, scenarios: int) -> ExperimentInfo:
        ids = [f"s{i + 1}" for i in range(scenarios)]
        return ExperimentInfo(id=exp_id, name=exp_id, created_at=0.0, tiers=["T0"], scenarios=ids)

    one = compare_experiments(info("a", 1), _runs({"T0": (10,)}), info("b", 1), _runs({"T0": (2,)}))
    assert one.across_scenarios == {} and one.multiplicity_across_scenarios is None
    assert one.tiers["T0"].verdict_from is None and one.regressions == ["T0"]

    # The T1 against T0, as B against A: better on these four scenarios.
    a, b = _runs({"T0": (10, 10, 10, 10)}), _runs({"T0": (20, 20, 10, 6)})
    holm = compare_experiments(info("a", 4), a, info("b", 4), b)
    bh = compare_experiments(info("a", 4), a, info("b", 4), b, correction="bh")
    for result, method in ((holm, "holm"), (bh, "fdr_bh")):
        c = result.across_scenarios["T0"]
        raw = [
            c.these_scenarios.cmh_p,
            c.these_scenarios.van_elteren_p,
            c.like_these.pass_rate.p,
            c.like_these.composite.p,
        ]
        adjusted = [
            c.these_scenarios.cmh_p_adjusted,
            c.these_scenarios.van_elteren_p_adjusted,
            c.like_these.pass_rate.p_adjusted,
            c.like_these.composite.p_adjusted,
        ]
        assert adjusted == pytest.approx(list(multipletests(raw, method=method)[1]))
        assert result.tiers["T0"].verdict == c.these_scenarios.verdict == "better"
        assert c.heterogeneity.opposite == ["s4"]
        assert result.regressions == []
