"""Running experiments: submit one, resume it, wait for its report, cancel it.

On a shared broker the fleet's workers take the runs and these calls return once
they are sent. On the embedded Redis the Fleet starts local workers first, and
they run until the Fleet is closed: `wait` before that.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import redis

from core.errors import FleetError, InputError
from core.matrix import Budget, Matrix
from core.results.report import ExperimentReport, ExperimentStatus
from core.results.run import RunResult, RunSpec, RunStatus, judge_alone_failed
from core.store import Store
from core.store.server import risky_settings
from core.timeline import mark
from core.wording import plural
from scheduler.connection import Connection
from scheduler.plan import new_experiment_id, plan
from scheduler.validation import Checked, planning_so_far, prepare

# Runs recorded per Redis call when a plan is completed.
PLAN_BATCH = 1000


@dataclass(frozen=True)
class Sent:
    """What a submit or a resume sent."""

    experiment_id: str
    runs: int  # a submit: how many runs the experiment may have; a resume: how many it re-sent
    local_workers: int | None  # the local worker processes (embedded); None on a shared broker


def submit(
    conn: Connection,
    matrix: str | Path | Checked,
    *,
    experiment_id: str | None = None,
    allow_missing_keys: bool = False,
) -> Sent:
    """Record a new experiment of `matrix` (a matrix file, or one `prepare` checked)
    and send its runs. Embedded, the local workers start first and take them; the
    console gets a line saying so. A matrix file whose agents' or judged scenarios' API
    key is not set here is refused (ConfigError) unless `allow_missing_keys` (the
    workers have it)."""
    checked = (
        matrix
        if isinstance(matrix, Checked)
        else prepare(matrix, allow_missing_keys=allow_missing_keys)
    )
    if conn.shared:
        for warning in risky_settings(conn.store.redis):
            conn.say(f"warning: {warning}")
    exp_id = experiment_id or new_experiment_id(checked.matrix)
    queues, most = conn.queues(checked.matrix), checked.matrix.total_runs()
    local = None if conn.shared else conn.start_workers(queues, most)
    # Imported once the workers start: their start-up runs beside Celery's import here.
    from scheduler.dispatch import start

    total = start(conn.app, conn.store, checked.matrix, exp_id, checked.bundle)
    mark("cli: runs sent")
    if local is not None:
        line = (
            f"experiment {exp_id}: {plural(total, 'run')} on "
            f"{plural(local.concurrency, 'local worker')}"
        )
        conn.say(line, soft_wrap=False)
    return Sent(exp_id, total, local.concurrency if local is not None else None)


def resume(
    conn: Connection,
    experiment: str,
    *,
    budget: float | None = None,
    retry_errors: bool = False,
) -> Sent | None:
    """Re-send the runs of `experiment` that have no result and are neither running nor
    queued: of a cancelled one, those cancelled before they started; with `budget` (a
    new ceiling on the agents' spend of the whole experiment), those it kept from
    starting; with `retry_errors`, the runs that ended in an infrastructure error (their
    tiers' fail-fast counts start again). None when every run has a result. The
    console gets what is re-sent, and
    what the experiment can detect at the correlation its runs so far showed
    (scheduler.validation.planning_so_far)."""
    exp_id = conn.experiment_id(experiment)
    with conn.store.experiments.resuming(exp_id):  # two at once would send runs twice
        return _resume(conn, exp_id, budget, retry_errors)


def _agent_part_failed(result: RunResult) -> bool:
    """Whether an infrastructure error is of the agent's part of the run (its setup, its
    start, its provider, its deliveries), not of a judge that did not answer."""
    return not judge_alone_failed(result.fail_reason)


def _errors_left(store: Store, exp_id: str, errors: int, retry_errors: bool) -> str:
    """What runs again the infrastructure errors a resume left: rejudge those whose
    judge alone failed; resume --retry-errors the others, unless it is this one."""
    judged = (
        sum(
            r.is_infra_error and judge_alone_failed(r.fail_reason)
            for r in store.results.all(exp_id)
        )
        if errors
        else 0
    )
    said = ""
    if errors - judged and not retry_errors:
        said += (
            f"; {plural(errors - judged, 'run')} ended in an infrastructure error: "
            f"`scheduler resume {exp_id} --retry-errors` runs them again once the cause is "
            "mended (with the files as submitted: a fix in the matrix folder needs a new submit)"
        )
    if judged:
        said += (
            f"; {plural(judged, 'run')} whose judge failed: `scheduler rejudge {exp_id}` judges "
            "them again without starting any agent, once the judge answers"
        )
    return said


def _resume(conn: Connection, exp_id: str, budget: float | None, retry_errors: bool) -> Sent | None:
    from fleet.recovery import to_resend  # imports Celery (see Connection.app)

    store = conn.store
    matrix = store.experiments.matrix(exp_id)
    info = store.experiments.info(exp_id)
    app = conn.app
    if info.status == ExperimentStatus.interrupted:
        # Its runs go on: those still queued run as they come, those whose messages a
        # later command's workers dropped have none and are sent again below.
        store.experiments.set_status(exp_id, ExperimentStatus.running)
    if budget is not None and matrix.budget is None:
        raise InputError(
            f"experiment {exp_id} was submitted without a budget; --budget on resume "
            "changes an experiment's budget (nothing was sent)"
        )
    # Never-started runs first: once they lose their results they are pending too.
    cancelled = (
        store.results.unrecord(exp_id, RunStatus.cancelled)
        if info.status == ExperimentStatus.cancelled
        else []
    )
    # A run whose judge alone failed is rejudge's to restore: running its agent again
    # would pay for what it already did.
    errors = (
        store.results.unrecord(exp_id, RunStatus.infra_error, only=_agent_part_failed)
        if retry_errors
        else []
    )
    if errors:  # a tier fail-fast stopped would stop them again at once
        store.health.forget(exp_id, {spec.tier for spec in errors})
    not_run: list[RunSpec] = []
    if budget is not None and matrix.budget is not None:
        not_run = raise_budget(store, exp_id, matrix.budget, budget)
    never_sent = complete_plan(store, matrix, exp_id)
    found = to_resend(app, store, exp_id)
    pending = found.specs
    # Runs still queued or running are left where they are: taken by the workers
    # (the embedded ones started here), not sent a second time.
    now = store.experiments.info(exp_id)  # unrecord took results back
    kept = (
        f"; {plural(now.not_run, 'run')} not run for the budget "
        f"{'stays' if now.not_run == 1 else 'stay'} so (`--budget USD` raises it)"
        if now.not_run
        else ""
    )
    kept += _errors_left(store, exp_id, now.errors, retry_errors)
    waiting = found.queued + found.running
    if not pending and not waiting and 1 in store.reports.versions(exp_id):
        conn.say(f"experiment {exp_id}: every run has a result; nothing to resume{kept}")
        return None
    if pending:
        store.experiments.reopen(exp_id)
    unstarted = len(cancelled) + len(not_run) + len(errors) + never_sent
    conn.say(
        f"experiment {exp_id}: re-sending {plural(len(pending), 'run')}: "
        f"{len(cancelled)} cancelled before they started, "
        + (f"{len(not_run)} not run for the budget, " if budget is not None else "")
        + (f"{plural(len(errors), 'infrastructure error')}, " if retry_errors else "")
        + (f"{never_sent} never sent (its submit stopped part-way), " if never_sent else "")
        + f"{len(pending) - unstarted} with no result, lease or message; "
        f"{found.queued} still queued, {found.running} running{kept}",
    )
    # What the whole experiment can detect, at the correlation its runs so far showed.
    for line in planning_so_far(matrix, store.results.all(exp_id)):
        conn.say(line)
    sent = _send(conn, matrix, exp_id, pending, waiting)
    if sent.local_workers and (pending or waiting):
        runs = plural(len(pending) + waiting, "run")
        conn.say(f"experiment {exp_id}: {runs} on {plural(sent.local_workers, 'local worker')}")
    return sent


def _send(
    conn: Connection, matrix: Matrix, exp_id: str, pending: list[RunSpec], waiting: int
) -> Sent:
    """`pending` sent (embedded: the local workers started first), and with it the
    aggregate; when nothing is pending and `waiting` runs are still on their way,
    nothing: the chord they belong to aggregates."""
    from scheduler.dispatch import send  # imports Celery (see Connection.app)

    # An adaptive experiment's later waves are sent as it goes: no cap then.
    most = None if matrix.adaptive is not None else len(pending) + waiting
    local = None if conn.shared else conn.start_workers(conn.queues(matrix), most)
    if pending or not waiting:  # nothing to send and nothing on its way: aggregate
        send(conn.app, conn.store, matrix, exp_id, pending, len(pending))
    return Sent(exp_id, len(pending), local.concurrency if local is not None else None)


def complete_plan(store: Store, matrix: Matrix, exp_id: str) -> int:
    """Record the runs a submit that stopped part-way never recorded (its experiment
    was never marked sent): a run's id depends only on its coordinates, so the plan
    made again is the same. Returns how many were missing."""
    if store.experiments.sent_to(exp_id) is not None:
        return 0
    known = store.specs.ids(exp_id)
    missing, specs = 0, plan(matrix, exp_id)
    while batch := list(itertools.islice(specs, PLAN_BATCH)):
        new = [spec for spec in batch if spec.run_id not in known]
        store.specs.add(exp_id, new)
        missing += len(new)
    return missing


def raise_budget(store: Store, exp_id: str, budget: Budget, agent_usd: float) -> list[RunSpec]:
    """A new ceiling on the agents' spend of the experiment (the judge's stays as it is);
    returns the runs the old one kept from starting, their results taken back."""
    limits = store.ledger.state(exp_id).limits
    store.ledger.set_limits(
        exp_id, budget.model_copy(update={"agent_usd": agent_usd, "judge_usd": limits.get("judge")})
    )
    return store.results.unrecord(exp_id, RunStatus.not_run)


def wait(conn: Connection, experiment: str) -> ExperimentReport:
    """Block until the experiment's report exists, sweeping it for lost runs on the way
    (a progress bar on the Fleet's console); its report. Raises WorkersDied when the Fleet's
    local workers exit first."""
    from scheduler.follow import follow  # imports Celery (see Connection.app)

    follow(conn.app, conn.store, experiment, conn.console, conn.workers, conn.hinted)
    report = conn.store.reports.get(experiment)
    if report is None:
        raise FleetError(f"experiment {experiment} ended without a report")
    return report


def interrupt(conn: Connection, exp_id: str) -> bool:
    """Pause an experiment whose embedded submit or resume was interrupted (Ctrl-C): the
    workers of later commands here drop its queued runs' messages, recording nothing,
    instead of running them before their own, until `resume` (which sends them again)
    or `cancel`. Whether it is paused: not if it had finished, or the store is gone."""
    try:
        before = conn.store.experiments.interrupt(exp_id)
    except redis.RedisError:
        return False
    return before not in (ExperimentStatus.complete, ExperimentStatus.cancelled)


def cancel(conn: Connection, experiment: str) -> tuple[str, ExperimentStatus, Sent | None]:
    """Cancel an experiment (its id): runs not yet started are recorded as cancelled,
    running ones finish. Returns its id, its status before (a complete or already
    cancelled experiment is left as it was) and, embedded, what was sent to finish it.

    On a shared broker the fleet's workers record the rest as they take their
    messages. On the embedded Redis none may be running (its submit was interrupted):
    this Fleet's local workers are started to take them, the runs whose messages a
    later command's workers dropped are sent again (to be recorded cancelled, not
    run), and the experiment gets its report: `wait` for it."""
    from fleet.recovery import to_resend  # imports Celery (see Connection.app)

    exp_id = conn.experiment_id(experiment)
    before = conn.store.experiments.cancel(exp_id)
    # Version 1's report: the experiment was aggregated since its last (re)start; a later
    # version alone is of runs before a resume (Experiments.reopen).
    reported = 1 in conn.store.reports.versions(exp_id)
    if conn.shared or before == ExperimentStatus.complete or reported:
        return exp_id, before, None
    found = to_resend(conn.app, conn.store, exp_id)
    matrix = conn.store.experiments.matrix(exp_id)
    if found.running:
        # Leased by a delivery that may be gone (a submit stopped past its grace): said,
        # or the wait reads as a hang.
        conn.say(
            f"{plural(found.running, 'run')} still leased: each is recorded when it ends, or "
            f"once its lease lapses (within {matrix.lease_s:.0f} s, `lease_s`) if its "
            "worker is gone"
        )
    return exp_id, before, _send(conn, matrix, exp_id, found.specs, found.queued + found.running)
