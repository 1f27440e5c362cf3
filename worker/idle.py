"""`--until-idle SECONDS`: a worker that leaves by itself once its queues have drained.

A CI job that starts N workers must end when the experiment is done. The worker
counts as idle while it holds no task, has started none since the last look,
and every queue it consumes is empty. After SECONDS of that without a break it
sweeps for lost runs once (fleet.recovery: a run a dead worker held is in no
queue, and the sweeps' own interval may be longer than SECONDS); if that sent
none again and the worker is still idle, it begins Celery's warm shutdown,
exactly as SIGTERM would, and exits 0.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import click
from celery import Celery, bootsteps
from celery.platforms import EX_OK
from celery.worker import state
from kombu import Connection
from kombu.exceptions import ChannelError

from fleet.app import BROKER_DOWN
from fleet.recovery import recover_all
from worker.tasks import store_of

logger = logging.getLogger(__name__)


def register(app: Celery) -> None:
    """`celery -A worker.app worker --until-idle 120` (and `scheduler worker`)."""
    app.user_options["worker"].add(
        click.Option(
            ["--until-idle"],
            type=click.FloatRange(min=0),
            default=None,
            metavar="SECONDS",
            help="Exit 0 once no task has run and the queues have stayed empty this long.",
        )
    )
    app.steps["worker"].add(UntilIdle)


class UntilIdle(bootsteps.StartStopStep):
    """Worker bootstep behind the `--until-idle` option; absent without it."""

    label = "until-idle"
    # After the pool has forked its processes: a process forked while the watch's thread
    # held a lock (its broker connection's, say) starts with that lock held and never
    # takes a task, and the warm shutdown then waits on it for ever.
    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker: Any, until_idle: float | None = None, **kwargs: Any):
        super().__init__(worker, **kwargs)
        self.idle_s = until_idle
        self.enabled = until_idle is not None
        self.watch: IdleWatch | None = None

    def start(self, worker: Any) -> None:
        assert self.idle_s is not None
        queues = worker.app.amqp.queues
        names = list(queues.consume_from or queues)
        app = worker.app
        self.watch = IdleWatch(app, names, self.idle_s, lambda: recover_all(app, store_of(app)))
        self.watch.start()

    def stop(self, worker: Any) -> None:
        if self.watch is not None:
            self.watch.stop()


class IdleWatch(threading.Thread):
    """Polls this worker's load and its queues' lengths; asks for shutdown when idle long enough."""

    def __init__(
        self, app: Celery, queues: Sequence[str], idle_s: float, sweep: Callable[[], list[str]]
    ):
        super().__init__(name="evalfleet-until-idle", daemon=True)
        self.app = app
        self.queues = list(queues)
        self.idle_s = idle_s
        self.sweep = sweep
        # Often enough that a short window is honoured, rarely enough to cost
        # nothing on the broker with a large fleet.
        self.poll_s = min(max(idle_s / 10, 0.2), 5.0)
        self._stopping = threading.Event()
        self._conn: Connection | None = None

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        quiet_since = time.monotonic()
        started = state.all_total_count[0]
        while not self._stopping.wait(self.poll_s):
            now = time.monotonic()
            if not self._quiet(started):
                quiet_since, started = now, state.all_total_count[0]
                continue
            if now - quiet_since >= self.idle_s:
                if not self._swept_quiet(started):
                    quiet_since, started = time.monotonic(), state.all_total_count[0]
                    continue
                logger.warning(
                    "until-idle: no task and queues %s empty for %g s; shutting down",
                    ",".join(self.queues),
                    self.idle_s,
                )
                state.should_stop = EX_OK  # what Celery's own SIGTERM handler sets
                break
        self._close()

    def _quiet(self, started: int) -> bool:
        """No task held, none started since `started` counted, and our queues empty."""
        return not state.requests and state.all_total_count[0] == started and self._queued() == 0

    def _swept_quiet(self, started: int) -> bool:
        """Still quiet after a sweep for lost runs that sent none again: one it sent may
        be on its way to this worker, in no queue yet and not taken (another window
        then). A sweep the broker refuses (full, or away) does not keep the worker: its
        queues, read, say whether it is idle."""
        try:
            if self.sweep():
                return False
        except BROKER_DOWN as exc:
            logger.warning("until-idle: the sweep for lost runs was refused: %s", exc)
        except Exception:  # the worker's own sweeps go on: leaving must not hang on it
            logger.exception("until-idle: the sweep for lost runs failed")
        return self._quiet(started)

    def _queued(self) -> int | None:
        """Messages waiting in our queues; None when the broker cannot say (not idle then)."""
        if self._conn is None:
            self._conn = self.app.connection_for_read()
        try:
            channel = self._conn.default_channel
            return sum(_queue_length(channel, name) for name in self.queues)
        except (*self._conn.connection_errors, OSError) as exc:
            # The broker is down or restarting; the worker itself is reconnecting.
            logger.info("until-idle: cannot read queue lengths (%s); not idle", exc)
            self._close()
            return None

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.release()
            self._conn = None


def _queue_length(channel: Any, name: str) -> int:
    try:
        return int(channel.queue_declare(queue=name, passive=True).message_count)
    except ChannelError:
        # Redis drops an empty list, so a drained queue "does not exist".
        return 0
