"""What runs may spend: a run's `limits:`, the experiment's `budget:` and the `pricing:`
its spend is reckoned with."""

from __future__ import annotations

from pydantic import Field, model_validator

from core.matrix.fields import Strict, Weight


class Limits(Strict):
    """What one run may spend (core.metrics.limits). A tier's and a scenario's combine: the
    lower of each figure applies."""

    max_cost_usd: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="USD of LLM spend (priced as reported)"
    )
    max_tokens: int | None = Field(
        None, ge=1, description="tokens of all LLM calls: input, output and cache reads/writes"
    )
    max_llm_calls: int | None = Field(None, ge=1, description="LLM calls")

    def combined(self, other: Limits | None) -> Limits:
        if other is None:
            return self
        lower = {
            key: min(v for v in (getattr(self, key), getattr(other, key)) if v is not None)
            for key in Limits.model_fields
            if getattr(self, key) is not None or getattr(other, key) is not None
        }
        return Limits.model_validate(lower)


class ModelPrice(Strict):
    """USD per 1M tokens."""

    input: Weight
    output: Weight
    cache_read: Weight | None = Field(None, description="default: the input price")
    cache_write: Weight | None = Field(None, description="default: the input price")


class Budget(Strict):
    """`budget:` a hard ceiling on what the whole experiment spends, enforced across every
    worker by a ledger in Redis (core.store.ledger). Agent and judge spend are capped apart."""

    agent_usd: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="USD the agents under test may spend"
    )
    judge_usd: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="USD the judge may spend"
    )
    prior_usd: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="projected agent cost of a run before any run of its tier x scenario "
        "has finished (default: the most a finished run of the experiment cost, else the "
        "run's limits.max_cost_usd, else 0)",
    )
    judge_prior_usd: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="the same for the judge's cost of a run"
    )

    @model_validator(mode="after")
    def _some_ceiling(self) -> Budget:
        if self.agent_usd is None and self.judge_usd is None:
            raise ValueError("`budget` needs `agent_usd`, `judge_usd` or both")
        return self
