"""An adaptive experiment's waves: ``exp:{id}:waves``, ``wave`` the number of the
last one sent and, per closed tier x scenario cell, why it stopped.

A wave is claimed once: recording its runs, the cells it closes and the runs the
experiment's total loses is one step (the CLAIM_WAVE script), taken only when
the previous wave is still the last and all its runs have results.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.results.run import RunSpec
from core.store import scripts
from core.store.client import TextClient
from core.store.keys import Keys


class Waves:
    def __init__(self, client: TextClient, keys: Keys):
        self.redis = client
        self.keys = keys
        self._claim = client.register_script(scripts.CLAIM_WAVE)

    def state(self, exp_id: str) -> tuple[int, dict[tuple[str, str], str]]:
        """The number of the last wave sent, and the closed cells with why each stopped."""
        raw = self.redis.hgetall(self.keys.waves(exp_id))
        closed = {
            (tier, scenario): why
            for field, why in raw.items()
            if field != "wave"
            for tier, scenario in [field.split("\n", 1)]
        }
        return int(raw.get("wave", 1)), closed

    def claim(
        self,
        exp_id: str,
        wave: int,
        fewer: int,
        closing: dict[tuple[str, str], str],
        specs: Sequence[RunSpec],
    ) -> str:
        """Record wave `wave + 1` (its runs, the cells it closes, the runs the total loses)
        if `wave` is still the last one and all its runs have results: 'claimed', else
        'in flight' or 'taken' (another sweeper was first)."""
        reply = self._claim(
            keys=[
                self.keys.waves(exp_id),
                self.keys.runs(exp_id),
                self.keys.specs(exp_id),
                self.keys.experiment(exp_id),
            ],
            args=[
                wave,
                fewer,
                len(closing),
                *(
                    v
                    for (tier, scenario), why in closing.items()
                    for v in (f"{tier}\n{scenario}", why)
                ),
                *(v for spec in specs for v in (spec.run_id, spec.model_dump_json())),
            ],
        )
        return str(reply)
