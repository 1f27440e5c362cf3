"""Shared test infrastructure: a real Redis, real Celery workers, real subprocesses.

Tests use their own Redis database (13 by default), a key prefix and a Celery
queue unique to the session, and delete only their own keys: never FLUSHALL on
a Redis others share; each pytest-xdist worker is a session of its own.
EVALFLEET_TEST_REDIS_URL picks another server; the value "embedded" starts a
private redis-server for each session.

What a session writes: our keys and Celery's result keys under PREFIX (this
process and every evalfleet process it starts use it), its queues' keys (named
after QUEUE), and members naming its workers (their node names carry SESSION)
in kombu's binding sets, which other sessions share. The session's end
deletes exactly those, and fails if any key naming the session is left.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from _pytest.pathlib import LOCK_TIMEOUT, make_numbered_dir_with_cleanup

from core.evaluation.shell import kill_group
from core.store import Store, keys
from scheduler import warm
from scheduler.embedded import worker_args
from scheduler.standby import WORKER_MODULE
from scheduler.warm import RemoteProcess
from tests.support.bytecode import compile_project, rewrite_test_modules
from tests.support.prestarted import Prestarted

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"
SUPPORT = ROOT / "tests" / "support"
# Test modules import this file as `tests.conftest` while pytest loads it as
# `conftest`: both must agree on the session's names. pytest-xdist's workers
# inherit the controller's environment, so each worker's name adds its own id:
# workers never take each other's runs, nor delete each other's keys. The id is
# hashed in, so that no session's name contains another's (gw1 and gw10 would).
_RUN = os.environ.setdefault("EVALFLEET_TEST_SESSION", uuid.uuid4().hex[:8])
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
SESSION = (
    hashlib.sha256(f"{_RUN}:{_XDIST_WORKER}".encode()).hexdigest()[:8] if _XDIST_WORKER else _RUN
)
PREFIX = f"evalfleet-test-{SESSION}:"
QUEUE = f"evalfleet-test-{SESSION}"
# Before anything imports worker.app: Celery's result keys of this process too.
os.environ["EVALFLEET_KEY_PREFIX"] = PREFIX
# The CLI's output to a pipe is 120 columns wide unless COLUMNS says otherwise, and
# the tests read it so; pytest-xdist's workers start with COLUMNS=80 and LINES=24.
# A test that wants a terminal's width sets it itself.
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)
# No command of the tests' is offered to, or leaves behind, a warm process of this
# machine's user (scheduler.warm): the tests of it turn it on in a folder of their own.
os.environ["EVALFLEET_WARM"] = "0"
# The console script of the environment running the tests, wherever it lives.
SCHEDULER = str(Path(sys.executable).parent / "scheduler")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No warm process (scheduler.warm) left by a test: every test's commands run with
    EVALFLEET_WARM=0 but for tests/integration/test_warm.py's, which use runtime folders
    of their own and stop theirs. One in the user's own folder that a test's
    environment started (its PYTHONPATH is this checkout, as every test's) is stopped
    here, and the session fails saying which."""
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the controller looks, once
        return
    marker = f"PYTHONPATH={ROOT}".encode()
    users = str(warm.folder()).encode()
    left = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            command = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
            if (
                b"warm_server" in command
                and users in command
                and marker in (proc / "environ").read_bytes().split(b"\0")
            ):
                os.kill(int(proc.name), signal.SIGTERM)
                left.append(proc.name)
    if left:
        print(f"\nerror: a test left warm processes behind (pids {', '.join(left)}), stopped now")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(tryfirst=True)  # before pytest's own makes its temporary folders' factory
def pytest_configure(config: pytest.Config) -> None:
    """Bytecode for the project and the test modules, once (tests.support.bytecode);
    as root, a base temporary folder run users can reach (_basetemp_for_run_users)."""
    # Started in the background by a shell without job control, pytest inherits SIGINT
    # ignored, and so would every process it starts: the Ctrl-C tests' CLIs among them.
    # A handler of its own is reset to the default in each process it starts.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the controller did it
        return
    if config.option.basetemp is None and os.geteuid() == 0:
        config.option.basetemp = str(_basetemp_for_run_users())
    compile_project(ROOT)
    rewrite_test_modules(config, ROOT / "tests")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    wanted = os.environ.get("EVALFLEET_TEST_REDIS_URL") or _machine_redis()
    if wanted != "embedded":
        yield wanted
        _delete_own_keys(wanted)
        return
    from scheduler.embedded import EmbeddedRedis

    with EmbeddedRedis(tmp_path_factory.mktemp("redis") / ".evalfleet") as server:
        yield server.url


