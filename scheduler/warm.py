"""Commands run warm: a `scheduler` process of this user's, its code imported once,
forks each command (and each local worker) instead of a new interpreter
importing click, pydantic's models, Celery and rich again (~0.4 s a command,
~0.5 s a worker, on this project's 2-core reference machine).

    scheduler submit m.yaml        # no warm process yet: runs as ever, then starts one
    scheduler submit m.yaml        # handed to the warm process: starts in ~0.05 s
    scheduler warm                 # where it is, its state; `scheduler warm --stop`

The console script (scheduler.console) first offers its command here (`relay`):
it connects to the warm process's socket and passes its arguments, environment,
folder, umask and its own standard streams (the descriptors themselves, so a
terminal stays a terminal); the warm process forks, the fork becomes the
command (scheduler.warm_server), and this process passes on the signals it gets
(Ctrl-C; Ctrl-Z stops the command with it, `fg` continues both) and ends with
the command's exit status. A command run so starts its local workers the same
way (`start_worker`).

What keeps a warm process from running anything but what this interpreter would:

- one per interpreter and setting: its key names the Python, its sys.path, the
  user and its groups, the resource limits, the control group (a systemd unit's,
  a container's: their limits and accounting cover what it forks), the
  namespaces and every variable read as Python starts (PYTHON*, the locale's);
  the socket's name is a checksum of the key, the process compares the whole key
  and answers another with "other";
- the commands that serve for as long as they run (`scheduler worker`,
  `scheduler model-server`) are never run warm: a process supervisor sees and
  stops them as the process it started;
- a stale one is never used: before each fork it compares the modification
  times of every module it imported and of every folder packages are installed
  in on sys.path (a package installed) with those at its start, and if one
  changed it answers "stale" and leaves; the command then runs cold, as does
  every command while none answers;
- only this user reaches it: the socket lives in a folder of this user's alone
  (mode 0700, checked; otherwise nothing runs warm), and the process accepts a
  connection only from its own user id (SO_PEERCRED). An agent run as a user
  of its own (worker.confinement) cannot open it;
- it leaves after EVALFLEET_WARM_IDLE_S seconds with nothing to do (default
  900), and its environment is only its key's variables: its /proc environ
  holds none of a command's secrets.

EVALFLEET_WARM=0 turns it off (the test suite does, but for the tests of it), and
none is started where CI is set (a CI job's steps would leave it behind).

Standard library only: the console script runs this before it imports anything.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import stat
import struct
import sys
import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import socket

# json, socket, subprocess, select and time are imported where they are used: a command
# with no warm process to relay to pays only for a stat of where its socket would be.

ENV_WARM = "EVALFLEET_WARM"  # "0": never run warm, never start a warm process
ENV_IDLE = "EVALFLEET_WARM_IDLE_S"  # read by the warm process as it starts
HEADER = struct.Struct("!I")
UCRED = struct.Struct("3i")  # SO_PEERCRED: pid, uid, gid
STREAMS = 3  # stdin, stdout, stderr
# The commands after which a warm process is started when none is there: those that
# run something (a first `--help` or `status` need not leave a process behind).
_STARTS_ONE = {"submit", "resume", "validate", "run", "rejudge", "report", "show"}

# Commands that run until stopped: a warm start gains them nothing and would take them
# out of the process (and the control group) a supervisor started.
_SERVES = {"worker", "model-server"}
# Set in a command the warm process forked: the socket it came from (start_worker).
served_from: str | None = None


# A process started with `unshare -n` (no network), in a container or a jail, has
# namespaces of its own: commands are forked only where they would have run.
_NAMESPACES = ("mnt", "net", "pid", "user", "uts", "ipc", "cgroup")


def _namespace(kind: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{kind}")
    except OSError:
        return ""


def key() -> dict[str, Any] | None:
    """What a warm process must share with this one to run its commands; None where none
    may (sys.path names a folder relative to the current one)."""
    if not all(os.path.isabs(p) for p in sys.path):
        return None
    limits = {
        name: resource.getrlimit(getattr(resource, name))
        for name in sorted(dir(resource))
        if name.startswith("RLIMIT_")
    }
    startup = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("PYTHON", "LC_")) or k in ("LANG", "LANGUAGE", "TZ", ENV_IDLE)
    }
    try:  # a service's or a terminal's own control group: its limits and its accounting
        with open("/proc/self/cgroup", encoding="utf-8") as group:
            cgroup = group.read()
    except OSError:
        cgroup = ""
    return {
        "python": sys.executable,
        "version": sys.version,
        "path": sys.path,
        "user": [os.getuid(), os.getgid(), sorted(os.getgroups())],
        "limits": limits,
        "cgroup": cgroup,
        "namespaces": [_namespace(kind) for kind in _NAMESPACES],
        "startup": startup,
    }


def folder() -> str | None:
    """This user's folder for warm processes, made if missing; None if it is not this
    user's alone (another user made it first: nothing runs warm)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    path = os.path.join(runtime, f"evalfleet-warm-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode=0o700)
    try:
        info = os.lstat(path)
    except OSError:
        return None
    mine = stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
    return path if mine and info.st_mode & 0o077 == 0 else None


