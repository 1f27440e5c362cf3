"""Sending a rejudge or rescore to the fleet and following it to its report version.

One chord like a submit's: a `evalfleet.rejudge` task per run (worker.rejudge:
it runs the gates again on the run's archived workspace for a rescore, judges it
again from its stored evidence, or keeps a run with neither as it was) and
`evalfleet.aggregate_version` as body. No agent is started.
"""

from __future__ import annotations

import time

from celery import Celery
from celery.utils import uuid
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from core.errors import WorkersDied
from core.evaluation.rejudge import RejudgePlan
from core.matrix import Matrix
from core.results.report import ExperimentReport
from core.store import Store
from scheduler.follow import Workers
from worker.sending import AGGREGATE_VERSION_TASK, REJUDGE_TASK, task_options
from worker.tasks import finish_version

_POLL_S = 0.25
# What a rejudge task may take beyond its judgments' deadlines: loading and storing.
_MARGIN_S = 60.0


def send_rejudge(app: Celery, store: Store, matrix: Matrix, exp_id: str, plan: RejudgePlan) -> int:
    """Send a rejudge of every run of the experiment; returns how many were sent."""
    runs = sorted(store.results.all(exp_id), key=lambda r: r.run_id)
    budget = task_budget_s(matrix, plan)
    payload = plan.model_dump(mode="json")
    body = app.signature(
        AGGREGATE_VERSION_TASK,
        kwargs={"experiment_id": exp_id, "plan": payload},
        options={"ignore_result": True},
    )
    # Wired as scheduler.dispatch wires a submit's chord, not with chord(header)(body):
    # that call subscribes this process to every header task's result channel, and
    # unsubscribing at exit, once the embedded Redis is gone, printed a traceback.
    group_id = uuid()
    body.freeze(group_id=group_id)
    app.backend.set_chord_size(group_id, len(runs))
    task = app.tasks[REJUDGE_TASK]
    for index, run in enumerate(runs):
        tier, scenario = matrix.tier(run.tier), matrix.scenario(run.scenario)
        task.apply_async(
            (exp_id, run.run_id, payload),
            group_id=group_id,
            group_index=index,
            chord=body,
            # The run's own queue: a fleet of per-tier queues has no one on the default
            # queue, and a rescore's gates need the tier's tools. The result is the
            # run's entry in the version, in our keys: none in Celery's.
            **task_options(budget, run.run_id, matrix.queue_for(tier, scenario)),
        )
    return len(runs)


def task_budget_s(matrix: Matrix, plan: RejudgePlan) -> float:
    """The longest one run's task may take: its judgments' deadlines, and for a rescore
    the gates' timeouts of the longest scenario."""
    judge = plan.judge or matrix.judge
    budget = _MARGIN_S + (judge.deadline * judge.repeats if judge is not None else 0.0)
    if plan.rescore:
        budget += max(
            sum(g.timeout_s for g in plan.gates.get(s.id, s.evaluation.gates))
            for s in matrix.scenarios
        )
    return budget


def follow_version(
    store: Store,
    exp_id: str,
    plan: RejudgePlan,
    console: Console,
    workers: Workers | None = None,
) -> ExperimentReport:
    """Block until the version's report exists; aggregates it here when every run has
    its result but the chord's body did not come (a worker lost on the way)."""
    total = store.experiments.info(exp_id).completed_runs
    progress = Progress(
        TextColumn(f"[bold]{'rescore' if plan.rescore else 'rejudge'} v{plan.version}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    with progress:
        task = progress.add_task("runs", total=total)
        while True:
            if workers is not None and not workers.alive():
                raise WorkersDied(f"the local workers exited; see {workers.log_path}")
            report = store.reports.get(exp_id, plan.version)
            if report is not None:
                progress.update(task, completed=total)
                return report
            done = store.reports.run_count(exp_id, plan.version)
            progress.update(task, completed=done)
            if done >= total:
                finish_version(store, exp_id, plan)
            time.sleep(_POLL_S)
