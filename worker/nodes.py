"""One start, several Celery nodes of one pool process each (`python -m worker --split`,
the embedded mode's local workers).

A prefork node's main process hands its pool every run: it takes the result of
the last one, acknowledges it, fetches the next message and records it as
unacknowledged, three round trips to Redis while the pool process that asked
waits, and a node with two pool processes does this for both in turn. Two nodes
of one process each, on 2 CPUs, hand over at the same time: 1,000 quick runs took
about 6-9 % less time (docs/BENCHMARKS.md). Each node still holds one message at a
time (prefetch 1), acknowledges it after its run and has a pool process to kill
at a hard time limit: the guarantees are a node's, as before.

The nodes are forked after the imports, so they share those pages. This process
stays as their parent: it passes on the signals a worker obeys (TERM, INT, QUIT),
and it ends with the first failing node's exit code once every node has ended. A
node whose parent dies is sent TERM (Linux), so no node outlives the start it
came from.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from dataclasses import dataclass, field

from fleet.nodes import node_name

# What `celery worker` does on each: TERM a warm shutdown, INT the same (a second a
# cold one), QUIT a cold shutdown.
_PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
_PR_SET_PDEATHSIG = 1


@dataclass
class Children:
    """The forked nodes, as their parent sees them."""

    pids: list[int] = field(default_factory=list)

    def wait(self) -> int:
        """Once every node has ended: 0, or the first failing one's exit code (128 + N
        for a node killed by signal N)."""
        codes = []
        for pid in self.pids:
            _, status = os.waitpid(pid, 0)  # a signal passed on meanwhile: waited again
            code = os.waitstatus_to_exitcode(status)
            codes.append(128 - code if code < 0 else code)
        return next((code for code in codes if code), 0)

    def pass_on(self, signum: int, _frame: object = None) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):  # that one has ended already
                os.kill(pid, signum)


def fork(hostname: str, count: int) -> str | Children:
    """`count` nodes forked from this process: in each, its node name; here, the
    children (their signals passed on from now)."""
    parent = os.getpid()
    # A signal between two forks is passed on to the nodes forked so far; a node has
    # the default action until Celery sets its own.
    children = Children()
    for signum in _PASSED_ON:
        signal.signal(signum, children.pass_on)
    for index in range(1, count + 1):
        sys.stdout.flush()
        sys.stderr.flush()
        # Held over the fork: the child's handlers are the parent's until it resets them.
        signal.pthread_sigmask(signal.SIG_BLOCK, _PASSED_ON)
        pid = os.fork()
        if pid == 0:
            for signum in _PASSED_ON:
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _PASSED_ON)
            _end_with(parent)
            return node_name(hostname, index)
        children.pids.append(pid)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _PASSED_ON)
    return children


def _end_with(parent: int) -> None:
    """TERM to this process when its parent dies (Linux's PR_SET_PDEATHSIG)."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # it died before the call
        os.kill(os.getpid(), signal.SIGTERM)
