"""Which broker `celery -A worker.app worker|flower` and `python -m worker` join.

Order: Celery's `--broker` (which Celery's command line passes on as
CELERY_BROKER_URL), then the configured URL and the embedded Redis of ./.evalfleet
(fleet.broker). Found once, and blanked at once from the process's arguments and
environment: the worker's agents, and anyone reading Flower's /proc, must not find
the password.
"""

from __future__ import annotations

import os

from core.broker_url import ENV_BROKER, ENV_PASSWORD_FILE
from fleet.broker import CELERY_BROKER, running_embedded_broker, take_broker

NO_BROKER = (
    f"error: no broker: set {ENV_BROKER} (e.g. redis://host:6379/0 and "
    f"{ENV_PASSWORD_FILE}), or start `scheduler` in this folder for its embedded one"
)


def worker_broker() -> str | None:
    """The broker found, or None: the caller refuses to start (NO_BROKER)."""
    # Celery's settings prefer CELERY_BROKER_URL to the app's broker: so does this.
    return take_broker(os.environ.get(CELERY_BROKER)) or running_embedded_broker()
