"""The Celery app, built from explicit settings: `create_app(broker_url)`.

The settings (docs/ARCHITECTURE.md, "Celery decisions"): JSON only, late acks
with redelivery on worker loss, one message prefetched per process, and a
visibility timeout longer than any run so Redis does not hand a live run to a
second worker.

Nothing here is global: the scheduler builds the app for the broker it was
given, `celery -A worker.app` builds it for this machine's (worker.app).
Tasks are `shared_task`s and bootsteps are added by the modules that own them,
so no worker module imports an app.
"""

from __future__ import annotations

from celery import Celery

from core.store.keys import key_prefix
from worker import grace, idle, kombu_guard, prefork, recovery, task_events
from worker.sending import configured_queue, configured_visibility_timeout_s


def create_app(
    broker_url: str,
    *,
    default_queue: str | None = None,
    visibility_timeout_s: int | None = None,
) -> Celery:
    """The app on `broker_url` (also its result backend), with evalfleet's tasks and
    worker options (`--until-idle`, `--grace`, the recovery sweep)."""
    kombu_guard.install()
    if visibility_timeout_s is None:
        visibility_timeout_s = configured_visibility_timeout_s()
    app = Celery("evalfleet", broker=broker_url, backend=broker_url, include=["worker.tasks"])
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
        # their names: worker.recovery and Flower read them as kombu lays them out.
        result_backend_transport_options={
            "visibility_timeout": visibility_timeout_s,
            "global_keyprefix": key_prefix(),
        },
        task_default_queue=default_queue or configured_queue(),
        worker_hijack_root_logger=False,
        # Celery's prefork pool, stopped without its fixed sleeps (worker.prefork).
        worker_pool=prefork.NAME,
    )
    idle.register(app)
    grace.register(app)
    recovery.register(app)
    task_events.register(app)
    prefork.register()
    return app
