"""Each tier's health, for fail-fast: ``exp:{id}:health`` (the first results of each
tier), ``exp:{id}:halted`` (tier -> the infrastructure error that stopped its
runs) and ``exp:{id}:unrecognised`` (tier -> the transcript format its agent's
output was not in).

A tier is stopped at most once: counting a result and stopping the tier are one
step, the one that stores the result (core.store.results, HealthNote), and a
delivery reads `halted` as it starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.store.client import TextClient
from core.store.keys import Keys


@dataclass(frozen=True)
class HealthNote:
    """What a finished run adds to its tier's fail-fast check, in the step that stores
    it (core.store.results, `finish`)."""

    tier: str
    infra_error: str | None  # None for a result of the agent's own
    threshold: int  # that many identical infrastructure errors first stop the tier (0: off)


class Health:
    def __init__(self, client: TextClient, keys: Keys):
        self.redis = client
        self.keys = keys

    def halted(self, exp_id: str) -> dict[str, str]:
        """Tiers fail-fast stopped, with the infrastructure error that stopped each."""
        return dict(self.redis.hgetall(self.keys.halted(exp_id)))

    def forget(self, exp_id: str, tiers: set[str]) -> None:
        """`tiers` as if none of their runs had ended yet: not stopped, nothing counted
        toward fail-fast (a resume that runs their infrastructure errors again, the
        cause mended)."""
        fields = [
            f for f in self.redis.hkeys(self.keys.health(exp_id)) if f.split("\n")[0] in tiers
        ]
        pipe = self.redis.pipeline(transaction=False)
        if fields:
            pipe.hdel(self.keys.health(exp_id), *fields)
        if tiers:
            pipe.hdel(self.keys.halted(exp_id), *tiers)
        pipe.execute()

    def note_unrecognised(self, exp_id: str, tier: str, transcript_format: str) -> None:
        """A run of `tier` whose output its transcript parser did not recognise (the
        first such run's format is kept)."""
        self.redis.hsetnx(self.keys.unrecognised(exp_id), tier, transcript_format)

    def unrecognised(self, exp_id: str) -> dict[str, str]:
        """Tiers with a run whose output was not in their transcript format, and the format."""
        return dict(self.redis.hgetall(self.keys.unrecognised(exp_id)))
