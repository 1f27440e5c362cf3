"""Run leases: a running run's proof of life in Redis, one hash per experiment.

A delivery takes its run's lease when it starts (Attempts.begin, in the
same step as counting the delivery) and a heartbeat renews it every third of
its duration (worker.heartbeat, `lease_s` in the matrix). A worker that dies
stops renewing; once the lease has expired, a sweep claims the run and sends
it again (fleet.recovery). Saving the run's result ends its lease
(Results.save), in the same step as storing it.

A delivery that finds another's live lease does not start (Attempts.begin):
it is a copy of a run in progress. A lapsed lease is the next delivery's, and
`take` (a provider outage's wait) always succeeds. An older delivery still
alive past its lapsed lease fails to renew and, at its save, finds the run is
no longer its own, so it cannot count. Each entry is "EXPIRY HOLDER", the expiry
on the Redis server's clock; the scripts are in core.store.scripts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.store import scripts
from core.store.client import TextClient
from core.store.keys import Keys

# The holder of a lapsed lease whose run was sent again, and of one whose
# re-send failed (the next sweep claims it again).
RESENT = "resent"
LOST = "lost"


@dataclass
class LeaseState:
    left_s: dict[str, float] = field(default_factory=dict)  # each live lease's time to run
    lapsed: set[str] = field(default_factory=set)  # expired: lost, or sent again
    unswept: set[str] = field(default_factory=set)  # lapsed, and not sent again yet

    @property
    def live(self) -> set[str]:
        """In progress somewhere."""
        return set(self.left_s)


class Leases:
    def __init__(self, client: TextClient, keys: Keys):
        self.redis = client
        self.keys = keys
        self._take = client.register_script(scripts.TAKE_LEASE)
        self._renew = client.register_script(scripts.RENEW_LEASE)
        self._release = client.register_script(scripts.RELEASE_LEASE)
        self._claim_expired = client.register_script(scripts.CLAIM_EXPIRED_LEASES)

    def take(self, exp_id: str, run_id: str, holder: str, seconds: float) -> None:
        """The run is `holder`'s for `seconds`, whoever held it before."""
        self._take(keys=[self.keys.leases(exp_id)], args=[run_id, holder, seconds])

    def renew(self, exp_id: str, run_id: str, holder: str, seconds: float) -> bool:
        """Extend `holder`'s lease; False when it is no longer theirs."""
        outcome = self._renew(keys=[self.keys.leases(exp_id)], args=[run_id, holder, seconds])
        return bool(outcome == "renewed")

    def release(self, exp_id: str, run_id: str, holder: str) -> None:
        """End `holder`'s lease without a result: the run's message went back to the queue."""
        self._release(keys=[self.keys.leases(exp_id)], args=[run_id, holder])

    def state(self, exp_id: str) -> LeaseState:
        """The runs with a lease entry, by whether it is live (the Redis server's clock)."""
        seconds, micros = self.redis.time()
        now = seconds + micros / 1e6
        state = LeaseState()
        for run, lease in self.redis.hgetall(self.keys.leases(exp_id)).items():
            expiry, _, holder = lease.partition(" ")
            left_s = float(expiry) - now
            if left_s >= 0:
                state.left_s[run] = left_s
            else:
                state.lapsed.add(run)
                if holder != RESENT:
                    state.unswept.add(run)
        return state

    def live(self, exp_id: str) -> set[str]:
        """Runs whose lease has not expired: in progress somewhere."""
        return self.state(exp_id).live

    def claim_expired(self, exp_id: str) -> list[str]:
        """Runs whose lease expired without a result, each handed to one caller only
        and marked as sent again."""
        keys = [self.keys.leases(exp_id), self.keys.runs(exp_id)]
        return list(self._claim_expired(keys=keys, args=[RESENT]))

    def mark_lost(self, exp_id: str, run_id: str) -> None:
        """Put a claimed run back as lost (its re-send failed): the next sweep claims it."""
        self.redis.hset(self.keys.leases(exp_id), run_id, f"0 {LOST}")
