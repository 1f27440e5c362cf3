"""The runs an experiment planned: ``exp:{id}:specs``, run id -> RunSpec JSON, what
resume and recovery send again. A run is in it from before it is sent until the
experiment is deleted, whether it has a result or not.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from core.results.run import RunSpec
from core.store.client import TextClient
from core.store.keys import Keys


class Specs:
    def __init__(self, client: TextClient, keys: Keys):
        self.redis = client
        self.keys = keys

    def add(self, exp_id: str, specs: Sequence[RunSpec]) -> None:
        """Record runs of the experiment.

        Stored without what the key and field already say (the experiment and run
        ids) and without defaults: a third of the bytes, every run of every
        experiment (docs/SCALE.md)."""
        if specs:
            self.redis.hset(
                self.keys.specs(exp_id),
                mapping={
                    s.run_id: s.model_dump_json(
                        exclude={"experiment_id", "run_id"}, exclude_defaults=True
                    )
                    for s in specs
                },
            )

    def ids(self, exp_id: str) -> set[str]:
        """The ids of the runs recorded so far."""
        return set(self.redis.hkeys(self.keys.specs(exp_id)))

    def all(self, exp_id: str) -> list[RunSpec]:
        """Every planned run, by tier, scenario and index."""
        raw = self.redis.hgetall(self.keys.specs(exp_id))
        specs = [_spec(exp_id, run_id, v) for run_id, v in raw.items()]
        return sorted(specs, key=lambda s: (s.tier, s.scenario, s.run_index))

    def of(self, exp_id: str, run_ids: Sequence[str]) -> list[RunSpec]:
        """The specs of these runs, in their order (those the experiment planned)."""
        if not run_ids:
            return []
        raw = self.redis.hmget(self.keys.specs(exp_id), run_ids)
        return [
            _spec(exp_id, run_id, spec)
            for run_id, spec in zip(run_ids, raw, strict=True)
            if spec is not None
        ]

    def count(self, exp_id: str) -> int:
        """How many runs were recorded to be sent (an adaptive experiment's waves so far)."""
        return int(self.redis.hlen(self.keys.specs(exp_id)))

    def has(self, exp_id: str, run_id: str) -> bool:
        """A run the experiment planned (with a result or not)."""
        return bool(self.redis.hexists(self.keys.specs(exp_id), run_id))

    def ids_ending(self, suffix: str, recent: int = 100) -> list[str]:
        """The ids of runs that end with `suffix`, in the `recent` latest experiments."""
        pattern = "*" + "".join(f"\\{c}" if c in "\\*?[]" else c for c in suffix)
        found: list[str] = []
        for exp_id in reversed(self.redis.zrange(self.keys.experiments(), -recent, -1)):
            found += [k for k, _ in self.redis.hscan_iter(self.keys.specs(exp_id), match=pattern)]
        return found


def _spec(exp_id: str, run_id: str, raw: str) -> RunSpec:
    """A spec as Specs.add stored it, its ids given back."""
    return RunSpec.model_validate({**json.loads(raw), "experiment_id": exp_id, "run_id": run_id})
