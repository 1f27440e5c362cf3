"""The worker's Celery app: `create_app(broker_url)`, the fleet's app (fleet.app) with
evalfleet's tasks, its pool and its worker options.

`celery -A worker.app` builds it for this machine's broker (worker.app). Tasks are
`shared_task`s and bootsteps are added by the modules that own them, so no worker
module imports an app.
"""

from __future__ import annotations

import warnings

from celery import Celery
from celery.exceptions import SecurityWarning

from fleet.app import fleet_app
from worker import grace, idle, prefork, sweeper, task_events

# Celery tells a worker run as root to take another user with --uid ("absolutely not
# recommended"): evalfleet's worker runs as root so that each run's setup, agent and
# command gates run as a user of the run's own (worker.confinement); given --uid,
# every agent would run as the worker's user, able to reach every other run.
warnings.filterwarnings(
    "ignore", message="You're running the worker with superuser", category=SecurityWarning
)


def create_app(
    broker_url: str,
    *,
    default_queue: str | None = None,
    visibility_timeout_s: int | None = None,
) -> Celery:
    """The app on `broker_url` with evalfleet's tasks and worker options (`--until-idle`,
    `--grace`, the recovery sweep)."""
    app = fleet_app(
        broker_url, default_queue=default_queue, visibility_timeout_s=visibility_timeout_s
    )
    app.conf.update(
        include=["worker.tasks"],
        # Celery's prefork pool, stopped without its fixed sleeps (worker.prefork).
        worker_pool=prefork.NAME,
    )
    idle.register(app)
    grace.register(app)
    sweeper.register(app)
    task_events.register(app)
    prefork.register()
    return app
