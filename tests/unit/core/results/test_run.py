"""core.results.run: the closed set of outcomes and what each counts for, the judge's
strict numbers, the run ids a cell's specs get, and a tampered run's lost credit."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from core.results.run import (
    GATES_FAILED,
    NOT_RUN_NOTE,
    OUTCOMES,
    JudgeResponse,
    RunResult,
    RunSpec,
    RunStatus,
    cell_specs,
    error_key,
    outcome,
)


def _result(status: RunStatus = RunStatus.completed, **extra: Any) -> RunResult:
    return RunResult(
        experiment_id="e", run_id="e:T0:s:0", tier="T0", scenario="s", run_index=0,
        status=status, **extra,
    )  # fmt: skip


def test_only_the_agents_own_results_are_counted() -> None:
    counted = {s for s in RunStatus if s.counted}
    assert counted == {
        RunStatus.completed,
        RunStatus.agent_error,
        RunStatus.timeout,
        RunStatus.limit,
        RunStatus.tampered,
    }
    assert [s for s in RunStatus if s.is_infra] == [RunStatus.infra_error]


def test_outcome_tells_passed_from_failed_and_names_every_other_status() -> None:
    assert _result(passed=True).outcome == "passed"
    assert _result(passed=False).outcome == "failed"
    assert _result(RunStatus.timeout).outcome == "timeout"
    assert OUTCOMES[:2] == ("passed", "failed")
    assert set(OUTCOMES[2:]) == {s.value for s in RunStatus} - {"completed"}


def test_error_key_is_the_shared_reason_of_runs_stopped_alike() -> None:
    reason = "judge error: connection refused"
    assert error_key(f"{reason}; {GATES_FAILED}a, b") == reason
    assert error_key(f"{reason}{NOT_RUN_NOTE}") == reason
    assert error_key(f"{reason}\ntraceback line") == reason
    assert error_key(None) == "unknown"
    assert len(error_key("x" * 1000)) == 300


def test_a_delivery_outcome_says_the_status_and_why() -> None:
    assert outcome(_result(RunStatus.infra_error, fail_reason="no image\nmore")) == (
        "infra_error: no image"
    )
    assert outcome(_result()) == "completed"


def test_a_cells_run_ids_depend_only_on_its_coordinates() -> None:
    specs = list(cell_specs("e", "T1", "s2", [0, 3], "gpu"))
    assert [s.run_id for s in specs] == ["e:T1:s2:0", "e:T1:s2:3"]
    assert all(s.queue == "gpu" and (s.tier, s.scenario) == ("T1", "s2") for s in specs)
    with pytest.raises(ValidationError):
        RunSpec(experiment_id="e", run_id="r", tier="T", scenario="s", run_index=-1)


def test_a_tampered_run_loses_every_credit_and_keeps_its_cost() -> None:
    tampered = _result(
        passed=True, pass_rate=1.0, impl_rate=1.0, composite_score=1.0,
        layered_composite=0.9, cost_usd=0.2, cost_of_pass=0.2,
    ).tampered_with("tests/check.sh")  # fmt: skip
    assert tampered.status is RunStatus.tampered and tampered.counted and not tampered.passed
    assert (tampered.pass_rate, tampered.impl_rate, tampered.composite_score) == (0, 0, 0)
    assert tampered.layered_composite == 0.0 and tampered.cost_of_pass == math.inf
    assert tampered.fail_reason == "tampered: tests/check.sh" and tampered.cost_usd == 0.2
    unpriced = _result(passed=True).tampered_with("x")
    assert unpriced.cost_of_pass is None and unpriced.layered_composite is None


ANSWER = {
    "scores": {"correctness": 0.5},
    "weighted_score": 0.5,
    "confidence": 0.9,
    "issues": [],
    "highlights": [],
}


@pytest.mark.parametrize("score", [True, "1", math.inf, math.nan])
def test_a_judges_score_is_a_finite_json_number(score: object) -> None:
    with pytest.raises(ValidationError):
        JudgeResponse.model_validate({**ANSWER, "scores": {"correctness": score}})


def test_a_judges_answer_may_carry_more_fields_and_gives_no_reasons_by_default() -> None:
    answer = JudgeResponse.model_validate({**ANSWER, "verdict": "fine"})
    assert answer.scores == {"correctness": 0.5} and answer.reasons == {}
    with pytest.raises(ValidationError):
        JudgeResponse.model_validate({**ANSWER, "weighted_score": 1.5})
