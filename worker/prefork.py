"""Celery's prefork pool, stopped without waiting on timers when nothing is left to wait for.

Every shutdown (the embedded mode's after each experiment, a CI job's at its
end) paid two fixed sleeps after the last run had long been acknowledged:

- Celery's `TaskPool.on_stop` joins the pool beside a thread that fires the
  event loop's timers (heartbeats, acks of results the join waits for) every
  0.5 s, and then waits for that thread's sleep to end: half a second after a
  join that takes milliseconds. With no job in the pool's cache there are no
  results to wait for, and the join is Celery's own plain one (its path
  without an event loop), with the queued acks run as its timer thread would.
  A pool still holding jobs (a warm shutdown mid-run) goes through Celery's
  on_stop unchanged.
- billiard's pool process, when its loop ends, sends its parent a DEATH
  message, then sleeps a second for the parent to answer with SIGTERM. While
  the worker shuts down the parent no longer reads those messages, so the
  process exits by itself right after its message is out, as the parent's
  answer would have made it.

The worker runs this pool by the app's `worker_pool` setting: `python -m
worker` and `celery -A worker.app worker` alike.
"""

from __future__ import annotations

import os
from typing import Any

from billiard.pool import CLOSE, RUN
from billiard.process import current_process
from celery import signals
from celery.concurrency import prefork
from kombu.asynchronous import get_event_loop

NAME = f"{__name__}:TaskPool"


class TaskPool(prefork.TaskPool):
    _pool: Any  # billiard's AsynPool, once started

    def on_stop(self) -> None:
        pool = self._pool
        if pool is not None and pool._state in (RUN, CLOSE) and not pool._cache:
            pool.close()
            pool.join()
            self._pool = None
            hub = get_event_loop()
            if hub is not None:
                # Acks the worker's loop queued before it stopped, as Celery's timer
                # thread runs them on its first pass.
                prefork._run_ready_callbacks(hub)
        super().on_stop()  # the rest (jobs still running), and nothing once joined here


def register() -> None:
    signals.worker_process_shutdown.connect(_exit_once_announced, weak=False, dispatch_uid=NAME)


def _exit_once_announced(exitcode: int | None = None, **_: object) -> None:
    """In the pool process, from billiard's exit path right before its DEATH message: the
    process's next put on its result queue is that message, and the last thing it does."""
    worker: Any = current_process()._target  # billiard.pool.Worker, this process's loop
    put = worker.outq.put

    def put_then_exit(message: object) -> None:
        put(message)
        os._exit(exitcode or 0)

    worker.outq.put = put_then_exit
