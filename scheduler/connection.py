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
from core.matrix import Matrix, did_you_mean
from core.store import Store
from fleet.broker import STATE_DIR
from fleet.sending import configured_queue, run_queues
from scheduler.embedded import EmbeddedRedis, LocalWorkers

if TYPE_CHECKING:
    from celery import Celery


class Connection:
    """evalfleet's store and workers as one connection.

    `broker_url` is the shared broker's URL, password included; None is the embedded
    Redis of ./.evalfleet, started on first use (`create=True` lets it start where
    none was ever started), with `workers` local worker processes (default: one per
    CPU) once runs are sent. `queue` is the queue runs are sent to (default:
    EVALFLEET_QUEUE, else evalfleet). Progress bars and notes go to `console`
    (default: nowhere).
    """

    def __init__(
        self,
        broker_url: str | None,
        *,
        create: bool = False,
        workers: int | None = None,
        queue: str | None = None,
        console: Console | None = None,
    ):
        self.broker_url = broker_url
        self.create = create
        self.concurrency = workers
        self.queue = queue or configured_queue()
        self.console = console or Console(quiet=True)
        self._cleanup = contextlib.ExitStack()
        self._store: Store | None = None
        self._url = ""
        self._app: Celery | None = None
        self._embedded: EmbeddedRedis | None = None  # the embedded Redis, once opened
        self.workers: LocalWorkers | None = None  # the local workers, once started

    def close(self) -> None:
        """Stop what this connection started (local workers, the embedded Redis)."""
        self._cleanup.close()

    @property
    def shared(self) -> bool:
        """True on a shared broker: the fleet's workers run elsewhere, on their own."""
        return self.broker_url is not None

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = self._open()
        return self._store

    @property
    def url(self) -> str:
        """The broker's URL, password included (the embedded one's once it runs)."""
        if self._store is None:
            self._store = self._open()
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

    def start_workers(self, queues: list[str]) -> LocalWorkers:
        """The local worker processes on the embedded Redis, stopped with the
        connection. Started before Celery is imported here: their start-up, the
        longest wait of a short experiment, runs beside this process's own."""
        if self._store is None:
            self._store = self._open()
        # Callers ask only in embedded mode (not `shared`): a shared fleet's workers run
        # elsewhere.
        assert self._embedded is not None
        local = LocalWorkers(self._embedded, self.concurrency or os.cpu_count() or 1, queues)
        local.nudge = lambda: self._wake(local.hostname)
        self.workers = self._cleanup.enter_context(local)
        return local

    def say(self, line: str, *, soft_wrap: bool = True) -> None:
        """A note on the console (progress bars have it too)."""
        self.console.print(line, soft_wrap=soft_wrap)

    def _wake(self, hostname: str) -> None:
        """A control message to one worker, no reply asked: an event its loop wakes for
        (none when nothing was sent: the app, and Celery, were never needed)."""
        if self._app is None:
            return
        from celery.utils.nodenames import host_format

        self._app.control.broadcast("ping", destination=[host_format(hostname)], reply=False)

    def queues(self, matrix: Matrix) -> list[str]:
        """What local workers consume: the default queue first, then every queue the
        matrix names."""
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
        self._embedded = self._cleanup.enter_context(EmbeddedRedis())
        self._url = self._embedded.url
        return Store.from_url(self._url)


def _safe(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url
