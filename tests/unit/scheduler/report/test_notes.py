"""Caveats a report must state rather than hide."""

from __future__ import annotations

import re

import pytest

from core.analysis.aggregate import ReportSettings, aggregate
from core.matrix import Scoring
from core.results.report import ExperimentInfo
from core.results.run import InteractionMetrics, RunResult, RunStatus
from scheduler.report.render import render


def run(index: int, *, approximate: bool, cost: float | None) -> RunResult:
    return RunResult(
        experiment_id="e",
        run_id=f"e:T0:s:{index}",
        tier="T0",
        scenario="s",
        run_index=index,
        status=RunStatus.completed,
        passed=True,
        pass_rate=1.0,
        impl_rate=1.0,
        composite_score=1.0,
        cost_usd=cost,
        interaction=InteractionMetrics(exit_codes_approximate=approximate, source="transcript"),
    )


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_reports_say_when_exit_codes_are_approximate_and_costs_unknown(fmt: str) -> None:
    runs = [run(0, approximate=True, cost=None), run(1, approximate=False, cost=0.5)]
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=2)
    report = aggregate(info, runs, ReportSettings(baseline="T0", scoring=Scoring()))
    assert report.tiers["T0"].approximate_exit_code_runs == 1
    text = render(report, fmt)
    assert "exit codes are approximate for 1 run " in text
    assert "cost unknown for 1 run " in text


def test_exact_reports_carry_no_caveats() -> None:
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=1)
    report = aggregate(
        info,
        [run(0, approximate=False, cost=0.1)],
        ReportSettings(baseline="T0", scoring=Scoring()),
    )
    text = render(report, "markdown")
    assert "approximate" not in text and "cost unknown" not in text


def _scored(
    index: int, passed: bool, composite: float, tier: str = "T0", scenario: str = "s"
) -> RunResult:
    return run(index, approximate=False, cost=0.1).model_copy(
        update={"run_id": f"e:{tier}:{scenario}:{index}", "tier": tier, "scenario": scenario,
                "passed": passed, "pass_rate": float(passed), "composite_score": composite}
    )  # fmt: skip


@pytest.mark.parametrize("fmt", ["table", "markdown", "html"])
def test_a_perfect_median_over_failed_runs_is_noted(fmt: str) -> None:
    # Weighted on implementation only, failed runs can score the best composite too.
    runs = [_scored(i, i < 2, 1.0) for i in range(3)]
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=3)
    report = aggregate(info, runs, ReportSettings(baseline="T0", scoring=Scoring(pass_weight=0.0)))
    text = render(report, fmt, width=300)
    assert "T0: the median composite is 1.000 (grade A) although 1 of 3 counted runs failed" in text


def test_no_note_when_the_median_is_below_the_best_or_every_run_passed() -> None:
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=3)
    below = aggregate(
        info,
        [_scored(i, i < 2, 0.9) for i in range(3)],
        ReportSettings(baseline="T0", scoring=Scoring()),
    )
    flawless = aggregate(
        info,
        [_scored(i, True, 1.0) for i in range(3)],
        ReportSettings(baseline="T0", scoring=Scoring()),
    )
    for report in (below, flawless):
        assert "the median composite is" not in render(report, "markdown")


@pytest.mark.parametrize("brief", [True, False])
def test_a_report_of_the_baseline_alone_says_no_test_was_run_not_zero_were_corrected(
    brief: bool,
) -> None:
    runs = [run(0, approximate=False, cost=0.5), run(1, approximate=False, cost=0.5)]
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=2)
    report = aggregate(info, runs, ReportSettings(baseline="T0", scoring=Scoring()))
    assert report.multiplicity is not None and report.multiplicity.tests == 0
    text = " ".join(render(report, "table", full=not brief).split())
    assert "across the 0" not in text
    assert "no tier beside the baseline has runs to compare with it: no test, no verdict" in text


def test_a_tier_with_no_pass_shows_no_pass_for_its_cost_of_pass_not_inf() -> None:
    passed = [_scored(i, True, 1.0) for i in range(3)]
    failed = [_scored(i, False, 0.0, "T1") for i in range(3)]
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=6)
    report = aggregate(info, passed + failed, ReportSettings(baseline="T0", scoring=Scoring()))
    assert report.tiers["T1"].cost_of_pass == float("inf")  # the seed's definition stays
    brief = render(report, "table", full=False)
    [row] = [line for line in brief.splitlines() if line.startswith("T1 ")]
    assert row.split()[-2:] == ["no", "pass"] and not re.search(r"\binf\b", brief)
    full = render(report, "table", width=200)
    assert "Seed metrics: T1 (grade F, no pass)" in full
    assert "Seed metrics: T0 (grade A, cost of pass $0.1000)" in full
    # A tier's own cost of pass, wherever a table gives it (the seed's statistics of
    # the per-run values keep theirs: a failed run's is infinite).
    tier_rows = [line for line in full.splitlines() if line.startswith("T1 ")]
    assert tier_rows and all(not re.search(r"\binf\b", line) for line in tier_rows)
    assert any(line.rstrip().endswith("no pass") for line in tier_rows)


