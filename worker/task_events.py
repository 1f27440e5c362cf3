"""The worker's own task events (received, started, succeeded), published together.

Celery buffers a worker's task events and publishes what is buffered at the
event loop's next turn: the three events of a quick run were three messages,
each a PUBLISH to Redis and to every subscriber (Flower), and a fifth of a
2-slot fleet's throughput of no-op runs. Here the buffer is published the
linger (EVALFLEET_EVENTS_LINGER_S, default 0.05 s) after its first event, as
worker.phases does for the phases: one task.multi message for the runs of
that while, a state reaching Flower at most the linger late. What is buffered
when the consumer stops is published then, so no run's SUCCESS is lost.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, bootsteps

from worker.phases import linger_s


class LingeringEvents(bootsteps.StartStopStep):
    """Consumer bootstep: the event dispatcher's flush, scheduled the linger late."""

    requires = ("celery.worker.consumer.events:Events",)

    def __init__(self, c: Any, **kwargs: Any):
        super().__init__(c, **kwargs)
        self.scheduled = False
        self.linger_s = linger_s()

    def start(self, c: Any) -> None:
        dispatcher = c.event_dispatcher
        if c.hub is None or dispatcher is None or dispatcher.on_send_buffered is None:
            return  # no event loop: Celery publishes each event as it is sent

        def flush() -> None:
            self.scheduled = False
            c._flush_events()

        def buffered() -> None:
            if not self.scheduled:
                self.scheduled = True
                c.hub.call_later(self.linger_s, flush)

        dispatcher.on_send_buffered = buffered

    def stop(self, c: Any) -> None:
        if c.event_dispatcher is not None:
            c._flush_events()

    shutdown = stop


def register(app: Celery) -> None:
    app.steps["consumer"].add(LingeringEvents)
