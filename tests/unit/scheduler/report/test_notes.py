"""Caveats a report must state rather than hide."""

from __future__ import annotations

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
    assert "exit codes are approximate for 1 runs" in text
    assert "cost unknown for 1 runs" in text


def test_exact_reports_carry_no_caveats() -> None:
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=1)
    report = aggregate(
        info,
        [run(0, approximate=False, cost=0.1)],
        ReportSettings(baseline="T0", scoring=Scoring()),
    )
    text = render(report, "markdown")
    assert "approximate" not in text and "cost unknown" not in text


def _scored(index: int, passed: bool, composite: float) -> RunResult:
    return run(index, approximate=False, cost=0.1).model_copy(
        update={"passed": passed, "pass_rate": float(passed), "composite_score": composite}
    )


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
