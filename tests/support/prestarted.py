"""The `scheduler` console script and the worker as the tests start them hundreds of
times: forked from a process that imported them once, the product's warm process
(scheduler.warm_server) started for the test session on a socket of its own.

A cold command spends about half a second of CPU importing click, rich, redis-py,
pydantic, Celery and the models before it begins, a worker about as much; over the
suite's ~550 commands and ~100 workers of its own that was over half of all the CPU
the suite used on a 2-core machine. The server here imports both once. For each
command or worker it forks a process that takes the test's argument list,
environment, working folder and standard streams (passed over a Unix socket) and
runs what the console script runs (scheduler.console.run) or what `python -m worker`
runs (worker.__main__.run); both end the process with os._exit. Exit status,
output and the processes a command starts (embedded Redis, workers) are theirs.

What differs from an exec'd process: the modules are imported already, so what runs
at import sees the server's environment, not the command's (the CLI and the worker
read the environment when they use it; the worker's standby relies on that too);
and /proc/PID/environ shows what the server was started with. So a test that reads
a worker's /proc environ (what an agent hunting for the broker's password finds)
starts that worker exec'd (`Worker(..., anew=True)`); what a command imports and how
it takes Ctrl-C during its imports are tested on the real console script
(`start_cli`). EVALFLEET_TEST_EXEC=1 starts every one anew instead.

Scripts that call `scheduler` by name (a CI pipeline's steps) find a shim on their
PATH (Prestarted.shim) that hands the server its own streams and passes on its signals.

Run as `python -m tests.support.prestarted SOCKET`; it serves until its standard
input closes (the test process ended).
"""

from __future__ import annotations

import locale
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

import worker
from scheduler import warm, warm_server
from scheduler.warm import RemoteProcess


class Prestarted:
    """The client side, with a server started on first use: `run_cli` is
    subprocess.run(text=True, capture_output=True) of the console script at `script`,
    `start_worker` a Popen of `python -m worker` in a session of its own."""

    def __init__(self, script: str, socket_path: Path, cwd: Path) -> None:
        self.script = script
        self.socket_path = socket_path
        self.cwd = cwd
        self._server: subprocess.Popen[bytes] | None = None

    def run_cli(
        self, args: list[str], *, env: dict[str, str] | None, cwd: Path, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        argv = [self.script, *args]
        env = dict(os.environ) if env is None else env  # None: ours, as subprocess.run
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        # Our own stdin, as subprocess.run without `input` passes it on.
        with warm.request(
            str(self._started()), "cli", argv, env, str(cwd), [0, out_w, err_w]
        ) as conn:
            os.close(out_w)
            os.close(err_w)
            try:
                output, status = _collect(conn, out_r, err_r, time.monotonic() + timeout)
            except subprocess.TimeoutExpired as expired:
                expired.cmd = argv
                raise
        stdout, stderr = (_as_text(output[fd]) for fd in (out_r, err_r))
        return subprocess.CompletedProcess(argv, status, stdout, stderr)

    def start_worker(
        self, args: list[str], *, env: dict[str, str], cwd: Path, log: int
    ) -> RemoteProcess:
        """`python -m worker ARGS` in a session of its own, its output to `log`."""
        argv = [str(Path(worker.__file__).parent / "__main__.py"), *args]
        conn = warm.request(str(self._started()), "worker", argv, env, str(cwd), [0, log, log])
        return RemoteProcess(conn, argv)

    def shim(self, folder: Path) -> Path:
        """`folder`, holding a `scheduler` that runs here what it is given: for scripts
        that find the console script on PATH (a CI pipeline's steps). Its streams,
        environment, folder and arguments are its own; its exit status is the
        command's, and signals sent to it reach the command."""
        folder.mkdir(parents=True, exist_ok=True)
        shim = folder / Path(self.script).name
        shim.write_text(
            f"#!{sys.executable} -P\n"
            "import sys\n"
            f"sys.path.insert(0, {str(self.cwd)!r})\n"
            "from tests.support.prestarted import relay\n"
            f"relay({str(self._started())!r}, [{self.script!r}, *sys.argv[1:]])\n"
        )
        shim.chmod(0o755)
        return folder

    def close(self) -> None:
        if self._server is not None:
            assert self._server.stdin is not None
            self._server.stdin.close()  # the server's signal to leave
            self._server.wait(timeout=30)
            self._server = None
            self.socket_path.with_suffix(".log").unlink(missing_ok=True)

    def _started(self) -> Path:
        if self._server is None:
            self.socket_path.unlink(missing_ok=True)
            log = self.socket_path.with_suffix(".log")
            # Its stderr a file, as the commands' are pipes: the stderr console the CLI
            # builds at import then sees no terminal, as theirs would not.
            with log.open("wb") as stderr:
                server = subprocess.Popen(
                    [sys.executable, "-m", "tests.support.prestarted", str(self.socket_path)],
                    cwd=self.cwd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                )
            assert server.stdout is not None
            if server.stdout.readline() != b"ready\n":
                raise RuntimeError(
                    f"the prestarted server did not start (exit {server.wait()}): {log.read_text()}"
                )
            self._server = server
        return self.socket_path


def _collect(
    conn: socket.socket, out_r: int, err_r: int, deadline: float
) -> tuple[dict[int, bytes], int]:
    """Both streams to their end and the exit status; the command killed at `deadline`."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    replies = b""
    selector = selectors.DefaultSelector()
    for fd in (out_r, err_r):
        selector.register(fd, selectors.EVENT_READ)
    selector.register(conn, selectors.EVENT_READ)
    try:
        while selector.get_map():
            remaining = deadline - time.monotonic()
            events = selector.select(max(remaining, 0)) if remaining > 0 else []
            if not events:
                pid = int(replies.split(b"\n")[0]) if b"\n" in replies else None
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                output = {fd: b"".join(parts) for fd, parts in chunks.items()}
                raise subprocess.TimeoutExpired([], 0, output[out_r], output[err_r])
            for key, _ in events:
                if key.fileobj is conn:
                    data = conn.recv(4096)
                    replies += data
                else:
                    data = os.read(key.fd, 65536)
                    chunks[key.fd].append(data)
                if not data:
                    selector.unregister(key.fileobj)
    finally:
        selector.close()
        os.close(out_r)
        os.close(err_r)
    _, status_line, _ = replies.split(b"\n")
    return {fd: b"".join(parts) for fd, parts in chunks.items()}, int(status_line)


def _as_text(data: bytes) -> str:
    # As subprocess.run(text=True) decodes: the locale's encoding, universal newlines.
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def relay(socket_path: str, argv: list[str]) -> NoReturn:
    """The shim's process (Prestarted.shim): hands its own streams to the server, passes
    on the signals it gets, and ends as the command ended (scheduler.warm.relay_to)."""
    warm.relay_to(socket_path, argv)
    sys.exit(f"scheduler (prestarted): the server at {socket_path} did not take {argv[1:]}")


def serve(socket_path: str) -> None:
    """Imports the CLI, then forks a handler for each connection until stdin closes."""
    # The console script's own folder leads sys.path, not the one this ran from.
    sys.path[0] = str(Path(sys.executable).parent)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)

    def ready() -> None:
        sys.stdout.write("ready\n")
        sys.stdout.flush()

    try:
        warm_server.serve_on(
            listener, None, None, until=sys.stdin.fileno(), on_ready=ready, watch_code=False
        )
    finally:
        os.unlink(socket_path)


if __name__ == "__main__":
    serve(sys.argv[1])
