"""Long-running fleet processes for tests: a command with a log, waited on and stopped.

Workers started through the `scheduler worker` CLI (as a CI job starts them),
Flower and redis-server all go through `Service`, so every test stops what it
started, its whole process group included, even when an assertion fails. A
`RedisServer` is the exception: a test crashes and restarts it on purpose.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import redis

from core.evaluation.shell import kill_group
from core.store import Store
from fleet.broker import running_embedded_broker
from scheduler.embedded import redis_server_binary
from tests.conftest import PREFIX, ROOT, SESSION, start_cli

BIN = Path(sys.executable).parent
T = TypeVar("T")


def executable(name: str) -> str:
    """A console script of this venv (scheduler, celery) first, else one on PATH."""
    found = shutil.which(name, path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        raise FileNotFoundError(name)
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie nobody reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def a_run_under_way(state: Path) -> bool:
    """A worker of the embedded Redis whose state file is `state` holds a run's lease:
    it took the run and started it."""
    url = running_embedded_broker(state.parent)
    if url is None:
        return False
    store = Store.from_url(url, prefix=PREFIX)
    exp_id = store.experiments.latest()
    return exp_id is not None and bool(store.leases.live(exp_id))


def wait_until(check: Callable[[], T | None], what: str, timeout: float = 60.0) -> T:
    """Poll `check` until it returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


class Service:
    """A process in its own group, output to a log file."""

    def __init__(
        self,
        command: Sequence[str],
        env: dict[str, str],
        log: Path,
        cwd: Path = ROOT,
    ):
        self.command = [executable(command[0]), *command[1:]]
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.command,
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None and text not in self.output():
                raise AssertionError(
                    f"{self.command[0]} exited ({self.proc.returncode}) before printing "
                    f"{text!r}:\n{self.output()[-3000:]}"
                )
            return text in self.output()

        wait_until(seen, f"{text!r} from {' '.join(self.command)}", timeout)

    def signal(self, signum: int, *, group: bool = False) -> None:
        if group:
            os.killpg(self.proc.pid, signum)
        else:
            self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)
        kill_group(self.proc.pid)
        self.proc.wait()


@contextlib.contextmanager
def services() -> Iterator[list[Service]]:
    """Collects Services and stops them all, newest first, whatever happens."""
    started: list[Service] = []
    try:
        yield started
    finally:
        for service in reversed(started):
            service.stop()


def cli_worker(env: dict[str, str], log: Path, *args: str, name: str = "fleet") -> Service:
    """`scheduler worker ...` as a CI job runs it, ready to take runs."""
    hostname = f"{name}-{SESSION}-{uuid.uuid4().hex[:6]}@%h"
    worker = Service(["scheduler", "worker", "--hostname", hostname, *args], env, log)
    worker.wait_for("ready.")
    return worker


class RedisServer:
    """A redis-server of the test's own, with AOF (or, not `persistent`, nothing kept on
    disk), that the test can kill and restart. Its `folder` is best not the one of a
    matrix: a submit sends the files there, which Redis changes as it runs."""

    def __init__(self, folder: Path, password: str, *, persistent: bool = True):
        self.binary = redis_server_binary()
        self.appendonly = "yes" if persistent else "no"
        self.folder, self.password, self.port = folder, password, free_port()
        self.url = f"redis://:{password}@127.0.0.1:{self.port}/0"
        folder.mkdir(parents=True, exist_ok=True)
        self.start()

    def start(self) -> None:
        # The password from a file, not an argument: tests that hunt for it in every
        # process's /proc/PID/cmdline must not find it in this one's.
        config = self.folder / "password.conf"
        config.write_text(f"requirepass {self.password}\n")
        config.chmod(0o600)
        command = [
            self.binary, str(config), "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.folder), "--appendonly", self.appendonly, "--appendfsync", "always",
            "--save", "", "--logfile", "redis.log",
        ]  # fmt: skip
        proc = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        wait_until(lambda: _pings(client), "redis-server to answer", timeout=20)
        self.proc = proc

    def stop(self) -> None:
        self.proc.kill()  # a crash, not a clean shutdown
        self.proc.wait()

    def restart(self, down_s: float) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def interrupted_while_following(
    *args: str, env: dict[str, str], cwd: Path = ROOT
) -> tuple[str, str]:
    """`scheduler submit ... --wait` (`args`) on a shared broker whose queue no worker
    takes, interrupted (Ctrl-C) once it printed the experiment's id and follows it: the
    id, and what it said on stderr. It must exit 130."""
    proc = start_cli(*args, env=env, cwd=cwd)
    assert proc.stdout is not None
    exp_id = proc.stdout.readline().strip()  # printed once sent, then it follows
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    return exp_id, stderr
