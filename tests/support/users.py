"""The processes of a run's user, as /proc shows them to root."""

from __future__ import annotations

import time
from pathlib import Path


def pids_of(uid: int) -> list[int]:
    """Every live process (zombies aside) whose uids include `uid`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        if f"\t{uid}\t" in status and "State:\tZ" not in status:
            found.append(int(entry.name))
    return found


def gone(uid: int, timeout: float) -> bool:
    """Whether every process of `uid` is gone within `timeout` seconds (SIGKILL is sent
    at once; a process takes a moment to die)."""
    deadline = time.monotonic() + timeout
    while pids_of(uid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return pids_of(uid) == []