@pytest.mark.parametrize("scenarios", [["s"], ["s", "t"]])
def test_a_verdict_from_the_composite_scores_alone_says_so_beside_the_pass_rates(
    scenarios: list[str],
) -> None:
    """T1 passes as often as T0 (never) and scores higher every time: "better" from the
    composite-score test alone (Mann-Whitney; with two scenarios, van Elteren), which
    the one screen says beside pass rates that did not differ."""
    runs = [
        _scored(i, False, composite, tier, scenario)
        for scenario in scenarios
        for tier, composite in (("T0", 0.1), ("T1", 0.4), ("T2", 0.1))
        for i in range(10)
    ]
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=len(runs))
    report = aggregate(info, runs, ReportSettings(baseline="T0", scoring=Scoring()))
    vs = report.tiers["T1"].analysis.vs_baseline
    assert vs is not None and vs.verdict.value == "better"
    assert (vs.verdict_from is not None) == (len(scenarios) > 1)
    text = " ".join(render(report, "table", full=False, width=200).split())
    assert (
        "T1 (better): pass rate no significant difference, composite scores better "
        "(a verdict is either test's: passes, composite scores)" in text
    )
    assert "T2 (" not in text  # no verdict of one test alone: no note


def test_a_paired_t_test_with_no_spread_is_shown_as_no_test_not_a_tiny_p() -> None:
    """Two scenarios where T1's pass rate is 1 point above T0's in each: every difference
    the same, SE 0, and the t test's p of 0 is no evidence (it once read "< 0.001"
    beside "too few scenarios")."""
    runs = [
        _scored(i, tier == "T1", 1.0 if tier == "T1" else 0.0, tier, scenario)
        for scenario in ("s", "t")
        for tier in ("T0", "T1")
        for i in range(10)
    ]
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=len(runs))
    report = aggregate(info, runs, ReportSettings(baseline="T0", scoring=Scoring()))
    across = report.tiers["T1"].analysis.across_scenarios
    assert across is not None and across.like_these.pass_rate.t is None
    text = render(report, "table", width=250)
    rows = [line for line in text.splitlines() if "like these (2)" in line]
    assert rows and all("no test: SE 0" in line for line in rows), rows
    assert all("<0.001" not in line.split("like these (2)")[1] for line in rows), rows


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_a_difference_too_small_to_print_is_printed_as_zero_not_negative_zero(fmt: str) -> None:
    """A tier 0.00002 below the baseline read "uplift -0.0%, Δ median composite
    -0.000": a loss the figures cannot show."""
    base = [_scored(i, True, 0.50002) for i in range(3)]
    other = [_scored(i, True, 0.5, tier="T1") for i in range(3)]
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=6, tiers=["T0", "T1"])
    report = aggregate(info, base + other, ReportSettings(baseline="T0", scoring=Scoring()))
    text = render(report, fmt, full=True, width=300)
    assert re.search(r"-0\.0+(?![0-9])", text) is None, text
    assert "+0.0%" in text


def test_one_isolation_line_when_every_tier_that_ran_was_confined_alike() -> None:
    """A tier the budget kept from running has no isolation: the others', all alike,
    are said once, not once per tier with the same words."""
    ran = [
        run(i, approximate=False, cost=0.1).model_copy(
            update={"tier": tier, "run_id": f"e:{tier}:s:{i}", "isolation": "user"}
        )
        for tier in ("T0", "T1")
        for i in range(2)
    ]
    kept = run(0, approximate=False, cost=None).model_copy(
        update={"tier": "T2", "run_id": "e:T2:s:0", "status": RunStatus.not_run, "passed": False}
    )
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=5)
    report = aggregate(info, [*ran, kept], ReportSettings(baseline="T0", scoring=Scoring()))
    text = render(report, "table")
    said = [line for line in text.splitlines() if "isolation" in line and "own user" in line]
    assert len(said) == 1 and said[0].startswith("- agents' isolation: own user"), said


def test_a_tier_without_counted_runs_of_a_baseline_scenario_is_said_to_compare_unlike() -> None:
    """T1's runs of s2 were all infrastructure errors (a judge that never answered
    there): its pooled pass rate is over s1 alone, the baseline's over both. The
    report says so under the verdicts, once, and not of a tier that has both."""

    def one(tier: str, scenario: str, index: int, status: RunStatus, passed: bool) -> RunResult:
        return run(index, approximate=False, cost=0.1).model_copy(
            update={
                "tier": tier,
                "scenario": scenario,
                "run_id": f"e:{tier}:{scenario}:{index}",
                "status": status,
                "passed": passed,
            }
        )

    runs = [
        *(one("T0", s, i, RunStatus.completed, s == "s1") for s in ("s1", "s2") for i in range(2)),
        *(one("T1", "s1", i, RunStatus.completed, True) for i in range(2)),
        *(one("T1", "s2", i, RunStatus.infra_error, False) for i in range(2)),
        *(one("T2", s, i, RunStatus.completed, True) for s in ("s1", "s2") for i in range(2)),
    ]
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=len(runs))
    report = aggregate(info, runs, ReportSettings(baseline="T0", scoring=Scoring()))
    for fmt in ("table", "markdown"):
        text = " ".join(render(report, fmt).split())
        assert text.count("T1: no counted run of s2, which the baseline has") == 1, fmt
        assert "T2: no counted run" not in text
