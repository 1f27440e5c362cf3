"""The connection behind a Fleet (scheduler.fleet), which every command and every
Python API call goes through: the store on the shared broker, or on the embedded
Redis of ./.evalfleet, the Celery app to send with, and what was started for it.

A connection opens nothing until its store is first asked for, and `close` stops
exactly what it started, last started first: the local workers, then the embedded
Redis. Celery is imported only when a call needs the app, so the commands that
only read the store never pay for it. The functions of scheduler.running,
.experiments, .versions and .deletion take it; a user holds the Fleet over it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import redis
from rich.console import Console

from core.errors import (
    BrokerUnreachable,
    ExperimentLost,
    ExperimentNotFound,
    InputError,
    LostInRestart,
)
from core.store import Store
from fleet.broker import STATE_DIR

# Not imported until used: reading a finished experiment needs neither the matrix's
# models, nor Celery, nor the embedded Redis's code (on a shared broker).
if TYPE_CHECKING:
    from celery import Celery

    from core.matrix import Matrix
    from scheduler.embedded import EmbeddedRedis, LocalWorkers


class Connection:
    """evalfleet's store and workers as one connection.

    `broker_url` is the shared broker's URL, password included; None is the embedded
    Redis of ./.evalfleet, started on first use (`create=True` lets it start where
    none was ever started), with `workers` local worker processes (default: one per
    CPU) once runs are sent. `queue` is the queue runs are sent to (default:
    EVALFLEET_QUEUE, else evalfleet). Progress bars and notes go to `console`
    (default: nowhere); `hinted` completes the commands a note suggests (the CLI's adds
    the --broker it was given; by default a `--broker URL` stays for the reader to fill).
    """

    def __init__(
        self,
        broker_url: str | None,
        *,
        create: bool = False,
        workers: int | None = None,
        queue: str | None = None,
        console: Console | None = None,
        hinted: Callable[[str], str] = str,
    ):
        self.broker_url = broker_url
        self.create = create
        self.concurrency = workers
        self._queue = queue
        self.console = console or Console(quiet=True)
        self.hinted = hinted
        self._cleanup = contextlib.ExitStack()
        self._store: Store | None = None
        # open_aside's thread, and what it opened (or why it could not).
        self._opening: threading.Thread | None = None
        self._opened: Store | BaseException | None = None
        self._url = ""
        self._app: Celery | None = None
        self._embedded: EmbeddedRedis | None = None  # the embedded Redis, once opened
        self.workers: LocalWorkers | None = None  # the local workers, once started

    def close(self) -> None:
        """Stop what this connection started (local workers, the embedded Redis)."""
        self._join_opening()
        self._cleanup.close()

    def open_aside(self) -> None:
        """Begin opening the store, the embedded Redis started, on a thread of its own:
        Redis starts while the caller reads and checks its matrix, and the store's first
        use waits for it. A caller that then sends nothing calls `close_unused`."""
        if self._store is not None or self._opening is not None:
            return

        def opening() -> None:
            try:
                self._opened = self._open()
            except BaseException as exc:  # raised where the store is first used
                self._opened = exc

        self._opening = threading.Thread(target=opening, name="evalfleet-open", daemon=True)
        self._opening.start()

    def close_unused(self) -> None:
        """`close`, for a connection that stored nothing (a refused matrix): the embedded
        store's folder goes too if it was made for it, so that a refused submit leaves
        the folder as it found it."""
        self._join_opening()
        embedded = self._embedded
        self.close()
        if embedded is not None and embedded.made_state_dir:
            shutil.rmtree(embedded.state_dir, ignore_errors=True)

    def broker_gone(self) -> str | None:
        """Why this connection's broker will not answer again, when it will not: an
        embedded Redis the command that started it has stopped. A shared broker may
        come back (None)."""
        if self._embedded is None or not self._embedded.url:
            return None
        from scheduler.embedded import broker_gone

        return broker_gone(self._embedded.state_dir, self._embedded.url)

    def _join_opening(self) -> None:
        if self._opening is not None:
            self._opening.join()
            self._opening = None

    def _ready(self) -> Store:
        """The store, opened now or by open_aside's thread."""
        if self._store is None:
            self._join_opening()
            opened, self._opened = self._opened, None
            if isinstance(opened, BaseException):
                raise opened
            self._store = opened if opened is not None else self._open()
        return self._store

    @property
    def queue(self) -> str:
        """Where runs without a queue of their own go."""
        if self._queue is None:
            from fleet.sending import configured_queue

            self._queue = configured_queue()
        return self._queue

    @property
    def shared(self) -> bool:
        """True on a shared broker: the fleet's workers run elsewhere, on their own."""
        return self.broker_url is not None

    @property
    def store(self) -> Store:
        return self._ready()

    @property
    def url(self) -> str:
        """The broker's URL, password included (the embedded one's once it runs)."""
        self._ready()
        return self._url

    @property
    def app(self) -> Celery:
        """The Celery app on the broker, for the calls that send runs or ask workers: the
        fleet's app, which sends tasks by name (fleet.app). Imported here: Celery takes
        a third of a second that `scheduler --help` and `validate` should not pay."""
        if self._app is None:
            from fleet.app import fleet_app

            self._app = fleet_app(self.url, default_queue=self.queue)
        return self._app

    def start_workers(self, queues: list[str], runs: int | None = None) -> LocalWorkers:
        """The local worker processes on the embedded Redis, stopped with the
        connection: no more than `runs`, when the work has that many at most. Started
        before Celery is imported here: their start-up, the longest wait of a short
        experiment, runs beside this process's own."""
        self._ready()
        # Callers ask only in embedded mode (not `shared`): a shared fleet's workers run
        # elsewhere.
        assert self._embedded is not None
        from scheduler.embedded import LocalWorkers

        count = self.concurrency or os.cpu_count() or 1
        if runs is not None:
            count = max(min(count, runs), 1)
        local = LocalWorkers(self._embedded, count, queues)
        local.nudge = lambda: self._wake(local.nodes)
        local.waiting = self.say
        self.workers = self._cleanup.enter_context(local)
        return local

    def say(self, line: str, *, soft_wrap: bool = True) -> None:
        """A note on the console (progress bars have it too), its commands `hinted`."""
        self.console.print(self.hinted(line), soft_wrap=soft_wrap)

    def _wake(self, nodes: list[str]) -> None:
        """A control message to these workers, no reply asked: an event their loops wake
        for (none when nothing was sent: the app, and Celery, were never needed)."""
        if self._app is None:
            return
        from celery.utils.nodenames import host_format

        destination = [host_format(node) for node in nodes]
        self._app.control.broadcast("ping", destination=destination, reply=False)

    def queues(self, matrix: Matrix) -> list[str]:
        """What local workers consume: the default queue first, then every queue the
        matrix names."""
        from fleet.sending import run_queues

        return [self.queue, *sorted(run_queues(matrix, self.queue) - {self.queue})]

    def has_experiment(self, exp_id: str) -> bool:
        """Whether the store has `exp_id`; False, without opening it, before it is open."""
        if self._store is None:
            return False
        try:
            return self._store.experiments.exists(exp_id)
        except redis.RedisError:
            return False

    def experiment_id(self, experiment: str | None) -> str:
        """`experiment` when the store has it, the latest experiment when None."""
        if experiment is None:
            latest = self.store.experiments.latest()
            if latest is None:
                raise InputError(
                    "no experiments yet; start one with `scheduler submit matrix.yaml`"
                )
            return latest
        try:
            self.store.experiments.require(experiment)
        except (ExperimentLost, LostInRestart):
            raise
        except ExperimentNotFound:
            from core.matrix import did_you_mean

            known = self.store.experiments.recent_ids()
            raise ExperimentNotFound(experiment, did_you_mean(experiment, known)) from None
        return experiment

    def _open(self) -> Store:
        if self.broker_url is not None:
            store = Store.from_url(self.broker_url)
            try:
                store.redis.ping()
            except redis.RedisError as exc:
                raise BrokerUnreachable(
                    f"cannot reach the broker at {_safe(self.broker_url)}: {exc}"
                ) from None
            self._url = self.broker_url
            return store
        if not self.create and not STATE_DIR.is_dir():
            raise InputError(
                "no broker given and no embedded store in this folder (./.evalfleet); "
                "pass --broker URL or run `scheduler submit` here first"
            )
        from scheduler.embedded import EmbeddedRedis

        self._embedded = self._cleanup.enter_context(EmbeddedRedis())
        self._url = self._embedded.url
        return Store.from_url(self._url)


def _safe(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url
