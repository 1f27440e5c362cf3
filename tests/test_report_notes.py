"""Caveats a report must state rather than hide."""

from __future__ import annotations

import pytest

from core.aggregate import aggregate
from core.config import Scoring
from core.results import ExperimentInfo, InteractionMetrics, RunResult, RunStatus
from scheduler.render import render


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
    report = aggregate(info, runs, baseline="T0", scoring=Scoring())
    assert report.tiers["T0"].approximate_exit_code_runs == 1
    text = render(report, fmt)
    assert "exit codes are approximate for 1 runs" in text
    assert "cost unknown for 1 runs" in text


def test_exact_reports_carry_no_caveats() -> None:
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=1)
    report = aggregate(
        info, [run(0, approximate=False, cost=0.1)], baseline="T0", scoring=Scoring()
    )
    text = render(report, "markdown")
    assert "approximate" not in text and "cost unknown" not in text
