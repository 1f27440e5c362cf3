"""An experiment's report, or a report version's, once every run has its result:
what the chord's body does on a worker (worker.tasks) and a sweep or a follower
does when the body never comes (fleet.recovery, scheduler.follow).
"""

from __future__ import annotations

import time
from typing import Any

from core.analysis.aggregate import ReportSettings, aggregate
from core.evaluation.rejudge import RejudgePlan
from core.matrix import Budget, Matrix
from core.results.report import ExperimentInfo, ExperimentReport, ExperimentStatus
from core.results.run import RunResult
from core.store import Store
from core.store.results import gc_paused
from fleet.waves import adaptive_report


# Without the cycle collector until the runs are freed: it would walk their millions of
# objects, none of them garbage, several times (2 s of a 100,000-run report).
@gc_paused()
def finish_experiment(db: Store, experiment_id: str) -> dict[str, Any]:
    """The report from every stored RunResult, once each run has one.

    Idempotent: same runs, same report. Until the last result is in there is
    nothing to do: a chord can fire early (a superseded delivery answered for a
    run another delivery holds), and the recovery sweep finishes it later.
    """
    matrix = db.experiments.matrix(experiment_id)
    info = db.experiments.info(experiment_id)
    if info.completed_runs < info.total_runs:
        return {"experiment_id": experiment_id, "status": "waiting for runs"}
    if info.status != ExperimentStatus.cancelled:
        info = info.model_copy(update={"status": ExperimentStatus.complete})
    runs = db.results.all(experiment_id)
    # The first aggregation fixes finished_at, so re-running it changes nothing.
    finished = info.finished_at or max((r.ended_at or 0.0 for r in runs), default=time.time())
    info = info.model_copy(update={"finished_at": finished})
    db.reports.save(_report(db, info, runs, matrix))
    db.experiments.set_status(experiment_id, info.status, finished_at=finished)
    return {"experiment_id": experiment_id, "status": info.status.value}


@gc_paused()  # see finish_experiment
def finish_version(db: Store, experiment_id: str, plan: RejudgePlan) -> dict[str, Any]:
    """The version's report once each of the experiment's runs has a result in it."""
    info = db.experiments.info(experiment_id)
    runs = db.reports.runs(experiment_id, plan.version)
    if len(runs) < info.completed_runs:
        return {"experiment_id": experiment_id, "status": "waiting for runs"}
    report = _report(db, info, runs, db.experiments.matrix(experiment_id))
    db.reports.save(report.model_copy(update={"version": plan.version, "version_note": plan.note}))
    return {"experiment_id": experiment_id, "version": plan.version}


def _report(
    db: Store, info: ExperimentInfo, runs: list[RunResult], matrix: Matrix
) -> ExperimentReport:
    """The report of these runs as the matrix asks for it (every version alike): with
    the budget they were held to and, for an adaptive experiment, where each cell stopped."""
    report = aggregate(info, runs, ReportSettings.of(matrix, _budget(db, matrix, info.id)))
    if matrix.adaptive is not None:
        report.adaptive = adaptive_report(db, info.id, matrix, runs)
    # Each stored result is followed by its evidence (worker.run_records).
    report.evidence_missing = max(0, len(runs) - db.evidence.count(info.id))
    return report


def _budget(db: Store, matrix: Matrix, experiment_id: str) -> Budget | None:
    """The budget the runs were held to: the matrix's, with the ceilings the ledger has now
    (a resume may have raised them)."""
    if matrix.budget is None:
        return None
    limits = db.ledger.state(experiment_id).limits
    return matrix.budget.model_copy(
        update={"agent_usd": limits.get("agent"), "judge_usd": limits.get("judge")}
    )