def _machine_redis() -> str:
    """The machine's Redis (database 13) when one answers; else the embedded one, so
    `python -m pytest -q` works as the README says on a machine without Redis."""
    url = "redis://127.0.0.1:6379/13"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError:
        return "embedded"
    return url


# kombu's table of binding sets that expire (shared by every Celery app on the
# database): an exchange whose binding sets are all gone leaves it, as kombu's
# own sweep would do later. Atomic, so a worker binding meanwhile keeps its entry.
_SWEEP_BINDING_DEADLINES = """
for _, exchange in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if redis.call('EXISTS', '_kombu.binding.' .. exchange,
                '_kombu.binding_permanent.' .. exchange) == 0 then
    redis.call('ZREM', KEYS[1], exchange)
  end
end
"""


def _delete_own_keys(url: str) -> None:
    client = redis.Redis.from_url(url)
    for pattern in (f"{PREFIX}*", f"*{QUEUE}*"):
        found = list(client.scan_iter(match=pattern, count=1000))
        for start in range(0, len(found), 500):
            client.delete(*found[start : start + 500])
    # Shared binding sets (celery.pidbox, celeryev): the members of this session's
    # workers (a worker killed with SIGKILL never removes its own).
    for key in client.scan_iter(match="_kombu.binding*", count=1000):
        if client.type(key) == b"set":
            own = [m for m in client.smembers(key) if SESSION.encode() in m]
            if own:
                client.srem(key, *own)
    client.eval(_SWEEP_BINDING_DEADLINES, 1, "_kombu.binding_deadlines")
    # kombu's shared unacknowledged-message hash: what this session's killed workers held.
    own_unacked = _own_unacked(client)
    if own_unacked:
        client.hdel(keys.UNACKED, *own_unacked)
        client.zrem(keys.UNACKED_INDEX, *own_unacked)
    left = [key for key in client.scan_iter(match=f"*{SESSION}*", count=1000)]
    left += [f"unacked {tag!r}" for tag in _own_unacked(client)]
    left += [
        f"{key!r} member {member!r}"
        for key in client.scan_iter(match="_kombu.binding*", count=1000)
        if client.type(key) == b"set"
        for member in client.smembers(key)
        if SESSION.encode() in member
    ]
    if left:
        raise AssertionError(f"the test session left keys in {url}: {left[:20]}")


def _own_unacked(client: redis.Redis, queue: str = QUEUE) -> list[bytes]:
    """Tags of kombu's unacknowledged messages sent to this session's queues, or to
    one queue of a test's own (each entry is [message, exchange, routing key])."""
    own = []
    for tag, raw in client.hscan_iter(keys.UNACKED, count=1000):
        try:
            _, exchange, routing_key = json.loads(raw)
        except (ValueError, TypeError):
            continue
        if queue in f"{exchange} {routing_key}":
            own.append(tag)
    return own


def _basetemp_for_run_users() -> Path:
    """The session's base temporary folder when tests run as root, whose agents run as
    users of their own (worker.confinement) that must pass every folder above their
    run's files. Not under pytest's /tmp/pytest-of-root: every pytest session starting
    on the machine (another checkout's, a test's inner session) makes that 0700 again,
    which would lock out the agents of every session running then. Numbered and kept
    like pytest's own (the last three sessions'), in a folder of root's others may pass."""
    root = Path(tempfile.gettempdir()) / "evalfleet-tests-of-root"
    root.mkdir(mode=0o711, exist_ok=True)
    info = root.lstat()
    if stat.S_ISLNK(info.st_mode) or info.st_uid != 0:  # made by another user to steer ours
        raise pytest.UsageError(f"{root} is not root's own folder; remove it")
    root.chmod(0o711)
    numbered = make_numbered_dir_with_cleanup(
        root=root,
        prefix="pytest-",
        mode=0o711,
        keep=3,
        lock_timeout=LOCK_TIMEOUT,
        register=atexit.register,
    )
    # pytest empties and remakes the folder it is given: a folder below the lock.
    return numbered / "session"


def shared_with_agents(path: Path, *, folder: bool = False) -> Path:
    """`path`, a test's instrumentation (a counter, a pid file, a report an agent writes
    for the test to read), made writable to the users agents run as: a worker running
    as root runs setup, agent and command gates as an unprivileged uid of the run's own
    (worker.confinement), which may write nothing else of the test's. A file is made
    empty, mode 0o666: the test's own, so runs of several uids may all append to it.
    `folder=True`: a folder of mode 0o1777, for files a run creates itself (one it
    moves into place, or whose appearance the test waits for). Returns `path`."""
    if folder:
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o1777)
    else:
        path.touch()
        path.chmod(0o666)
    return path


