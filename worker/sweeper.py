"""The worker's part in recovery (fleet.recovery): every worker sweeps every unfinished
experiment every EVALFLEET_SWEEP_S seconds (default 10), in a thread of its main
process (each node of a split start: one that dies takes no sweep with it). It also
removes `sandbox: docker` containers whose worker process died
(worker.docker_sandbox), the first time at start, on a thread of their own.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from celery import Celery, bootsteps

from core.settings import setting
from core.store import Store
from core.store.server import risky_settings
from fleet.app import BROKER_DOWN
from fleet.recovery import recover_all
from worker.docker_sandbox import sweep_orphans
from worker.tasks import store_of

log = logging.getLogger(__name__)

ENV_SWEEP_S = "EVALFLEET_SWEEP_S"
# Containers a killed worker left behind cost memory, not results: once a minute.
ORPHAN_SWEEP_S = 60.0


def register(app: Celery) -> None:
    """Every worker also re-sends lost runs and finishes their experiments."""
    app.steps["worker"].add(Sweeper)


class Sweeper(bootsteps.StartStopStep):
    """Worker bootstep: `recover_all` every EVALFLEET_SWEEP_S seconds in a daemon thread."""

    label = "sweeper"
    # Its threads start once the pool has forked its processes (worker.idle says why).
    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker: Any, **kwargs: Any):
        super().__init__(worker, **kwargs)
        self.stop_event = threading.Event()
        self.interval_s = setting(ENV_SWEEP_S)

    def start(self, worker: Any) -> None:
        store = store_of(worker.app)
        with contextlib.suppress(*BROKER_DOWN):  # the sweeps wait for it
            for warning in risky_settings(store.redis):
                log.warning(warning)
        threading.Thread(
            target=self._loop, args=(worker.app, store), name="sweeper", daemon=True
        ).start()
        # Orphan containers on a thread of their own: a docker CLI that hangs (an
        # engine under load; its timeout is minutes) must not hold up lost runs.
        threading.Thread(target=self._orphans, name="orphan-sweeper", daemon=True).start()

    def stop(self, worker: Any) -> None:
        self.stop_event.set()

    def _loop(self, app: Celery, store: Store) -> None:
        while not self.stop_event.wait(self.interval_s):
            try:
                recover_all(app, store)
            except BROKER_DOWN as exc:
                log.warning("recovery sweep skipped, Redis unreachable: %s", exc)
            except Exception:  # the next sweep tries again: this thread must not end
                log.exception("recovery sweep failed")

    def _orphans(self) -> None:
        while True:
            try:
                sweep_orphans()
            except Exception:
                log.exception("sweeping orphan sandbox containers failed")
            if self.stop_event.wait(ORPHAN_SWEEP_S):
                return
