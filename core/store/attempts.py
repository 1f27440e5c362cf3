"""A run's deliveries: ``exp:{id}:attempts`` (run id -> how many so far) and
``exp:{id}:deliveries`` (run id -> a JSON list of them: worker, started_at, and
once known ended_at and outcome), so that one that died without a result still
shows.

A delivery starts in one step (the BEGIN_DELIVERY script): it finds the run's
result if there is one; else it is counted, recorded and takes the run's lease.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from core.errors import ExperimentNotFound, ExperimentPaused, RunInProgress
from core.evidence.models import Attempt
from core.results.report import ExperimentStatus
from core.results.run import RunResult, RunSpec
from core.store import scripts
from core.store.client import TextClient
from core.store.keys import Keys

# What a delivery that recorded no end is known to have done.
NO_RESULT = "ended without a result (its worker was killed or lost, or a later delivery took over)"


@dataclass(frozen=True)
class Delivery:
    """What a delivery of a run finds when it starts (Attempts.begin)."""

    stored: RunResult | None = None  # the run's result, when it has one already
    attempts: int = 0  # deliveries so far, this one included
    status: ExperimentStatus = ExperimentStatus.running
    halted: str | None = None  # why fail-fast stopped the run's tier
    # The run's deliveries so far, this one last (its outcome not yet known).
    deliveries: list[Attempt] = field(default_factory=list)


class Attempts:
    def __init__(self, client: TextClient, keys: Keys):
        self.redis = client
        self.keys = keys
        self._begin = client.register_script(scripts.BEGIN_DELIVERY)
        self._end = client.register_script(scripts.END_DELIVERY)

    def begin(
        self, spec: RunSpec, holder: str, lease_s: float, *, worker: str = "", continues: str = ""
    ) -> Delivery:
        """A delivery of the run of `spec` starts: its stored result, if it has one; else
        the delivery is counted and recorded as `worker`'s, and `holder` takes the run's
        lease for `lease_s`. ExperimentNotFound when the experiment has no record;
        ExperimentPaused while it is interrupted; RunInProgress while another delivery
        than `continues` holds a live lease."""
        exp_id, run_id = spec.experiment_id, spec.run_id
        reply = self._begin(
            keys=[
                self.keys.runs(exp_id),
                self.keys.attempts(exp_id),
                self.keys.leases(exp_id),
                self.keys.experiment(exp_id),
                self.keys.halted(exp_id),
                self.keys.deliveries(exp_id),
            ],
            args=[run_id, holder, lease_s, spec.tier, worker, continues],
        )
        if reply[0] == "gone":
            raise ExperimentNotFound(exp_id)
        if reply[0] == "paused":
            raise ExperimentPaused(exp_id, run_id)
        if reply[0] == "busy":
            raise RunInProgress(run_id, float(reply[1]), reply[2])
        if reply[0] == "stored":
            return Delivery(stored=RunResult.model_validate_json(reply[1]))
        return Delivery(
            attempts=int(reply[1]),
            status=ExperimentStatus(reply[2] or "running"),
            halted=reply[3] or None,
            deliveries=_attempts(reply[4]),
        )

    def end(self, exp_id: str, run_id: str, number: int, outcome: str) -> None:
        """Delivery `number` (1: the first) of the run ended without a result, so: `outcome`."""
        self._end(keys=[self.keys.deliveries(exp_id)], args=[run_id, number, outcome])

    def of(self, exp_id: str, run_id: str) -> list[Attempt]:
        """The run's deliveries so far, oldest first."""
        return _attempts(self.redis.hget(self.keys.deliveries(exp_id), run_id))


def _attempts(raw: str | None) -> list[Attempt]:
    """A run's record of deliveries; one without a recorded end did not store a result."""
    entries = json.loads(raw) if raw else []
    # An empty Lua table encodes as an object, {}.
    return [Attempt.model_validate({"outcome": NO_RESULT, **entry}) for entry in entries or []]
