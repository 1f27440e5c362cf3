"""The `scheduler` console script: an embedded submit's worker process starts first
(scheduler/standby.py), then the CLI (scheduler/cli.py) is imported and run."""

from __future__ import annotations

import sys
from typing import NoReturn

from scheduler import standby


def run() -> NoReturn:
    try:
        standby.prestart(sys.argv[1:])
        from scheduler.cli import run as cli_run
    except KeyboardInterrupt:  # while importing: one line, not a traceback (a standby
        print("\ninterrupted", file=sys.stderr)  # worker leaves when its stdin closes)
        sys.exit(130)
    cli_run()
