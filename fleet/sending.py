"""How a run is sent: its task options, time budget and queue.

One place for both senders: the scheduler's chord (scheduler.dispatch) and
the recovery sweep that sends a lost run again on its own (fleet.recovery).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from core.matrix import Matrix
from core.results.run import RunSpec
from core.settings import setting

if TYPE_CHECKING:  # the CLI reads budgets and queues without importing Celery
    from celery import Celery, Signature

    from core.store import Store


def configured_queue() -> str:
    """Where runs without a `queue:` of their own, and the aggregate task, go. Read
    when used, as every setting is."""
    return os.environ.get("EVALFLEET_QUEUE", "evalfleet")


# Redis redelivers an unacked message after this many seconds; `scheduler
# submit` refuses a matrix whose longest run could outlast it.
def configured_visibility_timeout_s() -> int:
    return int(setting("EVALFLEET_VISIBILITY_TIMEOUT"))


RUN_TASK = "evalfleet.run"
AGGREGATE_TASK = "evalfleet.aggregate"
REJUDGE_TASK = "evalfleet.rejudge"
AGGREGATE_VERSION_TASK = "evalfleet.aggregate_version"
# Time a run may take beyond its agent, setup and gates: workspace copy,
# transcript parsing, storing. Generous: exceeding it kills the run.
_MARGIN_S = 120.0


def run_signature(app: Celery, matrix: Matrix, spec: RunSpec) -> Signature:
    """A run's task on its own, as a lost run is sent again."""
    return app.signature(
        RUN_TASK,
        args=(spec.model_dump(mode="json"),),
        options=run_options(matrix, spec),
        immutable=True,
    )


def run_options(matrix: Matrix, spec: RunSpec) -> dict[str, Any]:
    """A run's task options, whether it is sent in the chord or on its own."""
    return task_options(run_budget_s(matrix, spec), spec.run_id, spec.queue)


def task_options(budget_s: float, run_id: str, queue: str | None) -> dict[str, Any]:
    """The options of a task about one run (its run, its rejudge): the time it may
    take, no result in Celery's keys (ours hold it), the run's queue."""
    options: dict[str, Any] = {
        "soft_time_limit": budget_s,
        "time_limit": budget_s + 60,
        "ignore_result": True,
        # Flower shows the run id instead of the whole arguments.
        "argsrepr": run_id,
        "kwargsrepr": "{}",
    }
    if queue:
        options["queue"] = queue
    return options


def run_queues(matrix: Matrix, default: str) -> set[str]:
    """The queues the matrix's runs are sent to; `default` for those without one of their own."""
    return {matrix.queue_for(t, s) or default for t in matrix.tiers for s in matrix.scenarios}


def queues_without_workers(app: Celery, matrix: Matrix, store: Store, exp_id: str) -> list[str]:
    """The queues of the experiment's runs (`matrix`'s) that no live worker consumes
    (Celery's inspect: the workers answer, within a second)."""
    default = store.experiments.sent_to(exp_id) or app.conf.task_default_queue
    replies = app.control.inspect(timeout=1.0).active_queues() or {}
    consumed = {q["name"] for worker_queues in replies.values() for q in worker_queues}
    return [q for q in sorted(run_queues(matrix, default)) if q not in consumed]


def no_worker_takes(queues: list[str]) -> str:
    """What to say of `queues_without_workers`, and the command that starts a worker for
    them (its `--broker URL` for the CLI's hints to complete)."""
    return (
        f"no worker is taking runs from queue {', '.join(queues)}: start one with "
        f"`scheduler worker --broker URL --queues {','.join(queues)}`"
    )


def run_budget_s(matrix: Matrix, spec: RunSpec) -> float:
    """The longest a run may legitimately take: its soft time limit."""
    return _budget_s(matrix, spec.tier, spec.scenario)


def longest_run_s(matrix: Matrix) -> float:
    return max(
        (_budget_s(matrix, t.id, s.id) for t in matrix.tiers for s in matrix.scenarios),
        default=0.0,
    )


def _budget_s(matrix: Matrix, tier_id: str, scenario_id: str) -> float:
    agent = matrix.agent_for(matrix.tier(tier_id))
    scenario = matrix.scenario(scenario_id)
    setup = scenario.setup_timeout_s * len(scenario.setup)
    gates = sum(g.timeout_s for g in scenario.evaluation.gates)
    gates += scenario.verifier.timeout_s if scenario.verifier is not None else 0.0
    judge = 0.0
    if scenario.evaluation.judge_enabled and matrix.judge is not None:
        # Every request and wait of each of its judgments is within its deadline.
        judge = matrix.judge.deadline * matrix.judge.repeats
    agent_s = scenario.agent_timeout_s or agent.timeout_s
    return agent_s + setup + gates + judge + _MARGIN_S
