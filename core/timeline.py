"""Where a command's time goes, as marks on one clock: with EVALFLEET_TIMELINE=FILE
set, each `mark` appends a line "<time.time()> <who>: <what>" to FILE, from the
CLI, the worker and its pool processes alike (appends of a line are atomic).
bench/timeline.py reads them back as a cold submit's timeline. Unset (always,
but for that benchmark), a mark costs one dictionary lookup.
"""

from __future__ import annotations

import os
import time

ENV_TIMELINE = "EVALFLEET_TIMELINE"


def mark(what: str) -> None:
    path = os.environ.get(ENV_TIMELINE)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{time.time():.6f} {what}\n")
