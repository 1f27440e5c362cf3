"""The heartbeat of a running run's lease (core.store.leases): renewed every third of
`lease_s` while the run runs, given back when a leaving worker hands the run back."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import redis

from core.results.run import RunSpec
from core.store import Store
from worker.grace import HandBack

log = logging.getLogger(__name__)


class Lease:
    """One delivery's lease on its run, `seconds` long (the matrix's `lease_s`)."""

    def __init__(self, store: Store, spec: RunSpec, seconds: float):
        self.store = store
        self.spec = spec
        self.seconds = seconds
        # This delivery, and where it runs: a later delivery on this machine may take
        # over a lease whose process died (holder_died_here).
        self.holder = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex}"

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Renew the taken lease for the block. The save that ends the run also ends it."""
        exp_id, run_id = self.spec.experiment_id, self.spec.run_id
        try:
            with self._heartbeat():
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

    def renew(self) -> bool:
        """Renew the lease once; False when it is no longer this delivery's."""
        exp_id, run_id = self.spec.experiment_id, self.spec.run_id
        try:
            if not self.store.leases.renew(exp_id, run_id, self.holder, self.seconds):
                log.warning("run %s was taken over by a newer delivery", run_id)
                return False
        except redis.RedisError as exc:  # Redis away: keep trying; the lease may lapse
            log.warning("cannot renew the lease of run %s: %s", run_id, exc)
        return True

    @contextlib.contextmanager
    def _heartbeat(self) -> Iterator[None]:
        beats = _heartbeats(os.getpid())
        beats.hold(self)
        try:
            yield
        finally:
            beats.drop(self)


class _Heartbeats:
    """The renewals of a process's leases, each every third of its length, on one thread
    for the process's life: a thread a run cost two thread switches a run (its start,
    then its join), ~4% of a 2-slot fleet's throughput of quick runs. Renewals happen
    under the lock, so a dropped lease is never renewed after `drop` returns (a late
    renewal would shorten the lease `Lease.hold_through` takes next)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._due: dict[Lease, float] = {}  # when each lease is renewed next (monotonic)
        self._wake_at: float | None = None  # when the thread wakes by itself; None: never
        threading.Thread(target=self._beat, name="lease-heartbeats", daemon=True).start()

    def hold(self, lease: Lease) -> None:
        with self._lock:
            due = time.monotonic() + lease.seconds / 3
            self._due[lease] = due
            if self._wake_at is None or due < self._wake_at:
                self._lock.notify()  # else the thread wakes in time by itself

    def drop(self, lease: Lease) -> None:
        with self._lock:  # waits for a renewal in flight
            self._due.pop(lease, None)

    def _beat(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                for lease in [lease for lease, due in self._due.items() if due <= now]:
                    self._due[lease] = now + lease.seconds / 3
                    try:
                        renewed = lease.renew()
                    except Exception:  # this thread renews every run's lease: it must go on
                        log.exception("renewing the lease of run %s failed", lease.spec.run_id)
                        continue
                    if not renewed:
                        del self._due[lease]
                self._wake_at = min(self._due.values(), default=None)
                timeout = None if self._wake_at is None else self._wake_at - time.monotonic()
                self._lock.wait(timeout)


@functools.cache
def _heartbeats(pid: int) -> _Heartbeats:
    """This process's (a forked pool process gets its own: threads do not cross a fork)."""
    return _Heartbeats()


def holder_died_here(holder: str) -> bool:
    """Whether a lease's holder was a process of this machine that no longer exists.
    False when unsure (another machine, a pid taken again): then the lease must lapse."""
    host, _, rest = holder.partition("/")
    pid = rest.partition("/")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False
