"""Leaving cleanly on SIGTERM (a cancelled CI job, `docker stop`, a scale-down).

Celery's warm shutdown already stops taking messages and waits for running
tasks. This adds a bound: each running run gets `--grace` seconds to finish;
when that runs out it is handed back. HandBack is raised inside the run, which
unwinds through the same `finally` blocks as a soft time limit (the agent's
process group is killed, the workspace removed), stores nothing, and makes the
task reject its message with requeue: the run goes back to the head of its
queue and another worker runs it. Its stored result, written once by whoever
finishes it, is what counts.

The grace period is kept in the pool processes, not the parent, because a
CI runner or `kill` may deliver SIGTERM to the whole process group, to the
parent alone, or both: a pool process running a run arms its own timer on the
first SIGTERM it sees, and the parent forwards SIGTERM to those processes.

A SIGTERM the worker is not leaving on (Celery terminating one job: a revoke
with terminate) hands that run back too, but only a worker that really leaves
keeps its pool processes leaving for their next run: the parent says so in
memory its pool processes share. (A process left leaving handed back every run
it took after grace, each a new delivery, until the run was given up.)
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

import click
from celery import Celery, bootsteps, signals
from celery.worker import state

from core.settings import NUMBERS, setting
from fleet.sending import RUN_TASK

ENV_GRACE_S = "EVALFLEET_SHUTDOWN_GRACE"


class HandBack(BaseException):
    """Raised in a run whose worker is leaving and whose grace period is over (`why`).

    A BaseException so that the run's own `except Exception`, which records
    errors as results, lets it through: a handed-back run has no result.
    """

    def __init__(self, why: str, requeued: bool = True):
        super().__init__(f"{why}: handed back")
        self.why = why
        # False where nobody is left to put its message back (its worker's main process
        # ended): a sweep sends the run again once the message has waited a lease.
        self.requeued = requeued


class _PoolProcess:
    """This pool process's view: is a run in progress, is the worker leaving."""

    grace_s = NUMBERS[ENV_GRACE_S][0]  # set in the parent before the pool forks (Grace)
    in_pool = False
    leaving = False
    running = False
    orphaned = False  # its worker's main process ended
    # Set by the parent when the worker shuts down. Shared memory of this worker's alone:
    # created by its Grace step, before its pool forks, not at import (a process that
    # imported this module and forked workers would have them share it: one leaving
    # would tell the others' pools to hand their runs back).
    worker_leaving: Any = None


def _arm() -> None:
    # A zero interval would disarm the timer: hand back at once instead.
    signal.setitimer(signal.ITIMER_REAL, max(_PoolProcess.grace_s, 0.001))


def _on_term(signum: int, frame: FrameType | None) -> None:
    if not _PoolProcess.leaving:
        _PoolProcess.leaving = True
        _arm()


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    if _PoolProcess.running:
        if _PoolProcess.orphaned:
            leaving = "its worker's main process ended"
        elif _PoolProcess.worker_leaving.value:
            leaving = "worker shutting down"
        else:
            leaving = "run terminated"
        why = f"{leaving}, {_PoolProcess.grace_s:g} s grace over"
        raise HandBack(why, requeued=not _PoolProcess.orphaned)


def orphaned() -> None:
    """This pool process's worker (its parent) has ended: it is told so before its TERM
    (worker.prefork)."""
    _PoolProcess.orphaned = True


def _mark_pool_process(**_: Any) -> None:
    _PoolProcess.in_pool = True


@contextlib.contextmanager
def graceful_run() -> Iterator[None]:
    """Wrap one run: it may end in HandBack once the worker leaves. A no-op outside a pool.

    The handlers live only while a run does: between runs billiard's own SIGTERM
    handler ends an idle pool process at once, which is what leaving means there.
    """
    if not _PoolProcess.in_pool:
        yield
        return
    previous_term = signal.signal(signal.SIGTERM, _on_term)
    previous_alarm = signal.signal(signal.SIGALRM, _on_alarm)
    _PoolProcess.running = True
    if _PoolProcess.leaving:  # told to leave during an earlier run: this one gets the grace
        _arm()
    try:
        yield
    finally:
        _PoolProcess.running = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_alarm)
        signal.signal(signal.SIGTERM, previous_term)
        # The run had its grace; the next one gets it only if the worker is leaving.
        _PoolProcess.leaving = bool(_PoolProcess.worker_leaving.value)


def register(app: Celery) -> None:
    """`celery -A worker.app worker --grace 60` (and `scheduler worker`)."""
    app.user_options["worker"].add(
        click.Option(
            ["--grace"],
            type=click.FloatRange(min=0),
            default=None,
            metavar="SECONDS",
            help="On SIGTERM, let running runs finish this long, then hand them back to the "
            "queue (default: EVALFLEET_SHUTDOWN_GRACE or 30).",
        )
    )
    app.steps["worker"].add(Grace)


class Grace(bootsteps.StartStopStep):
    """Worker bootstep behind `--grace SECONDS` (default EVALFLEET_SHUTDOWN_GRACE or 30)."""

    label = "grace"

    def __init__(self, worker: Any, grace: float | None = None, **kwargs: Any):
        super().__init__(worker, **kwargs)
        _PoolProcess.grace_s = grace if grace is not None else setting(ENV_GRACE_S)
        _PoolProcess.worker_leaving = multiprocessing.RawValue("b", 0)
        self.worker = worker
        signals.worker_process_init.connect(_mark_pool_process, weak=False)
        signals.worker_shutting_down.connect(self._forward, weak=False)

    def _forward(self, **_: Any) -> None:
        """In the parent's SIGTERM/SIGINT handler: tell the pool processes running a run."""
        _PoolProcess.worker_leaving.value = 1
        pool = getattr(self.worker, "pool", None)
        processes = pool.info.get("processes", []) if pool is not None else []
        for pid in to_tell(list(state.reserved_requests), processes):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def to_tell(requests: list[Any], processes: list[int]) -> set[int]:
    """The pool processes to tell that the worker leaves: those running a run.

    Idle ones are left to exit with the pool (signalled, they would die and log an
    error), and so are those running another task (an aggregation, a rejudge): one
    has no grace to hand back in, and signalled it would die and be redelivered; the
    warm shutdown waits for it. A run sent to a pool process that has not yet
    reported starting it has no pid here; then every pool process not known to run
    another task is told."""
    runs = [r for r in requests if r.name == RUN_TASK]
    others = {r.worker_pid for r in requests if r.name != RUN_TASK} - {None}
    pids = {r.worker_pid for r in runs}
    if None in pids:
        pids = set(processes) - others
    return pids - {None}
