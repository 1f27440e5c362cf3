"""The `scheduler` console script: an embedded submit's worker process starts first
(scheduler.standby), then the CLI (scheduler.cli) is imported and run.

It ends with os._exit, without the interpreter's teardown of Celery's, pydantic's
and rich's objects (0.1-0.3 s of CPU after every command had finished). What that
would have done and still matters is done here: the unused standby stopped,
logging's handlers flushed, the output streams flushed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

from scheduler import standby


def run() -> NoReturn:
    try:
        standby.prestart(sys.argv[1:])
        from scheduler.cli import run as cli_run

        status = cli_run()
    except KeyboardInterrupt:  # while importing: one line, not a traceback (a standby
        print("\ninterrupted", file=sys.stderr)  # worker leaves when its stdin closes)
        status = 130
    finally:
        standby.discard()  # one the CLI did not hand its work to
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing left to say
            stream.flush()
    os._exit(status)
