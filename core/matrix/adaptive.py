"""`runs_per_tier:`: a count, or adaptive waves that stop each cell once it has its answer."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag, model_validator

from core.matrix.fields import Strict


class StopWhen(Strict):
    """When a tier x scenario cell of an adaptive matrix has its answer
    (core.analysis.sequential)."""

    width: float | None = Field(
        None,
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description="the cell's always-valid pass-rate interval is narrower than this",
    )
    decided: bool = Field(
        False,
        description="the cell's pass rate is decided better or worse than the baseline's "
        "(the baseline's cells run while another tier's cell of their scenario runs)",
    )

    @model_validator(mode="after")
    def _some_question(self) -> StopWhen:
        if self.width is None and not self.decided:
            raise ValueError("`until` needs `width: W` or `decided: true` (or both: either stops)")
        return self


class AdaptiveRuns(Strict):
    """`runs_per_tier: {min, max, until}`: runs go out in waves; a cell stops once its
    question is answered (a procedure valid however often it is looked at), else at max."""

    min: int = Field(ge=1, le=100_000, description="runs of every cell in the first wave")
    max: int = Field(ge=1, le=100_000, description="the most runs a cell gets")
    wave: int | None = Field(
        None, ge=1, le=100_000, description="runs added to each open cell per wave (default: min)"
    )
    until: StopWhen
    alpha: float = Field(
        0.05, gt=0, lt=0.5, allow_inf_nan=False, description="error rate of each cell's stop"
    )

    @model_validator(mode="after")
    def _ordered(self) -> AdaptiveRuns:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not be above max ({self.max})")
        return self

    @property
    def step(self) -> int:
        return self.wave or self.min


def _runs_kind(value: Any) -> str:
    return "adaptive" if isinstance(value, dict | AdaptiveRuns) else "count"


# A mapping is adaptive and a number a count: an error names the one that was meant.
RunsPerTier = Annotated[
    Annotated[int, Field(ge=1, le=100_000), Tag("count")]
    | Annotated[AdaptiveRuns, Tag("adaptive")],
    Discriminator(_runs_kind),
]
