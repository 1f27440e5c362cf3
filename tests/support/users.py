"""The processes of a run's user, as /proc shows them to root."""

from __future__ import annotations

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
