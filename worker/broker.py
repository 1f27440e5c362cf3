"""Which broker `celery -A worker.app worker|flower` and `python -m worker` join.

Order: Celery's `--broker` (which Celery's command line passes on as
CELERY_BROKER_URL), then the configured URL (core.broker_url: EVALFLEET_BROKER_URL), then the
embedded Redis that `scheduler` started under ./.evalfleet (while it runs). The
embedded Redis leaves its URL in ./.evalfleet/redis.json (scheduler.embedded
writes it) so that a worker or Flower started by hand in the same folder finds
it. Nothing else: a process that would guess (Redis on this machine's default
port) could join, and show or send runs to, a broker nobody chose.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from core.broker_url import ENV_BROKER, configured_broker

STATE_DIR = Path(".evalfleet")
EMBEDDED_STATE = "redis.json"
CELERY_BROKER = "CELERY_BROKER_URL"
NO_BROKER = (
    f"error: no broker: set {ENV_BROKER} (e.g. redis://:PASSWORD@host:6379/0), "
    "or start `scheduler` in this folder for its embedded one"
)


def running_embedded_broker(state_dir: Path = STATE_DIR) -> str | None:
    """The URL of an embedded Redis started from this folder, if it is still alive."""
    try:
        state = json.loads((state_dir / EMBEDDED_STATE).read_text())
        os.kill(int(state["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(state["url"])


def worker_broker() -> str | None:
    """The broker found, or None: the caller refuses to start (NO_BROKER)."""
    # Celery's settings prefer CELERY_BROKER_URL to the app's broker: so does this.
    return configured_broker(os.environ.get(CELERY_BROKER)) or running_embedded_broker()