def passable(folder: Path) -> Path:
    """`folder` and the folders above it in the temporary folder made passable to other
    users (pytest makes them 0700): a worker running as root runs each agent as a user
    of its own (worker.confinement), which reaches its run's files by their paths."""
    for above in [folder, *folder.parents]:
        if above == Path(tempfile.gettempdir()) or above == above.parent:
            break
        above.chmod(above.stat().st_mode | 0o001)
    return folder


@pytest.fixture(autouse=True)
def _passable_tmp_path(tmp_path: Path) -> None:
    # Where tests put their own work folders and experiments' files.
    passable(tmp_path)


@pytest.fixture(scope="session")
def fleet_env(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment every evalfleet process of a test runs with."""
    passable(tmp_path_factory.getbasetemp())
    return {
        **os.environ,
        "EVALFLEET_BROKER_URL": redis_url,
        "EVALFLEET_KEY_PREFIX": PREFIX,
        "EVALFLEET_QUEUE": QUEUE,
        "EVALFLEET_WORKDIR": str(passable(tmp_path_factory.mktemp("runs"))),
        "PYTHONPATH": str(ROOT),
    }


@pytest.fixture
def store(redis_url: str) -> Store:

    return Store.from_url(redis_url, prefix=PREFIX)


# The console script and the workers forked from a process that imported them once
# (why, and what that changes: tests.support.prestarted); EVALFLEET_TEST_EXEC=1 starts
# each anew.
_PRESTARTED = Prestarted(SCHEDULER, Path(tempfile.gettempdir()) / f"evalfleet-{SESSION}.sock", ROOT)
_EXEC = os.environ.get("EVALFLEET_TEST_EXEC") == "1"
atexit.register(_PRESTARTED.close)


class Worker:
    """A real `celery worker` process on the test queue: forked from the prestarted
    process, or (`anew`) started anew (for a test that reads its /proc environ: what
    tests.support.prestarted says differs). Ready when made, unless `ready=False`: then
    `wait_ready` (several workers start at once so)."""

    def __init__(
        self,
        env: dict[str, str],
        log: Path,
        concurrency: int = 2,
        queues: str = QUEUE,
        name: str | None = None,
        anew: bool = False,
        ready: bool = True,
        events: bool = True,
    ):
        self.log = log
        name = f"{name or 'w'}-{SESSION}-{uuid.uuid4().hex[:6]}@%h"
        # The CLI's own arguments (`events=False`: the embedded mode's worker).
        args = worker_args(concurrency, queues.split(","), hostname=name, events=events)
        self.proc: subprocess.Popen[bytes] | RemoteProcess
        with log.open("ab") as out:
            if anew or _EXEC:
                self.proc = subprocess.Popen(
                    [*WORKER_MODULE, *args],
                    env=env,
                    cwd=ROOT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            else:
                self.proc = _PRESTARTED.start_worker(args, env=env, cwd=ROOT, log=out.fileno())
        if ready:
            self.wait_ready()

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "ready." in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"worker not ready: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=15)
        kill_group(self.proc.pid)
        self.proc.wait()


# What the `start_worker` fixture gives a test: start a worker, stopped after the test.
StartWorker = Callable[..., "Worker"]


@pytest.fixture
def start_worker(fleet_env: dict[str, str], tmp_path: Path) -> Iterator[StartWorker]:
    workers: list[Worker] = []

    def start(extra_env: dict[str, str] | None = None, **kwargs: object) -> Worker:
        env = {**fleet_env, **(extra_env or {})}
        worker = Worker(env, tmp_path / f"worker{len(workers)}.log", **kwargs)  # type: ignore[arg-type]
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


def start_cli(
    *args: str, env: dict[str, str], cwd: Path = ROOT, **popen: Any
) -> subprocess.Popen[str]:
    """The `scheduler` console script started in the background, output piped."""
    options: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    return subprocess.Popen([SCHEDULER, *args], env=env, cwd=cwd, text=True, **options)


def scheduler_folder(folder: Path) -> Path:
    """A folder for PATH whose `scheduler` runs as `run_cli` runs it (prestarted, unless
    EVALFLEET_TEST_EXEC=1): for scripts that call the console script by name."""
    return Path(SCHEDULER).parent if _EXEC else _PRESTARTED.shim(folder)


def run_cli(
    *args: str, env: dict[str, str] | None, cwd: Path = ROOT, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """The `scheduler` console script, as a user runs it."""
    if not _EXEC:
        return _PRESTARTED.run_cli(list(args), env=env, cwd=cwd, timeout=timeout)
    return subprocess.run(
        [SCHEDULER, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
