"""The runs' results: ``exp:{id}:runs``, run id -> RunResult JSON, version 1's (a
later version's are Reports'), and the runs without one (pending, lost).

A result is stored once: saving it, counting it in the experiment's record,
ending the run's lease, counting it toward its tier's fail-fast check and storing
its evidence are one step (the SAVE_RUN script, one round trip), which only the
lease's holder can take.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import Literal

from core.errors import ExperimentNotFound
from core.results.run import RunResult, RunSpec, RunStatus
from core.store import scripts
from core.store.client import TextClient
from core.store.evidence import NO_CAP, EncodedEvidence
from core.store.health import HealthNote
from core.store.keys import Keys
from core.store.leases import Leases
from core.store.specs import Specs

# The order runs are read in: by tier, scenario and index.
_RUN_ORDER = attrgetter("tier", "scenario", "run_index")


@dataclass(frozen=True)
class Finished:
    """What a run's last step did: its result stored (else another delivery's is, or
    another delivery holds the run), its tier stopped by it, its evidence kept whole,
    or over the experiment's cap (then nothing of it was written)."""

    saved: bool
    stopped: bool = False
    evidence: Literal["whole", "over"] | None = None


class Results:
    def __init__(self, client: TextClient, keys: Keys, specs: Specs, leases: Leases):
        self.redis = client
        self.keys = keys
        self._specs = specs
        self._leases = leases
        self._save = client.register_script(scripts.SAVE_RUN)
        self._unrecord = client.register_script(scripts.UNRECORD)
        self._track_unaccounted = client.register_script(scripts.TRACK_UNACCOUNTED)

    def save(self, result: RunResult, holder: str = "") -> bool:
        """Store a final result; False (and nothing changed) when one is already stored,
        or when `holder` no longer holds the run's lease (another delivery took it over).
        ExperimentNotFound when the experiment has no record (deleted meanwhile)."""
        return self.finish(result, holder).saved

    def finish(
        self,
        result: RunResult,
        holder: str = "",
        *,
        health: HealthNote | None = None,
        evidence: EncodedEvidence | None = None,
        evidence_cap: int = NO_CAP,
    ) -> Finished:
        """`save`, and with the result, in the same step: `health` counted toward its
        tier's fail-fast check, `evidence` (kept in Redis) stored within the
        experiment's `evidence_cap` bytes.

        Fields at their defaults are left out (reading fills them in again): a
        no-op run's result takes 0.7 KB instead of 1.6 KB."""
        exp_id = result.experiment_id
        done = self._save(
            keys=[
                self.keys.runs(exp_id),
                self.keys.experiment(exp_id),
                self.keys.leases(exp_id),
                self.keys.health(exp_id),
                self.keys.halted(exp_id),
                self.keys.evidence(exp_id),
            ],
            args=[
                result.run_id,
                result.model_dump_json(exclude_defaults=True),
                "1" if result.passed else "0",
                _counter(result.status),
                holder,
                health.tier if health is not None else "",
                (health.infra_error or "") if health is not None else "",
                health.threshold if health is not None else 0,
                evidence.value if evidence is not None else "",
                evidence.size if evidence is not None else 0,
                evidence_cap,
            ],
        )
        if done == "gone":
            raise ExperimentNotFound(exp_id)
        if not isinstance(done, list):  # taken over, or already stored
            return Finished(saved=False)
        _, stopped, kept = done
        return Finished(True, stopped == "stopped", kept or None)

    def get(self, exp_id: str, run_id: str) -> RunResult | None:
        raw = self.redis.hget(self.keys.runs(exp_id), run_id)
        return RunResult.model_validate_json(raw) if raw else None

    def all(self, exp_id: str) -> list[RunResult]:
        """Every stored result, by tier, scenario and index."""
        return parse_results(self.redis.hvals(self.keys.runs(exp_id)))

    def pending(self, exp_id: str) -> list[RunSpec]:
        """Runs without a result and not in progress (in progress: a lease not yet expired)."""
        skip = set(self.redis.hkeys(self.keys.runs(exp_id))) | self._leases.live(exp_id)
        return [s for s in self._specs.all(exp_id) if s.run_id not in skip]

    def unfinished(self, exp_id: str) -> set[str]:
        """Run ids without a stored result."""
        pipe = self.redis.pipeline(transaction=False)  # a full Redis refuses every MULTI
        pipe.hkeys(self.keys.specs(exp_id))
        pipe.hkeys(self.keys.runs(exp_id))
        specs, done = pipe.execute()
        return set(specs) - set(done)

    def unrecord(
        self, exp_id: str, status: RunStatus, only: Callable[[RunResult], bool] | None = None
    ) -> list[RunSpec]:
        """The runs recorded as never started (`cancelled` or `not_run`), or as
        infrastructure errors, made pending again (result and delivery count removed)
        for a resume; `only`, those of them it holds true of; returns their specs."""
        unstarted = [
            r.run_id for r in self.all(exp_id) if r.status is status and (only is None or only(r))
        ]
        if unstarted:
            self._unrecord(
                keys=[
                    self.keys.runs(exp_id),
                    self.keys.attempts(exp_id),
                    self.keys.experiment(exp_id),
                    self.keys.deliveries(exp_id),
                ],
                args=[_counter(status), *unstarted],
            )
        return self._specs.of(exp_id, unstarted)

    def claim_lost(self, exp_id: str) -> list[RunSpec]:
        """Runs whose lease expired without a result, each handed to one caller only."""
        return self._specs.of(exp_id, self._leases.claim_expired(exp_id))

    def claim_unaccounted(
        self, exp_id: str, run_ids: Iterable[str], seconds: float
    ) -> list[RunSpec]:
        """Runs a sweep found nowhere (`run_ids`) that every sweep for `seconds` or
        longer has found nowhere, each handed to one caller only."""
        overdue = self._track_unaccounted(
            keys=[self.keys.unaccounted(exp_id)], args=[seconds, *sorted(run_ids)]
        )
        return self._specs.of(exp_id, overdue)


def _counter(status: RunStatus) -> str:
    """The experiment's counter a result of `status` adds to besides `done` (`finish`),
    and a resume takes back from (`unrecord`); '' for none."""
    if status.is_infra:
        return "errors"
    return status.value if status in (RunStatus.cancelled, RunStatus.not_run) else ""


def parse_results(raw: list[str]) -> list[RunResult]:
    """Stored results, parsed and put in run order (100,000s of them: gc_paused)."""
    with gc_paused():
        return sorted(map(RunResult.model_validate_json, raw), key=_RUN_ORDER)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cycle collector off while 100,000s of objects are made, none of them
    garbage: it would walk the growing heap every few hundred of them (reading
    100,000 results took 3-4 times as long). As a decorator (`@gc_paused()`) it
    also covers the function's locals being freed, so runs it read and dropped are
    never walked at all."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
