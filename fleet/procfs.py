"""This process's arguments and environment as /proc shows them to every process that
may read them (/proc/PID/cmdline, /proc/PID/environ), and a secret overwritten there.

The kernel shows the blocks of memory the process was started with, whatever
Python does with sys.argv or os.environ afterwards; a password passed as an
argument (`--broker redis://:PW@host`) or a variable stays readable there for the
process's life unless those bytes themselves are overwritten, through
/proc/self/mem. The blocks keep their length: what is overwritten reads as NULs
(a variable's value) or asterisks (a password inside an argument, so the rest of
the argument still reads as it did).
"""

from __future__ import annotations

import logging
import os
from urllib.parse import quote

log = logging.getLogger(__name__)

# Fields of /proc/self/stat after the command name, which may hold spaces and brackets:
# proc(5) numbers them from 1 with the pid and the name first, so its field N is N - 3.
_ARG_START, _ARG_END = 48 - 3, 49 - 3
_ENV_START, _ENV_END = 50 - 3, 51 - 3


def forget(name: str) -> None:
    """Take `name` out of os.environ and blank its value in /proc/self/environ."""
    if os.environ.pop(name, None) is None:
        return
    try:
        blank_variable(name)
    except (OSError, ValueError) as exc:  # no /proc (not Linux), or a kernel that refuses
        log.warning("%s is still readable in /proc/%d/environ: %s", name, os.getpid(), exc)


def blank_variable(name: str) -> None:
    """Overwrite the value of `name` in this process's initial environment with NULs."""
    prefix = name.encode() + b"="
    start, end = _span(_ENV_START, _ENV_END)
    with open("/proc/self/mem", "r+b", buffering=0) as memory:
        memory.seek(start)
        offset = 0
        for entry in memory.read(end - start).split(b"\0"):
            if entry.startswith(prefix):
                memory.seek(start + offset + len(prefix))
                memory.write(b"\0" * (len(entry) - len(prefix)))
            offset += len(entry) + 1


def mask_in_arguments(secret: str) -> None:
    """Overwrite every occurrence of `secret` in this process's arguments, as written
    and as a URL quotes it, with asterisks."""
    start, end = _span(_ARG_START, _ARG_END)
    forms = sorted({f.encode() for f in (secret, quote(secret, safe="")) if f}, key=len)
    with open("/proc/self/mem", "r+b", buffering=0) as memory:
        memory.seek(start)
        block = memory.read(end - start)
        for form in reversed(forms):  # the longest first: a form holding another whole
            at = block.find(form)
            while at >= 0:
                memory.seek(start + at)
                memory.write(b"*" * len(form))
                block = block[:at] + b"*" * len(form) + block[at + len(form) :]
                at = block.find(form, at + len(form))


def _span(first: int, last: int) -> tuple[int, int]:
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return int(fields[first]), int(fields[last])