def socket_path(this_key: Mapping[str, Any]) -> str | None:
    place = folder()
    if place is None:
        return None
    # Only a name: the warm process compares the whole key (json is not imported yet).
    checksum = zlib.crc32(repr(sorted(this_key.items())).encode())
    return os.path.join(place, f"{checksum:08x}.sock")


def enabled() -> bool:
    """Whether a command here may be run warm: not turned off, and not one a warm process
    forked already."""
    return os.environ.get(ENV_WARM, "1") != "0" and served_from is None


def relay(argv: Sequence[str]) -> None:
    """Runs the command in this user's warm process and never returns; returns if there
    is none (or it is stale, or another's): then the command runs here."""
    if not enabled() or _holds_a_password(argv, os.environ) or _SERVES.intersection(argv[1:2]):
        return
    if (this_key := key()) is None or (path := socket_path(this_key)) is None:
        return
    if os.path.exists(path):  # else none started yet, or it left
        relay_to(path, argv, this_key)


def relay_to(path: str, argv: Sequence[str], this_key: Mapping[str, Any] | None = None) -> None:
    """Runs the command in the warm process at `path` and never returns, passing on the
    signals this process gets; returns if it did not take the command (it left meanwhile,
    or answered "stale" or "other"): then the command runs here."""
    pending: list[int] = []  # signals that came before the command's pid (Ctrl-Z too)
    handlers = {s: signal.getsignal(s) for s in (*_PASSED_ON, signal.SIGTSTP)}
    for signum in handlers:
        signal.signal(signum, lambda received, frame: pending.append(received))
    conn = None
    try:
        conn = request(path, "cli", argv, dict(os.environ), os.getcwd(), [0, 1, 2], this_key)
        replies = conn.makefile("rb")
        first = replies.readline().decode().strip()
    except OSError:  # it left meanwhile
        first = ""
    if not first.isdigit():  # none there, stale or another's: run cold
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        if conn is not None:
            conn.close()
        for received in pending:  # as if they came now
            signal.raise_signal(received)
        return
    pid = int(first)
    for signum in _PASSED_ON:
        signal.signal(signum, lambda received, frame: _pass_on(pid, received))
    signal.signal(signal.SIGTSTP, lambda received, frame: _suspend_with(pid))
    signal.signal(signal.SIGCONT, lambda received, frame: _pass_on(pid, received))
    for received in pending:
        if received == signal.SIGTSTP:
            _suspend_with(pid)
        else:
            _pass_on(pid, received)
    try:
        status = replies.readline()
    except OSError:
        status = b""
    if not status:
        sys.exit(f"scheduler: the warm process left before the command (pid {pid}) ended")
    exit_as(int(status))


def _holds_a_password(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """A broker password in the arguments or the environment: a command run cold blanks
    it in its own /proc/PID/cmdline and environ as it starts (fleet.broker.hide_broker);
    this process, waiting on a warm command, would show it for the command's life."""
    urls = [a for a in argv if "://" in a] + [env.get(name, "") for name in _BROKER_URLS]
    return any("@" in url for url in urls) or _BROKER_PASSWORD in env


# fleet.broker's names of the broker's URL and password, here so as not to import it
# first (tests/unit/scheduler/test_warm.py holds them to its).
_BROKER_URLS = ("EVALFLEET_BROKER_URL", "CELERY_BROKER_URL")
_BROKER_PASSWORD = "EVALFLEET_BROKER_PASSWORD"
# Ctrl-C and the ends a terminal or a supervisor sends; the window's size for rich.
_PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGWINCH)


def _suspend_with(pid: int) -> None:
    """Ctrl-Z: the command stops with this process, which the shell's `fg` (or `bg`)
    continues, SIGCONT then passed on: the command is not in the shell's job."""
    _pass_on(pid, signal.SIGSTOP)
    signal.signal(signal.SIGTSTP, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTSTP)  # stops here until continued
    signal.signal(signal.SIGTSTP, lambda received, frame: _suspend_with(pid))


