"""Which broker an evalfleet process uses, and its password kept out of every evalfleet
process's arguments and environment.

The broker is the configured URL (core.broker_url: --broker, EVALFLEET_BROKER_URL
and its password), else the embedded Redis that `scheduler` started under
./.evalfleet (while it runs). The embedded Redis leaves its socket's path in
./.evalfleet/redis.json and its password in a file only its owner can read
(scheduler.embedded writes both) so that a worker or Flower started by hand in the
same folder finds it (worker.broker). Nothing else: a process that would guess
(Redis on this machine's default port) could join, and show or send runs to, a
broker nobody chose.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from core.broker_url import (
    ENV_BROKER,
    ENV_PASSWORD,
    ENV_PASSWORD_FILE,
    SOCKET,
    configured_broker,
    configured_password,
    with_password,
)
from fleet import procfs

STATE_DIR = Path(".evalfleet")
EMBEDDED_STATE = "redis.json"
# The embedded Redis's socket and password: a folder only its owner may open.
PRIVATE_DIR = "private"
PASSWORD_FILE = "password"
CELERY_BROKER = "CELERY_BROKER_URL"


def embedded_url(socket: str | Path, password: str) -> str:
    return with_password(f"{SOCKET}://{socket}?virtual_host=0", password)


def running_embedded_broker(state_dir: Path = STATE_DIR) -> str | None:
    """The URL of an embedded Redis started from this folder, if it is still alive."""
    try:
        state = json.loads((state_dir / EMBEDDED_STATE).read_text())
        os.kill(int(state["pid"]), 0)
        password = configured_password(str(state_dir / PRIVATE_DIR / PASSWORD_FILE))
    except (OSError, ValueError, KeyError, TypeError):  # BrokerURLError is a ValueError
        return None
    return embedded_url(state["socket"], password or "")


def open_log(path: str | Path) -> int:
    """A descriptor appending to the log file `path`, which only its owner may read: a
    worker's log quotes each run's id and whether it passed (Celery's line for each
    finished task), which an agent of a later run would read to copy the passing runs'
    answers. One made readable to all before (an older version) is made private too."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with contextlib.suppress(OSError):  # not ours (another user's file): as it is
        os.fchmod(fd, 0o600)
    return fd


def take_broker(explicit: str | None = None, password_file: str | None = None) -> str | None:
    """configured_broker, then the URL and password blanked wherever this process shows
    them: its environment's variables (and those of the processes it starts) and any
    argument that held the password (`--broker redis://:PW@host`)."""
    url = configured_broker(explicit, password_file)
    hide_broker(url)
    return url


def hide_broker(url: str | None) -> None:
    for name in (ENV_BROKER, ENV_PASSWORD, ENV_PASSWORD_FILE, CELERY_BROKER):
        procfs.forget(name)
    written = urlsplit(url).password if url else None
    if written:
        with contextlib.suppress(OSError, ValueError):  # no /proc (not Linux): nor is it shown
            for form in {written, unquote(written)}:
                procfs.mask_in_arguments(form)
