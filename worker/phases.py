"""A run's phase as Flower shows it: `task-<phase>` events, sent off the run's path.

Flower shows the latest event of a task as its state (AGENT, GATES, JUDGE).
Not `update_state`: that would leave a result key per run in Redis, which run
tasks avoid (they ignore their result). A run hands its events to one sender
thread per process and goes on; they keep their order. The sender waits the
linger (EVALFLEET_EVENTS_LINGER_S, default 0.05 s) after an event for the ones
that follow it and publishes them together as one `task.multi` message, as the
worker's own task events travel (worker.task_events): a quick run's three
phases cost one publish, not three that each woke the sender and took the GIL
from the run (10% of a 2-slot fleet's throughput of no-op runs), and a phase
reaches Flower at most the linger late. Best effort: an event that cannot be
sent (Redis away) is dropped, never the run's problem. Flower ranks SUCCESS
above these states, so one that arrives after the task's end does not hide it.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import cache
from queue import Empty, SimpleQueue
from typing import Any

from celery import Celery

from core.settings import setting

log = logging.getLogger(__name__)

ENV_LINGER_S = "EVALFLEET_EVENTS_LINGER_S"


def linger_s() -> float:
    return setting(ENV_LINGER_S)


class PhaseEvents:
    """The sender of one worker process; events go out as its worker's hostname,
    which is how Flower files them."""

    def __init__(self, app: Celery, hostname: str):
        self.app = app
        self.hostname = hostname
        self.pending: SimpleQueue[dict[str, Any]] = SimpleQueue()
        self.linger_s = linger_s()
        threading.Thread(target=self._send_all, name="phase-events", daemon=True).start()

    def send(self, task_id: str, phase: str, name: str, **fields: Any) -> None:
        """`name`: the task's. Flower labels its metrics with an event's own task name,
        and a phase can reach it before the worker's task-received event does."""
        self.pending.put({"type": f"task-{phase}", "uuid": task_id, "name": name, **fields})

    def _send_all(self) -> None:
        dispatcher = self.app.events.Dispatcher(
            self.app.connection_for_write(),
            hostname=self.hostname,
            enabled=True,
            buffer_group=["task"],  # held until flush: one task.multi message
        )
        while True:
            batch = [self.pending.get()]
            time.sleep(self.linger_s)
            try:
                while True:
                    batch.append(self.pending.get_nowait())
            except Empty:
                pass
            try:
                for event in batch:
                    dispatcher.send(event.pop("type"), retry=False, **event)
                dispatcher.flush()
            except Exception as exc:  # phases shown late or not at all
                log.debug("phase events not sent: %s", exc)


@cache
def phase_events(app: Celery, hostname: str) -> PhaseEvents:
    return PhaseEvents(app, hostname)