def _pass_on(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def exit_as(code: int) -> NoReturn:
    """End as a process that exited with `code` (negative: killed by that signal)."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


# wide: the request's fields, each a part of the process to be (as subprocess.Popen's)
def request(
    path: str,
    kind: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    fds: Sequence[int],
    this_key: Mapping[str, Any] | None = None,
) -> socket.socket:
    """A connection to the warm process at `path` asking for a `kind` ("cli" or "worker")
    process, `fds` its stdin, stdout and stderr. Its first reply line is the pid (or
    "stale", "other"), its second the exit status."""
    import json
    import socket

    umask = os.umask(0)
    os.umask(umask)
    body = {
        "kind": kind, "argv": list(argv), "env": dict(env), "cwd": cwd, "umask": umask,
        "key": this_key,
    }  # fmt: skip
    data = json.dumps(body).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        socket.send_fds(conn, [HEADER.pack(len(data)) + data], list(fds))
    except OSError:
        conn.close()
        raise
    return conn


def start(argv: Sequence[str]) -> None:
    """After a command that ran cold: a warm process for the next, when none holds the
    lock beside its socket (the one it holds while it starts and serves)."""
    if not enabled() or os.environ.get("CI") or not argv or argv[0] not in _STARTS_ONE:
        return
    if any(a in ("-h", "--help") for a in argv):
        return
    if (this_key := key()) is None or (path := socket_path(this_key)) is None:
        return
    if _holder(path + ".lock") is not None:
        return  # one is starting or serving (a stale one is replaced after it leaves)
    import json
    import subprocess

    from core.errors import SettingError
    from core.settings import setting

    try:
        setting(ENV_IDLE)  # read again by the warm process: a bad one is said here
    except SettingError as exc:
        print(f"warning: {exc}; no warm process was started", file=sys.stderr)
        return
    env = {**this_key["startup"], "PATH": os.environ.get("PATH", os.defpath)}
    with contextlib.suppress(OSError):
        # The key on its stdin: a command line is anyone's to read in /proc.
        server = subprocess.Popen(
            [sys.executable, "-P", "-m", "scheduler.warm_server", path],
            env=env,
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert server.stdin is not None
        with server.stdin:
            server.stdin.write(json.dumps(this_key).encode())


def running() -> list[tuple[str, int, bool, bool]]:
    """This user's warm processes: each one's socket, pid, whether it would run this
    interpreter's commands (its key is this one's) and whether it answers yet (one
    still importing does not). Each holds a lock beside its socket, with its pid in."""
    import socket

    place = folder()
    if place is None:
        return []
    this_key = key()
    mine = socket_path(this_key) if this_key is not None else None
    found = []
    for lock in sorted(os.path.join(place, n) for n in os.listdir(place) if n.endswith(".lock")):
        path = lock.removesuffix(".lock")
        if (pid := _holder(lock)) is None:
            continue
        answers = False
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
            probe.connect(path)
            answers = True
        found.append((path, pid, path == mine, answers))
    return found


def _holder(lock: str) -> int | None:
    """The pid of the warm process holding `lock` (scheduler.warm_server writes it there
    once it holds it); None if nobody holds it."""
    import fcntl

    try:
        with open(lock, "rb") as held:
            try:
                fcntl.flock(held, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return None
            except BlockingIOError:
                return int(held.read().strip() or 0) or None
    except (OSError, ValueError):
        return None


def stop(every: bool = False) -> tuple[list[int], list[int]]:
    """Stops the warm process of this Python and settings, or (`every`) all of this
    user's, those still starting too (TERM: each removes its socket); the pids stopped,
    and those of the others left running (another checkout's, say, which is not this
    command's to stop unasked)."""
    stopped, left = [], []
    for _, pid, mine, _ in running():
        if not (mine or every):
            left.append(pid)
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            stopped.append(pid)
    return stopped, left


class RemoteProcess:
    """A process the warm process forked, as subprocess.Popen shows one: pid, poll, wait
    and signals. Only its parent (the warm process's handler) can wait for it: its
    exit status comes over the connection."""

    def __init__(self, conn: socket.socket, args: Sequence[str]) -> None:
        self.args = list(args)
        self.returncode: int | None = None
        self._conn = conn
        self._replies = b""
        pid = self._line(timeout=30)
        if pid is None or not pid.isdigit():
            conn.close()
            raise OSError(f"the warm process did not start {self.args[:2]}: {pid}")
        self.pid = int(pid)

    def poll(self) -> int | None:
        if self.returncode is None and (status := self._line(timeout=0)) is not None:
            self._ended(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            status = self._line(timeout=timeout)
            if status is None:
                import subprocess

                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._ended(status)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _ended(self, status: str) -> None:
        self.returncode = int(status)
        self._conn.close()

    def _line(self, timeout: float | None) -> str | None:
        """The next line the handler sends; None if none came within `timeout`."""
        import select
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._replies:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([self._conn], [], [], remaining)
            if not readable:
                return None
            data = self._conn.recv(4096)
            if not data:
                raise OSError(f"the warm process's handler of {self.args[:2]} left")
            self._replies += data
        line, self._replies = self._replies.split(b"\n", 1)
        return line.decode()


def start_worker(
    worker_main: str, args: Sequence[str], env: Mapping[str, str], log: str
) -> RemoteProcess | None:
    """In a command the warm process forked: a local worker forked by it too, in a
    session of its own, its output appended to `log`; None if it cannot (the worker
    then starts as usual)."""
    if served_from is None:
        return None
    from fleet.broker import open_log

    fd = open_log(log)
    try:
        argv = [worker_main, *args]
        conn = request(served_from, "worker", argv, env, os.getcwd(), [0, fd, fd], key())
        return RemoteProcess(conn, argv)
    except OSError:
        return None
    finally:
        os.close(fd)
