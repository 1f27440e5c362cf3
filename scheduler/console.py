"""The `scheduler` console script: the command is offered to this user's warm process
first (scheduler.warm), which runs it in a fork of its own, already imported; else
an embedded submit's worker process starts first (scheduler.standby), then the CLI
(scheduler.cli) is imported and run, and a warm process is started for the next
command.

It ends with os._exit, without the interpreter's teardown of Celery's, pydantic's
and rich's objects (0.1-0.3 s of CPU after every command had finished). What that
would have done and still matters is done here: the unused standby stopped,
logging's handlers flushed, the output streams flushed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from core.timeline import mark
from scheduler.interrupt import catch, interrupted


def run() -> None:
    """Never returns: the process ends with os._exit."""
    mark("cli: interpreter started")
    catch(signal.SIGINT)
    imported = False
    try:
        # Imported here, not at the top: Ctrl-C in the first moments of a command then
        # ends it with one line too, not a traceback out of an import.
        from scheduler import standby, warm

        imported = True
        warm.relay(sys.argv)  # returns only if no warm process ran it
        standby.prestart(sys.argv[1:])
        from scheduler.cli import run as cli_run

        mark("cli: CLI imported")
        status = cli_run()
        mark("cli: command ended, what it started stopped")
    except BaseException as exc:  # while importing: one line, not a traceback (a standby
        if not interrupted(exc):  # worker leaves when its stdin closes)
            raise
        print("\ninterrupted", file=sys.stderr)
        status = 130
    finally:
        if imported:
            standby.discard()  # one the CLI did not hand its work to
    if "logging" in sys.modules:  # never imported: nothing to flush
        sys.modules["logging"].shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing left to say
            stream.flush()
    if imported:  # once its output is out: the next command's, not this one's
        warm.start(sys.argv[1:])
    mark("cli: exit")
    os._exit(status)
