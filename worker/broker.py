"""Which broker a worker started without one joins: `celery -A worker.app` and Flower.

Order: the configured URL (core.settings), then the embedded Redis that
`scheduler` started under ./.evalfleet (while it runs), else Redis on this
machine's default port. The embedded Redis leaves its URL in
./.evalfleet/redis.json (scheduler.embedded writes it) so that a worker or
Flower started by hand in the same folder finds it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from core.broker_url import configured_broker

STATE_DIR = Path(".evalfleet")
EMBEDDED_STATE = "redis.json"
LOCAL_DEFAULT = "redis://127.0.0.1:6379/0"


def running_embedded_broker(state_dir: Path = STATE_DIR) -> str | None:
    """The URL of an embedded Redis started from this folder, if it is still alive."""
    try:
        state = json.loads((state_dir / EMBEDDED_STATE).read_text())
        os.kill(int(state["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(state["url"])


def worker_broker() -> str:
    return configured_broker() or running_embedded_broker() or LOCAL_DEFAULT
