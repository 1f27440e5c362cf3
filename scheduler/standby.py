"""The local worker's process, started before the CLI has imported its own code.

A cold embedded `scheduler submit` (or `resume`) waited twice on imports: the
CLI's (click, pydantic's models, redis, rich: ~0.45 s) before it could read
the matrix, start Redis and spawn the worker, then the worker's (Celery,
kombu, the same models again: ~0.6 s) before it could take a run. The
`scheduler` console script (scheduler.console) now spawns the worker's
process first, as `python -m worker --standby`: it imports the worker's code
beside the CLI's and waits on its stdin. LocalWorkers.start hands it what it
would have been started with (its arguments, environment and log file), once
the matrix is known to be good and Redis answers; from there it is the worker
every mode starts (worker.__main__).

Standard library only: this module runs before anything else is imported.
A CLI that ends without using its standby (bad input, --help) kills it
(`discard`, called by the console script as it ends); one that dies leaves it
reading the end of its stdin, on which it exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

from core.timeline import mark
from scheduler import warm
from scheduler.interrupt import deferred

# core.broker_url.ENV_BROKER, named here so as not to import redis first.
_ENV_BROKER = "EVALFLEET_BROKER_URL"
_COMMANDS = {"submit", "resume"}  # those that start local workers (Fleet.start_workers)

# How every local worker is started (scheduler.embedded.worker_command). Not the
# current folder first on sys.path (-P: this interpreter's only, the agents keep the
# default): a user's project with a `core/` or `worker/` package of its own would
# stand in for evalfleet's.
WORKER_MODULE = [sys.executable, "-P", "-m", "worker"]

_standby: subprocess.Popen[bytes] | None = None


def prestart(args: Sequence[str]) -> None:
    """Start the standby when `args` (the CLI's, without the program name) look like an
    embedded submit or resume; a wrong guess costs only an unused process."""
    global _standby
    if not args or args[0] not in _COMMANDS or os.environ.get(_ENV_BROKER):
        return
    if warm.served_from is not None:  # the warm process forks the worker (hand_over)
        return
    if any(a.startswith("--broker") or a in ("-h", "--help") for a in args):
        return
    # A Ctrl-C between the fork and the assignment would leave a standby that `discard`
    # does not know of, alive until its imports end and it reads its closed stdin.
    with deferred(signal.SIGINT):
        _standby = subprocess.Popen(
            [*WORKER_MODULE, "--standby"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # as LocalWorkers: Ctrl-C reaches the CLI only
        )
    mark("cli: standby worker spawned")


def hand_over(
    argv: Sequence[str], env: Mapping[str, str], log: str
) -> subprocess.Popen[bytes] | warm.RemoteProcess | None:
    """The standby, now running the worker `argv` describes, or in a command the warm
    process runs, a worker it forked; None if there is none (or it died), and the
    caller starts the worker as usual."""
    global _standby
    if (forked := warm.start_worker("worker", argv, env, log)) is not None:
        return forked
    proc, _standby = _standby, None
    if proc is None or proc.stdin is None:
        return None
    order = json.dumps({"argv": list(argv), "env": dict(env), "log": log})
    try:
        proc.stdin.write(order.encode() + b"\n")
        proc.stdin.close()
    except OSError:  # it died importing: the usual start shows why in the log
        _kill(proc)
        return None
    return proc


def discard() -> None:
    """Stop the standby if no worker was handed to it."""
    global _standby
    if _standby is not None:
        _kill(_standby)
        _standby = None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
