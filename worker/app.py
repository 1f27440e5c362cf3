"""The Celery app. `celery -A worker.app worker|flower` and `scheduler` share its broker.

The settings are DESIGN.md's: JSON only, late acks with redelivery on worker
loss, one message prefetched per process, and a visibility timeout longer than
any run so Redis does not hand a live run to a second worker.
"""

from __future__ import annotations

import os

import click
from celery import Celery, signals

from core.settings import ENV_BROKER, worker_broker
from core.store import key_prefix
from worker import environ, kombu_guard
from worker.grace import Grace
from worker.idle import UntilIdle
from worker.recovery import Sweeper

# Redis redelivers an unacked message after this many seconds; `scheduler
# submit` refuses a matrix whose longest run could outlast it.
VISIBILITY_TIMEOUT_S = int(os.environ.get("EVALFLEET_VISIBILITY_TIMEOUT", 6 * 3600))
# Runs without a `queue:` of their own, and the aggregate task, go here.
DEFAULT_QUEUE = os.environ.get("EVALFLEET_QUEUE", "evalfleet")

kombu_guard.install()
_broker = worker_broker()
app = Celery("evalfleet", broker=_broker, backend=_broker, include=["worker.tasks"])
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_accept_content=["json"],
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_cancel_long_running_tasks_on_connection_loss=True,
    broker_connection_retry_on_startup=True,
    task_track_started=True,
    result_extended=True,
    result_expires=7 * 24 * 3600,
    # Workers send received/started/phase/succeeded events for Flower. No
    # "sent" events: on a 10,000-run submit they cost the scheduler ~1.5 s and
    # only add the queued backlog, which `scheduler status` shows anyway.
    task_send_sent_event=False,
    worker_send_task_events=True,
    broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
    # Celery's result keys (celery-task-meta-*, the chord's celery-taskset-meta-*)
    # under our prefix too. kombu's own keys (queues, unacked, bindings) keep
    # their names: worker/recovery.py and Flower read them as kombu lays them out.
    result_backend_transport_options={
        "visibility_timeout": VISIBILITY_TIMEOUT_S,
        "global_keyprefix": key_prefix(),
    },
    task_default_queue=DEFAULT_QUEUE,
    worker_hijack_root_logger=False,
)


@signals.worker_init.connect
def _forget_the_broker_url(**_: object) -> None:
    """A worker has read its broker URL: its agents must not find it (worker/environ.py).
    Before the pool forks, so its processes never hold it either."""
    environ.forget(ENV_BROKER)


# `celery -A worker.app worker --until-idle 120 --grace 60` (and `scheduler worker`).
app.user_options["worker"].add(
    click.Option(
        ["--until-idle"],
        type=click.FloatRange(min=0),
        default=None,
        metavar="SECONDS",
        help="Exit 0 once no task has run and the queues have stayed empty this long.",
    )
)
app.user_options["worker"].add(
    click.Option(
        ["--grace"],
        type=click.FloatRange(min=0),
        default=None,
        metavar="SECONDS",
        help="On SIGTERM, let running runs finish this long, then hand them back to the queue "
        "(default: EVALFLEET_SHUTDOWN_GRACE or 30).",
    )
)
# Every worker also re-sends lost runs and finishes their experiments.
app.steps["worker"].update({UntilIdle, Grace, Sweeper})
