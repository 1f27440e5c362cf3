"""core.results.report: an experiment's submission time read from its id, reports
stored before `counted` existed read right, the budget and evidence notices."""

from __future__ import annotations

import calendar
import time

from core.results.report import (
    BudgetReport,
    CrossTierResult,
    ExperimentInfo,
    ExperimentReport,
    TierReport,
    submitted_at,
)


def test_the_submission_time_comes_from_the_ids_stamp() -> None:
    stamp = calendar.timegm(time.strptime("20260102-030405", "%Y%m%d-%H%M%S"))
    assert submitted_at("notes-guidance-20260102-030405-ab12") == stamp
    assert submitted_at("named-by-hand") is None
    assert submitted_at("bad-20261399-999999-ab12") is None  # month 13


def test_a_tier_report_stored_before_counted_existed_counts_its_non_errors() -> None:
    old = TierReport.model_validate({"runs": 10, "errors": 3})
    assert old.counted == 7
    assert TierReport.model_validate({"runs": 10, "errors": 3, "counted": 5}).counted == 5


def test_a_budget_is_reached_once_a_run_was_kept_from_starting() -> None:
    spent = {"agent_spent_usd": 1.0, "judge_spent_usd": 0.0, "notice": "budget: $1.00 of $2.00"}
    assert not BudgetReport(not_run=0, **spent).reached
    assert BudgetReport(not_run=2, **spent).reached


def test_missing_evidence_is_noticed_only_when_some_is_missing() -> None:
    info = ExperimentInfo(id="e", name="n", created_at=0.0)
    report = ExperimentReport(experiment=info, cross_tier=CrossTierResult(baseline="T0"))
    assert report.evidence_notice is None
    notice = report.model_copy(update={"evidence_missing": 3}).evidence_notice
    assert notice is not None and notice.startswith("evidence of 3 runs was not stored")
