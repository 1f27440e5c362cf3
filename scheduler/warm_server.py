"""The warm process (scheduler.warm says what it is for and what keeps it safe): it
imports what every command and local worker imports, then forks one process per
connection; the fork becomes the command or the worker.

    python -P -m scheduler.warm_server SOCKET < KEY     # as scheduler.warm.start runs it

Each connection is handled in a process of its own (a handler), which forks the
command, reports its pid, waits for it and reports its exit status, so that the
warm process itself only ever accepts, checks and forks: it holds no thread, no
connection and no state a fork would share.

What differs from an exec'd process: modules are imported already, so code that
runs at import sees the warm process's environment, not the command's (the CLI
and the worker read the environment when they use it; worker.app, which reads
the broker as it is imported, is left for the worker to import); and a
process's /proc/PID/environ shows the warm process's, which holds only its
key's variables.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import importlib
import io
import json
import os
import selectors
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from typing import Any

from core.timeline import mark
from scheduler import warm

# What the commands import as they run: scheduler.cli imports it inside each command,
# so that `--help` and the commands that only read stay light; imported once here.
RUNNING_COMMANDS = (
    "core.evidence.text", "core.matrix", "core.modelserver", "rich.markup",
    "fleet.broker", "fleet.sending", "scheduler.connection", "scheduler.deletion",
    "scheduler.embedded", "scheduler.experiments", "scheduler.fleet", "scheduler.plan",
    "scheduler.report.render", "scheduler.running", "scheduler.show", "scheduler.validation",
    "scheduler.versions", "worker.preflight",
)  # fmt: skip
# A modification time and size per file: what "changed" compares.
Signature = dict[str, tuple[int, int]]


def import_ours() -> None:
    """What every command and worker imports at its start, so none pays for it again.

    Not worker.app: it reads the broker from the environment as it is imported. The
    worker's modules by name, as the scheduler starts workers (`python -m worker`).
    The models pydantic would build at their first use are built too (core.models)."""
    from scheduler.cli import COMMANDS

    for command in COMMANDS.values():
        importlib.import_module(f"scheduler.cli.{command.target.split(':')[0]}")
    for module in RUNNING_COMMANDS:
        importlib.import_module(module)
    importlib.import_module("scheduler.console")
    importlib.import_module("scheduler.standby")
    importlib.import_module("worker.__main__").preimport()
    from core.models import complete

    complete()
    # What is imported stays: the collector need not walk it again in any fork (Celery's
    # pool collects before it forks each process: ~60 ms each over this heap).
    gc.freeze()


def signature() -> Signature:
    """Each imported module's file and each folder packages are installed in on sys.path
    (a package installed or removed changes it), with its modification time and size;
    a file gone is (0, -1). Not the other folders on sys.path: an editable install's
    project folder changes with every file a user writes there, and a module added
    there is found by the command's own import as it would be cold."""
    files = {m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
    installs = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    seen: Signature = {}
    for path in [*sorted(f for f in files if isinstance(f, str)), *installs]:
        try:
            info = os.stat(path)
            seen[path] = (info.st_mtime_ns, info.st_size)
        except OSError:
            seen[path] = (0, -1)
    return seen


# wide: the listener and what it checks each connection against, passed in by `serve`
def serve_on(
    listener: socket.socket,
    key: dict[str, Any] | None,
    idle_s: float | None,
    until: int | None = None,
    on_ready: Callable[[], object] = lambda: None,
    private: tuple[int, ...] = (),
    watch_code: bool = True,
) -> None:
    """Imports, then forks a handler for each connection until idle for `idle_s` (None:
    never), until the descriptor `until` ends (closes), or until its code changed.
    `private`: its descriptors no command may inherit (a lock held while it serves);
    `watch_code` False: the code is not compared (the test suite's, whose session
    writes in the project's folders)."""
    import_ours()
    started = signature() if watch_code else None
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers reaped by the kernel
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    if until is not None:
        selector.register(until, selectors.EVENT_READ)
    on_ready()
    while events := selector.select(idle_s):
        for selected, _ in events:
            if selected.fileobj is not listener:
                return
            conn, _ = listener.accept()
            if _peer_uid(conn) != os.getuid():
                conn.close()
                continue
            if started is not None and signature() != started:
                _refuse(conn, "stale")
                return
            if os.fork() == 0:
                # Nothing of a handler's may unwind into this loop or its callers (which
                # remove the socket as the warm process leaves).
                try:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    listener.close()
                    selector.close()
                    for fd in private:
                        os.close(fd)
                    _handle(conn, key)
                finally:
                    os._exit(0)
            conn.close()


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, warm.UCRED.size)
    return int(warm.UCRED.unpack(creds)[1])


