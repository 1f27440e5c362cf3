"""A leaving pool process exits once it has said so, not a second later.

billiard's pool process, when its loop ends, sends its parent a DEATH message
and then sleeps a second for the parent to answer with SIGTERM. While the
worker shuts down, the parent no longer reads those messages, so every
shutdown (the embedded mode's after each experiment, a CI job's at its end)
waited that second in full, behind a run count of zero. Here the process exits
by itself shortly after the message is out, as the parent's answer would have
made it: the message is a short pipe write, done long before the timer fires;
had it not been read, the parent counts the process as exited all the same.
"""

from __future__ import annotations

import os
import threading

from celery import signals

# Far longer than the pipe write it waits for, far shorter than billiard's second.
_EXIT_AFTER_S = 0.2


def register() -> None:
    signals.worker_process_shutdown.connect(_exit_soon, weak=False, dispatch_uid=__name__)


def _exit_soon(exitcode: int | None = None, **_: object) -> None:
    """Called in the pool process by billiard's exit path, right before the DEATH message."""
    timer = threading.Timer(_EXIT_AFTER_S, os._exit, (exitcode or 0,))
    timer.daemon = True
    timer.start()
