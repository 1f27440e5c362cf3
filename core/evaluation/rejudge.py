"""Rejudge and rescore: a run's judging (and, for rescore, its gates) done again from
what it left, never its agent (README, "Rejudge", "Rescore"). The verdict is
recomputed as at the run's end (core.evaluation.evaluate.scored) from the stored result's
status and the new gates and judge.
"""

from __future__ import annotations

from pydantic import Field

from core.evaluation.evaluate import (
    AGENT_TIMED_OUT,
    JUDGE_SCORE,
    Judging,
    judge_for,
    scored,
)
from core.evaluation.judge import judge_run
from core.evaluation.verifier import REWARD_BELOW
from core.evidence.models import JudgeInputs
from core.matrix import Gate, JudgeConfig, Matrix, Rubric
from core.results.record import Record
from core.results.run import (
    GATES_FAILED,
    JUDGE_ERROR,
    GateResult,
    RunResult,
    RunStatus,
    judge_alone_failed,
)


class RejudgePlan(Record):
    """What one rejudge or rescore asks of every run: each of its tasks carries it."""

    version: int = Field(ge=2, description="the report version it makes")
    judge: JudgeConfig | None = Field(
        None, description="the matrix's judge with the overrides applied (None: it has none)"
    )
    rubric: Rubric | None = Field(None, description="replaces every scenario's rubric")
    rescore: bool = Field(False, description="run the gates again on archived workspaces")
    gates: dict[str, list[Gate]] = Field(
        default_factory=dict, description="scenario id -> gates replacing its own (rescore)"
    )
    fresh: bool = Field(
        False, description="every judgment asked anew, none from the judgment cache"
    )
    note: str = Field(description="what changed, shown with the report version")


def rejudged_matrix(matrix: Matrix, plan: RejudgePlan) -> Matrix:
    return matrix.model_copy(update={"judge": plan.judge or matrix.judge})


def rejudge_run(
    result: RunResult,
    matrix: Matrix,
    plan: RejudgePlan,
    judging: Judging,
    *,
    inputs: JudgeInputs | None,
    gates: list[GateResult] | None = None,
) -> RunResult:
    """`result` with `gates` (when rescored) and judged again on `inputs` (its stored
    JudgeInputs; None: its judge is kept) under `plan`; the judging's secrets are kept out
    of the cached answers."""
    matrix = rejudged_matrix(matrix, plan)
    scenario = matrix.scenario(result.scenario)
    if gates is not None:
        passed = sum(g.passed for g in gates)
        result = result.model_copy(
            update={"gates": gates, "gates_passed": passed, "gates_total": len(gates)}
        )
    judge = result.judge
    if inputs is not None:
        rejudge = judge_for(matrix, scenario, judging, plan.rubric)
        judge = judge_run(rejudge, inputs, gates=result.gates).result
    agent = agent_reasons(result)
    before = result.model_copy(update={"judge": judge, "status": _status_before_judge(result)})
    return scored(before, matrix, scenario, agent)


def agent_reasons(result: RunResult) -> list[str]:
    """The fail reasons of the agent's own part of the run: the stored reason without
    what its gates, its rewards and its judge said (they are said again from the new judge)."""
    parts = (result.fail_reason or "").split("; ") if result.fail_reason else []
    verdict = (JUDGE_ERROR, GATES_FAILED, JUDGE_SCORE, REWARD_BELOW)
    return [p for p in parts if not p.startswith(verdict)]


def _status_before_judge(result: RunResult) -> RunStatus:
    """The agent's status, which a judge error had turned into an infrastructure error
    (a judge that answers now gives the run back its own result)."""
    if not (result.is_infra_error and judge_alone_failed(result.fail_reason)):
        return result.status
    reasons = agent_reasons(result)
    if any(reason.startswith(AGENT_TIMED_OUT) for reason in reasons):
        return RunStatus.timeout
    if result.limit is not None:
        return RunStatus.limit
    return RunStatus.agent_error if reasons else RunStatus.completed