def _refuse(conn: socket.socket, why: str) -> None:
    """`why` as the reply; the request is not read (the descriptors in it close with
    the connection)."""
    with contextlib.suppress(OSError):
        conn.sendall(f"{why}\n".encode())
    conn.close()


def receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, warm.STREAMS)
    header = warm.HEADER
    while len(data) < header.size or len(data) < header.size + header.unpack_from(data)[0]:
        more = conn.recv(1 << 16)
        if not more:
            raise EOFError("the client left mid-request")
        data += more
    return json.loads(data[header.size :]), fds


def _handle(conn: socket.socket, key: dict[str, Any] | None) -> None:
    """In a process of its own: forks the command, reports its pid and exit status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an exec would not reset an ignore
    try:
        request, fds = receive(conn)
    except (EOFError, OSError, ValueError):  # a probe (`scheduler warm`), or a client gone
        os._exit(0)
    if key is not None and request.get("key") != key:
        for fd in fds:
            os.close(fd)
        conn.sendall(b"other\n")
        os._exit(0)
    served_from = conn.getsockname()
    pid = os.fork()
    if pid == 0:
        conn.close()
        become(request, fds, served_from)
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):  # its client was killed: nobody to tell
        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    os._exit(0)


def become(request: dict[str, Any], fds: list[int], served_from: str | None) -> None:
    """The console script's or the worker's process from here: its streams, folder,
    umask, environment and argv. Never returns."""
    worker = request["kind"] == "worker"
    if worker:
        os.setsid()  # as local workers are started: a group of their own to stop
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    _reopen_streams()
    try:  # from here on, what goes wrong is the command's to say, on its own stderr
        os.chdir(request["cwd"])
        os.umask(request.get("umask", 0o022))
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = request["argv"]
        warm.served_from = served_from
        mark(f"{request['kind']}: forked by the warm process")
        # A console script's __main__ is the script, of no package: click names the
        # program after it (`scheduler`), not after `python -m` this module.
        main = sys.modules["__main__"]
        main.__package__, main.__spec__ = None, None
        if worker:
            importlib.import_module("worker.__main__").run(sys.argv[1:])
        else:
            importlib.import_module("scheduler.console").run()
    except BaseException:  # as the interpreter ends on an uncaught exception
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(1)  # both end the process themselves


def _reopen_streams() -> None:
    """sys.stdin, stdout and stderr anew over descriptors 0-2, buffered as Python buffers
    them at its start (stdout by lines on a terminal only): the warm process's were
    made for its own streams, none of them a terminal."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        old = getattr(sys, name)
        lines = fd == 2 or (fd == 1 and os.isatty(1))
        raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        buffered = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(
            buffered, encoding=old.encoding, errors=old.errors, line_buffering=lines
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def main(argv: list[str]) -> None:
    """`python -P -m scheduler.warm_server SOCKET`, its key as JSON on stdin
    (scheduler.warm.start)."""
    path, key = argv[0], json.loads(sys.stdin.read())
    sys.path[:] = key["path"]  # the console script's, as the key says
    lock = os.open(path + ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another is starting or serving on this socket
    # Who holds it, for `scheduler warm` to show and stop while it is still importing.
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())
    from core.settings import setting

    idle_s = setting(warm.ENV_IDLE)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def leave(*_: object) -> None:
        """TERM (`scheduler warm --stop`): the socket removed, at once; there is nothing
        else to end (the commands it forked are theirs)."""
        with contextlib.suppress(OSError):
            if listener.getsockname():
                os.unlink(path)
        os._exit(0)

    signal.signal(signal.SIGTERM, leave)
    # Bound and listened to only once the imports are done: a command that comes
    # meanwhile finds nothing there and runs cold.
    try:
        serve_on(listener, key, idle_s, on_ready=lambda: _listen(listener, path), private=(lock,))
    finally:
        leave()


def _listen(listener: socket.socket, path: str) -> None:
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)


if __name__ == "__main__":
    main(sys.argv[1:])
