"""The heartbeat of a running run's lease (core/leases.py): renewed every third of
`lease_s` while the run runs, given back when a leaving worker hands the run back."""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Iterator

import redis

from core.results import RunSpec
from core.store import Store
from worker.grace import HandBack

log = logging.getLogger(__name__)


class Lease:
    """One delivery's lease on its run, `seconds` long (the matrix's `lease_s`)."""

    def __init__(self, store: Store, spec: RunSpec, seconds: float):
        self.store = store
        self.spec = spec
        self.seconds = seconds
        self.holder = uuid.uuid4().hex  # this delivery

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Renew the taken lease for the block. The save that ends the run also ends it."""
        exp_id, run_id = self.spec.experiment_id, self.spec.run_id
        try:
            with self._heartbeat(self.seconds):
                yield
        except HandBack:
            # A leaving worker put the message back in the queue: the queue, not
            # the lease, holds the run now (an expired lease would send it twice).
            self.store.leases.release(exp_id, run_id, self.holder)
            raise

    def hold_through(self, wait_s: float) -> None:
        """Keep the run through a wait before its next delivery, so that no sweep sends
        it again meanwhile."""
        exp_id, run_id = self.spec.experiment_id, self.spec.run_id
        self.store.leases.take(exp_id, run_id, self.holder, wait_s + self.seconds)

    @contextlib.contextmanager
    def _heartbeat(self, seconds: float) -> Iterator[None]:
        stop = threading.Event()
        beat = threading.Thread(
            target=self._renew, args=(stop, seconds), name="lease-heartbeat", daemon=True
        )
        beat.start()
        try:
            yield
        finally:
            stop.set()
            beat.join()

    def _renew(self, stop: threading.Event, seconds: float) -> None:
        exp_id, run_id = self.spec.experiment_id, self.spec.run_id
        while not stop.wait(seconds / 3):
            try:
                if not self.store.leases.renew(exp_id, run_id, self.holder, seconds):
                    log.warning("run %s was taken over by a newer delivery", run_id)
                    return
            except redis.RedisError as exc:  # Redis away: keep trying; the lease may lapse
                log.warning("cannot renew the lease of run %s: %s", run_id, exc)
