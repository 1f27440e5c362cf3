"""Celery's prefork pool, stopped without sleeping past the end of its work.

Every shutdown (the embedded mode's after each experiment, a CI job's at its
end) paid two fixed sleeps after the last run had been acknowledged:

- Celery's `TaskPool.on_stop` joins the pool beside a thread that fires the
  event loop's timers (heartbeats) and runs its queued acks (of results the
  join waits for) every 0.5 s, then waits for that thread: its `time.sleep(0.5)`
  outlasted a join of a few milliseconds by up to half a second. Here the thread
  pauses on an Event the join's end sets; the rest is Celery's on_stop as it is.
- billiard's pool process, when its loop ends, sends its parent a DEATH
  message, then sleeps a second for the parent to answer with SIGTERM. While
  the worker shuts down the parent no longer reads those messages, so the
  process exits by itself right after its message is out, as the parent's
  answer would have made it.

A pool process also ends with its worker. Killed outright (`kill -9` of the
worker's main process, an OOM kill), a worker left its pool processes to finish
their runs, then to wait for work for ever on a pipe nobody writes. Each gets
TERM as its parent dies (a thread of its own waits for that), as a leaving worker
sends it: a run under way has its grace, then is handed back (worker.grace), and
the process ends after it. With nobody left to requeue its message, a sweep sends
the run again once the message has waited a lease.

The worker runs this pool by the app's `worker_pool` setting: `python -m
worker` and `celery -A worker.app worker` alike.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import signal
import threading
import time
from typing import Any

from billiard.pool import CLOSE, RUN
from billiard.process import current_process
from celery import signals
from celery.concurrency import prefork
from kombu.asynchronous import get_event_loop

from worker.grace import orphaned
from worker.workspace import keep_spares

NAME = f"{__name__}:TaskPool"
# Celery's own pace for the timers while the pool drains.
_TICK_S = 0.5

log = logging.getLogger(__name__)


class TaskPool(prefork.TaskPool):
    _pool: Any  # billiard's AsynPool, once started

    def on_stop(self) -> None:
        hub = get_event_loop()
        if hub is None or self._pool is None or self._pool._state not in (RUN, CLOSE):
            super().on_stop()  # no event loop to keep going: Celery's plain join
            return
        self._pool.close()
        joined = threading.Event()
        ticker = threading.Thread(
            target=_tick, args=(hub, joined), daemon=True, name="prefork-timer-shutdown"
        )
        ticker.start()
        try:
            self._pool.join()
        finally:
            joined.set()
            ticker.join(timeout=1.0)
            if ticker.is_alive():
                log.warning("the pool's timer thread did not end after the pool was joined")
            else:
                # Acks of the results the join waited for, queued after its last pass.
                prefork._run_ready_callbacks(hub)
        self._pool = None


def _tick(hub: Any, joined: threading.Event) -> None:
    while True:
        try:
            hub.fire_timers()
            prefork._run_ready_callbacks(hub)
        except Exception:
            log.warning("the pool's timers failed while it stopped", exc_info=True)
        if joined.wait(_TICK_S):
            return


def register() -> None:
    signals.worker_process_init.connect(_keep_spares, weak=False, dispatch_uid=NAME)
    signals.worker_process_init.connect(_end_with_worker, weak=False, dispatch_uid=f"{NAME}:end")
    signals.task_postrun.connect(_end_if_orphaned, weak=False, dispatch_uid=NAME)
    signals.worker_process_shutdown.connect(_exit_once_announced, weak=False, dispatch_uid=NAME)


def _end_with_worker(**_: object) -> None:
    worker = _worker_pid()
    if worker is not None:
        threading.Thread(target=_watch, args=(worker,), name="worker-watch", daemon=True).start()


def _watch(worker: int) -> None:
    """TERM to this pool process once `worker`, its parent, has ended. Not the kernel's
    parent-death signal: a change of credentials clears that, and every run changes
    its process's to spawn its agent and gates as the run's user."""
    try:
        ended = os.pidfd_open(worker)
    except OSError as exc:
        if exc.errno != errno.ESRCH:  # no pidfd (an old kernel, a seccomp profile): asked
            while os.getppid() == worker:
                time.sleep(1)
    else:
        if os.getppid() == worker:  # the descriptor is of this parent, not of a pid reused
            waiting = select.poll()
            waiting.register(ended, select.POLLIN)
            waiting.poll()  # readable once it has ended
    orphaned()  # its run, if any, is handed back for a sweep to send again
    os.kill(os.getpid(), signal.SIGTERM)


def _end_if_orphaned(**_: object) -> None:
    """After a task, in a pool process whose worker has died: nobody takes its result or
    sends it work. (The TERM its parent's death sent handed its run back.)"""
    worker = _worker_pid()
    if worker is not None and os.getppid() != worker:
        keep_spares(False)  # its spare folder goes with it
        os._exit(0)


def _worker_pid() -> int | None:
    """The worker's main process, which forked this pool process (billiard's record);
    None outside a pool."""
    parent = current_process()._parent_pid
    return int(parent) if parent is not None else None


def _keep_spares(**_: object) -> None:
    """A pool process runs delivery after delivery: each leaves its folder to the next
    (worker.workspace.put_away)."""
    keep_spares(True)


def _exit_once_announced(exitcode: int | None = None, **_: object) -> None:
    """In the pool process, from billiard's exit path right before its DEATH message: the
    process's next put on its result queue is that message, and the last thing it does."""
    keep_spares(False)  # its spare folder goes with it
    worker: Any = current_process()._target  # billiard.pool.Worker, this process's loop
    put = worker.outq.put

    def put_then_exit(message: object) -> None:
        put(message)
        os._exit(exitcode or 0)

    worker.outq.put = put_then_exit
