"""From a validated Matrix to the runs to send: ids, queues and time budgets."""

from __future__ import annotations

import re
import secrets
import time

from core.config import Matrix
from core.results import ExperimentInfo, ExperimentStatus, RunSpec

# Time a run may take beyond its agent, setup and gates: workspace copy,
# transcript parsing, storing. Generous: exceeding it kills the run.
_MARGIN_S = 120.0


def new_experiment_id(matrix: Matrix, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", matrix.name)[:40]
    return f"{name}-{stamp}-{secrets.token_hex(2)}"


def experiment_info(
    matrix: Matrix, experiment_id: str, total_runs: int, created_at: float | None = None
) -> ExperimentInfo:
    """The record of a newly submitted experiment."""
    return ExperimentInfo(
        id=experiment_id,
        name=matrix.name,
        status=ExperimentStatus.running,
        total_runs=total_runs,
        created_at=created_at if created_at is not None else time.time(),
        tiers=[t.id for t in matrix.tiers],
        scenarios=[s.id for s in matrix.scenarios],
        runs_per_tier=matrix.runs_per_tier,
    )


def plan(matrix: Matrix, experiment_id: str) -> list[RunSpec]:
    """Every run of the experiment, with ids that depend only on their coordinates."""
    return [
        RunSpec(
            experiment_id=experiment_id,
            run_id=f"{experiment_id}:{tier.id}:{scenario.id}:{index}",
            tier=tier.id,
            scenario=scenario.id,
            run_index=index,
            queue=matrix.queue_for(tier, scenario),
        )
        for tier in matrix.tiers
        for scenario in matrix.scenarios
        for index in range(matrix.runs_per_tier)
    ]


def run_budget_s(matrix: Matrix, spec: RunSpec) -> float:
    """The longest a run may legitimately take: its soft time limit."""
    agent = matrix.agent_for(matrix.tier(spec.tier))
    scenario = matrix.scenario(spec.scenario)
    setup = scenario.setup_timeout_s * len(scenario.setup)
    gates = sum(g.timeout_s for g in scenario.evaluation.gates)
    judge = 0.0
    if scenario.evaluation.judge_enabled and matrix.judge is not None:
        # Every request and wait of the judge call is within its deadline.
        judge = matrix.judge.deadline
    return agent.timeout_s + setup + gates + judge + _MARGIN_S


def longest_run_s(matrix: Matrix, specs: list[RunSpec]) -> float:
    keys = {(s.tier, s.scenario): s for s in specs}
    return max((run_budget_s(matrix, s) for s in keys.values()), default=0.0)
