"""Celery tasks: thin entry points over worker.run, worker.reevaluate and fleet.finish.

`evalfleet.run` is a chord header task: it must never raise (a failed header
kills the chord), so every outcome, a soft time limit included, becomes a
stored RunResult and the task returns a small summary. `evalfleet.rejudge`, the
header task of a rejudge or rescore (worker.reevaluate), never raises either. The
exceptions are a run handed back by a leaving worker (worker.grace) and a run
that Redis left (a restart longer than worker.run waits): the message is
rejected with requeue, which neither fails nor counts toward the chord. A run
whose model provider failed is retried (`self.retry`) after the wait worker.run
names. A copy of a run that another delivery is running, and a run of a deleted
experiment, are acknowledged and dropped (`Ignore`), the chord left alone.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from functools import cache
from typing import Any

import redis
from celery import Celery, Task, shared_task
from celery.app import trace
from celery.exceptions import Ignore, Reject

from core.errors import ExperimentNotFound, ExperimentPaused, RetryLater, RunInProgress
from core.evaluation.rejudge import RejudgePlan
from core.evidence.text import visible
from core.results.run import RunResult, RunSpec
from core.store import Store
from fleet.app import BROKER_DOWN
from fleet.finish import finish_experiment, finish_version
from fleet.sending import AGGREGATE_TASK, AGGREGATE_VERSION_TASK, REJUDGE_TASK, RUN_TASK
from worker.grace import HandBack, graceful_run
from worker.phases import phase_events
from worker.reevaluate import rejudged
from worker.run import execute, patiently

log = logging.getLogger(__name__)
# Celery logs a rejected task with a traceback, which shows only where this module
# raised Reject: a run handed back, or the broker away or full, is said in the one line
# of its reason, as an ignored task's is.
trace.log_policy_reject = trace.log_policy_reject._replace(traceback=0)


def store_of(app: Celery) -> Store:
    """The store on the app's broker; one per broker and process, like its connection pool."""
    return _store_at(str(app.conf.broker_url))


@cache
def _store_at(url: str) -> Store:
    return Store.from_url(url)


def summary(result: RunResult) -> dict[str, Any]:
    # Shown as the task's result in Flower: the outcome first (a run whose gates failed
    # is a SUCCESS of its task: its `failed` tells it apart, and Flower's search finds
    # it by `result:failed`), then enough to find the experiment. Celery's log line of
    # each task's end quotes it: the reason, an agent's words, with its controls
    # written out.
    return {
        "outcome": result.outcome,
        "reason": visible((result.fail_reason or "").split("\n", 1)[0][:200]),
        "experiment_id": result.experiment_id,
        "run_id": result.run_id,
        "status": result.status.value,
        "passed": result.passed,
        "attempts": result.attempts,
    }


# max_retries=None: the matrix's max_attempts caps a run's deliveries (worker.run).
@shared_task(bind=True, name=RUN_TASK, max_retries=None)
def run(
    self: Task, spec: dict[str, Any], outages: list[str] | None = None, continues: str = ""
) -> dict[str, Any]:
    run_spec = RunSpec.model_validate(spec)

    def on_phase(phase: str) -> None:
        if not self.app.conf.worker_send_task_events:
            return
        phase_events(self.app, self.request.hostname).send(
            self.request.id,
            phase,
            name=self.name,
            experiment_id=run_spec.experiment_id,
            run_id=run_spec.run_id,
        )

    try:
        with graceful_run():
            result = execute(
                run_spec,
                store_of(self.app),
                on_phase,
                outages,
                worker=self.request.hostname,
                continues=continues,
            )
    except RetryLater as exc:
        # The same task again later (a chord header may retry): the chord still
        # waits for this run's one result.
        kwargs = {"outages": exc.outages, "continues": exc.holder}
        raise self.retry(args=(spec,), kwargs=kwargs, countdown=exc.wait_s) from None
    except ExperimentPaused as exc:
        # Nothing recorded and the chord left alone: the resume that lifts the pause
        # sends the run again, as a run without a result, lease or message.
        log.warning("%s", exc)
        raise Ignore() from None
    except RunInProgress as exc:
        # The delivery that runs it answers for it; should that one die, its lease
        # lapses and the sweep sends the run again.
        log.warning("%s: this copy of its message is dropped", exc)
        raise Ignore() from None
    except HandBack as exc:
        raise Reject(str(exc), requeue=True) from None
    except ExperimentNotFound:
        # Deleted while its runs were queued (`scheduler delete --force`), or lost with
        # a broker that restarted keeping nothing: nothing to run and nothing to write
        # back, not even the chord's count (Ignore: the message is acknowledged, the
        # chord left alone). Only whether a restart lost it is asked: every queued run
        # of a deleted experiment comes here (the keyspace scan that tells a half-lost
        # one is the commands').
        gone = _gone(store_of(self.app), run_spec.experiment_id)
        log.warning("run %s dropped: %s", run_spec.run_id, gone)
        raise Ignore() from None
    except BROKER_DOWN as exc:
        # Not the run's fault and not acknowledged: the message goes back to the
        # queue (or, Redis still away, the broker redelivers it); the lease, if
        # taken, expires and the run is sent again sooner.
        raise Reject(f"{_unavailable(exc)}: {exc}", requeue=True) from None
    return summary(result)


