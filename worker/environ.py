"""Keep the broker URL, password included, from the agents a worker runs.

Agents get an environment without EVALFLEET_* (worker.run.agent_env), but
an unsandboxed agent can still read its parent's /proc/PID/environ: the
environment the worker process was started with, which taking the variable
out of os.environ does not change (the kernel shows the original block of
memory). So once the worker has read the URL, `forget` also overwrites the
value in that block; the pool processes forked afterwards inherit the blank.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def forget(name: str) -> None:
    """Take `name` out of os.environ and blank its value in /proc/self/environ."""
    if os.environ.pop(name, None) is None:
        return
    try:
        _blank_in_initial_environment(name.encode())
    except (OSError, ValueError) as exc:  # no /proc (not Linux), or a kernel that refuses
        log.warning("%s is still readable in /proc/%d/environ: %s", name, os.getpid(), exc)


def _blank_in_initial_environment(name: bytes) -> None:
    with open("/proc/self/stat", "rb") as stat:
        # Fields after the command name, which may hold spaces and brackets:
        # env_start and env_end are fields 50 and 51 of proc(5), 47 and 48 here.
        fields = stat.read().rsplit(b")", 1)[1].split()
    start, end = int(fields[47]), int(fields[48])
    with open("/proc/self/mem", "r+b", buffering=0) as memory:
        memory.seek(start)
        block = memory.read(end - start)
        offset = 0
        for entry in block.split(b"\0"):
            if entry.startswith(name + b"="):
                value_at = start + offset + len(name) + 1
                memory.seek(value_at)
                memory.write(b"\0" * (len(entry) - len(name) - 1))
            offset += len(entry) + 1
