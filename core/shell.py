"""Run one bash command in a folder, bounded in time and in captured output.

Agents, setup commands, gates and the built-in agent's bash tool all go through
here. The command gets its own process group so that at the timeout the whole
group dies, children that ignore SIGTERM included; output is read continuously
and only its head and tail are kept, so an agent that floods stdout costs
neither memory nor disk. An optional `watch` is asked every WATCH_INTERVAL_S
while the command runs; a reason from it stops the group (a workspace that
grows past its limit).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

DEFAULT_MAX_BYTES = 1_000_000
WATCH_INTERVAL_S = 0.5
_KILL_GRACE_S = 2.0

# Asked while the command runs: a reason to stop it, or None to let it go on.
Watch = Callable[[], str | None]


@dataclass(frozen=True)
class ShellResult:
    exit_code: int | None  # None when killed (timeout, watch) or not started
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    truncated: bool = False
    error: str | None = None  # the command could not be started
    stopped: str | None = None  # why `watch` had it killed

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class HeadTail:
    """Text bounded to about `limit` bytes: the first and last halves, with a cut marker."""

    def __init__(self, limit: int):
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode("utf-8")
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > self.half:
            cut = len(self.tail) - self.half
            self.dropped += cut
            del self.tail[:cut]

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes cut ...]\n{tail}"
        return head + tail


class _BoundedReader(threading.Thread):
    """Drains a pipe into a HeadTail, so the writer never blocks on a full pipe."""

    def __init__(self, pipe: IO[bytes], limit: int):
        super().__init__(daemon=True)
        self.pipe = pipe
        self.kept = HeadTail(limit)

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := self.pipe.read1(65536):  # type: ignore[attr-defined]
                self.kept.add(chunk)


def run_shell(
    command: str,
    cwd: Path,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    max_output_bytes: int = DEFAULT_MAX_BYTES,
    argv_prefix: Sequence[str] = (),
    watch: Watch | None = None,
) -> ShellResult:
    """Run `command` with bash in `cwd`; never raises for the command's own failures.

    `argv_prefix` goes before `bash -c COMMAND` (a sandbox such as bwrap).
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [*argv_prefix, "bash", "-c", command],
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return ShellResult(None, "", "", False, time.monotonic() - start, error=str(exc))
    readers = [_BoundedReader(p, max_output_bytes) for p in (proc.stdout, proc.stderr) if p]
    for reader in readers:
        reader.start()
    timed_out, stopped = False, None
    try:
        timed_out, stopped = _wait(proc, timeout_s, watch)
    finally:
        # Kill the group whether or not the leader exited (and on a Celery soft
        # time limit raised mid-wait): a background child left behind would
        # keep the pipes open and outlive the run.
        kill_group(proc.pid)
        proc.wait()
    for reader in readers:
        reader.join(timeout=_KILL_GRACE_S)
    out, err = readers[0].kept, readers[1].kept
    return ShellResult(
        exit_code=None if timed_out or stopped else proc.returncode,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
        truncated=out.truncated or err.truncated,
        stopped=stopped,
    )


def _wait(
    proc: subprocess.Popen[bytes], timeout_s: float, watch: Watch | None
) -> tuple[bool, str | None]:
    """Until the command exits: (timed out, why `watch` stopped it)."""
    deadline = time.monotonic() + timeout_s
    with _exit_waiter(proc) as exited:
        while (left := deadline - time.monotonic()) > 0:
            if exited(left if watch is None else min(left, WATCH_INTERVAL_S)):
                return False, None
            if watch is not None and (reason := watch()):
                return False, reason
    return True, None


@contextlib.contextmanager
def _exit_waiter(proc: subprocess.Popen[bytes]) -> Iterator[Callable[[float], bool]]:
    """A wait(timeout) -> exited? that the kernel wakes at the exit.

    Popen.wait(timeout) polls with sleeps of up to 50 ms, which a run pays on
    every command; a pidfd becomes readable the moment the process exits.
    """
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: fall back to polling

        def polled(timeout: float) -> bool:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True

        yield polled
        return

    def woken(timeout: float) -> bool:
        if not select.select([pidfd], [], [], timeout)[0]:
            return False
        proc.wait()
        return True

    try:
        yield woken
    finally:
        os.close(pidfd)


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group; quietly done if it is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