def _unavailable(exc: Exception) -> str:
    if isinstance(exc, redis.OutOfMemoryError):
        return "the broker is full and refuses writes"
    return "Redis unreachable"


def _gone(db: Store, experiment_id: str) -> str:
    """Why an experiment has no record: lost with a broker that restarted keeping nothing
    (said with the fix), else deleted."""
    try:
        lost = db.experiments.lost_in_restart(experiment_id)
    except BROKER_DOWN:
        lost = None
    return str(lost) if lost else "its experiment was deleted"


@shared_task(bind=True, name=REJUDGE_TASK)
def rejudge(self: Task, experiment_id: str, run_id: str, plan: dict[str, Any]) -> dict[str, Any]:
    """A chord header task like `run`: it never raises, so every run of the version
    gets a result and the chord fires."""
    rejudge_plan = RejudgePlan.model_validate(plan)
    db = store_of(self.app)
    try:
        result = rejudged(db, experiment_id, run_id, rejudge_plan)
    except BROKER_DOWN as exc:
        raise Reject(f"{_unavailable(exc)}: {exc}", requeue=True) from None
    return summary(result)


@shared_task(bind=True, name=AGGREGATE_VERSION_TASK)
def aggregate_version(
    self: Task, _results: list[Any] | None, experiment_id: str, plan: dict[str, Any]
) -> dict[str, Any]:
    """Chord body of a rejudge: the report of the new version."""
    db, version = store_of(self.app), RejudgePlan.model_validate(plan)
    with _finishing(db, experiment_id):
        return patiently(lambda: finish_version(db, experiment_id, version))
    return {"experiment_id": experiment_id, "status": "dropped"}


@shared_task(bind=True, name=AGGREGATE_TASK)
def aggregate_experiment(
    self: Task, _results: list[Any] | None, experiment_id: str
) -> dict[str, Any]:
    """Chord body (fleet.recovery calls finish_experiment too, for lost runs' experiments)."""
    db = store_of(self.app)
    with _finishing(db, experiment_id):
        return patiently(lambda: finish_experiment(db, experiment_id))
    return {"experiment_id": experiment_id, "status": "dropped"}


@contextlib.contextmanager
def _finishing(db: Store, experiment_id: str) -> Iterator[None]:
    """A chord body's way out of what is not a worker's bug, in one line each rather than
    a task failure's traceback, which the docs keep for those:

    - its experiment is gone (deleted, or lost with a broker that kept nothing) while
      its message waited, or redelivered after a worker died holding it: nothing to
      report, the message dropped;
    - the broker stayed away or full longer than `patiently` waits: the message is
      given back to its queue as a run's is (the sweep reports the experiment should
      the broker refuse even that)."""
    try:
        yield
    except ExperimentNotFound:
        log.warning("the report of %s dropped: %s", experiment_id, _gone(db, experiment_id))
    except BROKER_DOWN as exc:
        raise Reject(f"{_unavailable(exc)}: {exc}", requeue=True) from None
