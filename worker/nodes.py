"""One start, several Celery nodes of one pool process each (`python -m worker --split`,
the embedded mode's local workers).

A prefork node's main process hands its pool every run: it takes the result of
the last one, acknowledges it, fetches the next message and records it as
unacknowledged, three round trips to Redis while the pool process that asked
waits, and a node with two pool processes does this for both in turn. Two nodes
of one process each, on 2 CPUs, hand over at the same time: 1,000 quick runs took
about a tenth less time (docs/BENCHMARKS.md). Each node still holds one message at
a time (prefetch 1), acknowledges it after its run and has a pool process to kill
at a hard time limit: the guarantees are a node's, as before.

The nodes are forked after the imports, so they share those pages. This process
stays as their parent, waiting on signals alone (sigtimedwait): it passes on each
signal a worker obeys that a process sent it, but not one the kernel sent its whole
process group (a terminal's Ctrl-C), which every node has had already: Celery takes
a second SIGINT for a cold shutdown. It says which node ended, and how, and ends
with the first failing node's exit code once every node has ended. A node whose
parent dies is sent TERM, and stops as on any TERM: its run under way has its
grace (`--grace`), then is handed back. Linux only (fleet.nodes.SPLITS): elsewhere
the worker is one node.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
from typing import Any

from fleet.nodes import node_name

# Those `celery worker` acts on: TERM and INT a warm shutdown, QUIT a cold one, USR1 a
# dump of its threads' stacks, HUP and USR2 what Celery makes of them.
_PASSED_ON = frozenset(
    {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2}
)
_WAITED = _PASSED_ON | {signal.SIGCHLD}
_STOPS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGQUIT})
_SI_KERNEL = 0x80  # siginfo's si_code of a signal the kernel sent (a terminal's)
_PR_SET_PDEATHSIG = 1
_REAP_EVERY_S = 1.0


class Children:
    """The forked nodes, as their parent sees them: pid by node name."""

    def __init__(self) -> None:
        self.live: dict[int, str] = {}
        self.codes: list[int] = []  # of the nodes ended so far, in that order
        self.stopping = False  # told to stop: the nodes' ends are no news

    def wait(self) -> int:
        """Until every node has ended, passing signals on: 0, or the first failing
        node's exit code (128 + N for one killed by signal N)."""
        try:
            while self.live:
                # Now and then without a SIGCHLD too: one taken by a thread that does
                # not hold it (none here, but a library may start one) is never waited.
                info = signal.sigtimedwait(_WAITED, _REAP_EVERY_S)
                if info is None or info.si_signo == signal.SIGCHLD:
                    self._reap()
                else:
                    self.stopping |= info.si_signo in _STOPS
                    if info.si_code != _SI_KERNEL:
                        self.pass_on(info.si_signo)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _WAITED)
        return next((code for code in self.codes if code), 0)

    def pass_on(self, signum: int) -> None:
        for pid in self.live:
            with contextlib.suppress(ProcessLookupError):  # ended, not yet reaped
                os.kill(pid, signum)

    def _reap(self) -> None:
        """Every node that has ended (one SIGCHLD may stand for several)."""
        while self.live:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            name = self.live.pop(pid, None)
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
            self.codes.append(code)
            if code and name is not None and not self.stopping:
                left = f"; {len(self.live)} go on" if self.live else ""
                print(f"worker node {name} ended with exit code {code}{left}", file=sys.stderr)


def fork(hostname: str, count: int) -> str | Children:
    """`count` nodes forked from this process: in each, its node name; here, the
    children, to `wait` for."""
    parent = os.getpid()
    # Held from before the first fork: a signal between two forks waits for `wait`,
    # which passes it on to every node. Each node lets them through once it is forked.
    signal.pthread_sigmask(signal.SIG_BLOCK, _WAITED)
    children = Children()
    try:
        for index in range(1, count + 1):
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _WAITED)
                _end_with(parent)
                return node_name(hostname, index)
            children.live[pid] = node_name(hostname, index)
    except OSError:  # no more processes: the nodes forked so far stop with this one
        children.pass_on(signal.SIGTERM)
        for pid in children.live:
            os.waitpid(pid, 0)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _WAITED)
        raise
    return children


def _end_with(parent: int) -> None:
    """TERM to this process when its parent dies (Linux's PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # it died before the call
        os.kill(os.getpid(), signal.SIGTERM)


def label_logs(node: str) -> None:
    """Each line this node logs names it after its process (`ForkPoolWorker-1
    embedded-8.2@host`): the nodes of one worker share its log, and each has a
    MainProcess and a ForkPoolWorker-1 of its own. The process's own name stays:
    Celery's signal handlers go by it."""
    from celery import signals

    def labelled(logger: logging.Logger, **_: Any) -> None:
        for handler in logger.handlers:
            handler.addFilter(_Label(node))

    signals.after_setup_logger.connect(labelled, weak=False)
    signals.after_setup_task_logger.connect(labelled, weak=False)


class _Label(logging.Filter):
    def __init__(self, node: str):
        super().__init__()
        self.node = node

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "node", None) is None:  # once, whichever handler comes first
            record.node = self.node
            record.processName = f"{record.processName} {self.node}"
        return True
