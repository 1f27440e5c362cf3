"""The budget ledger: an experiment's spend, reserved before each run and settled after.

A run about to start reserves its projected cost (Ledger.reserve, worker.run);
a finished run settles the reservation with its real cost (Ledger.settle). Both
are one Lua step each (core.store.scripts), so every worker of the fleet sees one
ledger. The first reservation that does not fit stops the ledger: no later run
starts (each is recorded `not_run`), runs in flight finish and settle. So the
final spend is at most the limit plus, over the runs in flight when the last
run was admitted, what each cost beyond its projection (docs/RELIABILITY.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.results.run import RunResult, RunSpec
from core.store import scripts
from core.store.client import TextClient
from core.store.keys import Keys

if TYPE_CHECKING:  # the store opens for commands that read no matrix
    from core.matrix import Budget, Matrix

KINDS = ("agent", "judge")


@dataclass(frozen=True)
class Reservation:
    fits: bool
    agent_usd: float = 0.0  # the projections it holds (when it fits)
    judge_usd: float = 0.0
    refused: str | None = None  # why it does not fit


@dataclass(frozen=True)
class LedgerState:
    limits: dict[str, float]  # kind -> USD, only the kinds with a limit
    spent: dict[str, float]
    reserved: dict[str, float]
    stopped: str | None


def cell(tier: str, scenario: str) -> str:
    return f"{tier}\n{scenario}"


class Ledger:
    def __init__(self, client: TextClient, keys: Keys):
        self.redis = client
        self.keys = keys
        self._reserve = client.register_script(scripts.RESERVE)
        self._settle = client.register_script(scripts.SETTLE)

    def set_limits(self, exp_id: str, budget: Budget) -> None:
        """The experiment's ceilings; a stopped ledger starts again (a resume that
        raised them)."""
        key = self.keys.budget(exp_id)
        pipe = self.redis.pipeline()
        for kind in KINDS:
            limit = getattr(budget, f"{kind}_usd")
            if limit is None:
                pipe.hdel(key, f"{kind}:limit")
            else:
                pipe.hset(key, f"{kind}:limit", repr(limit))
        pipe.hdel(key, "stopped")
        pipe.execute()

    def reserve(self, spec: RunSpec, matrix: Matrix) -> Reservation:
        budget = matrix.budget
        assert budget is not None
        limits = matrix.limits_for(matrix.tier(spec.tier), matrix.scenario(spec.scenario))
        reply = self._reserve(
            keys=self._keys(spec.experiment_id),
            args=[
                spec.run_id,
                cell(spec.tier, spec.scenario),
                _opt(budget.prior_usd),
                _opt(budget.judge_prior_usd),
                _opt(limits.max_cost_usd),
            ],
        )
        if reply[0] == "refused":
            return Reservation(fits=False, refused=reply[1])
        agent, judge = (float(v) for v in reply[1].split())
        return Reservation(fits=True, agent_usd=agent, judge_usd=judge)

    def settle(self, result: RunResult) -> bool:
        """Give back the run's reservation for what it really spent; False when it held none.
        An agent that ran at an unknown cost is charged its projection; one that never
        ran (an infrastructure error before it started), what its result says or 0."""
        cost = result.cost_usd
        if cost is None and not result.counted:
            cost = 0.0
        outcome = self._settle(
            keys=self._keys(result.experiment_id),
            args=[
                result.run_id,
                cell(result.tier, result.scenario),
                _opt(cost),
                repr(result.judge_cost_usd or 0.0),
                "1" if result.counted else "0",
            ],
        )
        return bool(outcome == "settled")

    def state(self, exp_id: str) -> LedgerState:
        raw = self.redis.hgetall(self.keys.budget(exp_id))

        def figures(field: str) -> dict[str, float]:
            return {k: float(raw[f"{k}:{field}"]) for k in KINDS if f"{k}:{field}" in raw}

        return LedgerState(
            limits=figures("limit"),
            spent={k: max(v, 0.0) for k, v in figures("spent").items()},
            reserved={k: max(v, 0.0) for k, v in figures("reserved").items()},
            stopped=raw.get("stopped"),
        )

    def _keys(self, exp_id: str) -> list[str]:
        return [self.keys.budget(exp_id), self.keys.reservations(exp_id)]


def _opt(value: float | None) -> str:
    return "" if value is None else repr(value)
