"""The `scheduler` console script: an embedded submit's worker process starts first
(scheduler/standby.py), then the CLI (scheduler/cli.py) is imported and run."""

from __future__ import annotations

import sys
from typing import NoReturn

from scheduler import standby


def run() -> NoReturn:
    standby.prestart(sys.argv[1:])
    from scheduler.cli import run as cli_run

    cli_run()
