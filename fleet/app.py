"""The Celery app as both sides configure it: `fleet_app(broker_url)`.

The settings (docs/ARCHITECTURE.md, "Celery decisions"): JSON only, late acks
with redelivery on worker loss, one message prefetched per process, and a
visibility timeout longer than any run so Redis does not hand a live run to a
second worker. The settings a worker reads (acks, prefetch, events) are here
too, beside those a sender reads (serializers, the result backend's keys, the
default queue), so that every process of a fleet agrees on all of them.

This app has no task of its own: a sender sends by task name (fleet.sending),
as Celery's client side does, and only a worker imports the tasks
(worker.celery_app adds them, its pool and its bootsteps). Nothing here is
global: each process builds the app for the broker it was given.
"""

from __future__ import annotations

import redis
from celery import Celery
from kombu.exceptions import OperationalError

from core.store.keys import key_prefix
from fleet import kombu_guard
from fleet.sending import configured_queue, configured_visibility_timeout_s

# Redis away or refusing writes, seen through redis-py or through kombu: not the run's
# fault nor the experiment's; whoever meets it waits for the broker and tries again.
BROKER_DOWN = (redis.ConnectionError, redis.TimeoutError, redis.OutOfMemoryError, OperationalError)


def fleet_app(
    broker_url: str,
    *,
    default_queue: str | None = None,
    visibility_timeout_s: int | None = None,
) -> Celery:
    """The app on `broker_url` (also its result backend), without tasks: a client's."""
    kombu_guard.install()
    if visibility_timeout_s is None:
        visibility_timeout_s = configured_visibility_timeout_s()
    app = Celery("evalfleet", broker=broker_url, backend=broker_url)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # A run in progress when Redis goes away goes on (it may have cost minutes and
        # dollars): its message, restored or redelivered, finds its live lease or its
        # result and is dropped (worker.run), so nothing runs or counts twice.
        # Cancelling it (True) SIGTERMs its pool process, which reads as the worker
        # leaving (worker.grace).
        worker_cancel_long_running_tasks_on_connection_loss=False,
        broker_connection_retry_on_startup=True,
        task_track_started=True,
        result_extended=True,
        result_expires=7 * 24 * 3600,
        # Workers send received/started/phase/succeeded events for Flower. No
        # "sent" events: on a 10,000-run submit they cost the scheduler ~1.5 s and
        # only add the queued backlog, which `scheduler status` shows anyway.
        task_send_sent_event=False,
        worker_send_task_events=True,
        broker_transport_options={
            "visibility_timeout": visibility_timeout_s,
            # A worker's BRPOP waits this long for a message (kombu's default: 1 s) and
            # its shutdown waits for the one in flight: a stopping worker took up to a
            # second more. A message still arrives at once; an idle worker asks 4 times
            # a second instead of once (docs/SCALE.md counts it in the idle fleet).
            "polling_interval": 0.25,
        },
        # Celery's result keys (celery-task-meta-*, the chord's celery-taskset-meta-*)
        # under our prefix too. kombu's own keys (queues, unacked, bindings) keep
        # their names: fleet.recovery and Flower read them as kombu lays them out.
        result_backend_transport_options={
            "visibility_timeout": visibility_timeout_s,
            "global_keyprefix": key_prefix(),
        },
        task_default_queue=default_queue or configured_queue(),
        worker_hijack_root_logger=False,
    )
    return app
