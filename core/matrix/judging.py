"""The judge: the model that scores a run against a rubric (top-level `judge:`), the
rubric file, and a scenario's `evaluation: {judge: ...}`; core.evaluation.judge calls it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from core.matrix.fields import (
    FilePath,
    Fraction,
    HttpUrl,
    Identifier,
    PlacedErrors,
    Strict,
    context_of,
    duplicates,
)

# The longest the LLM client waits between two attempts (a Retry-After is capped at
# it); a judge's deadline is reckoned with it, so it is the matrix's to state.
MAX_WAIT_S = 60.0


class Criterion(Strict):
    id: Identifier
    weight: Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
    description: str


class RubricOutput(Strict):
    format: Literal["json"] = "json"
    require_fields: list[str] = Field(
        default_factory=lambda: ["scores", "weighted_score", "confidence", "issues", "highlights"]
    )


class Rubric(Strict):
    """A rubric file (layer 3 of the evaluation layers: the judge)."""

    criteria: list[Criterion] = Field(min_length=1)
    output: RubricOutput = Field(default_factory=RubricOutput)

    @field_validator("criteria")
    @classmethod
    def _unique(cls, criteria: list[Criterion]) -> list[Criterion]:
        PlacedErrors.raise_any(duplicates([c.id for c in criteria], "criterion id"))
        return criteria


def _read_rubric(path: Path, info: ValidationInfo) -> Path:
    # Read by the loading step's reader (context `read_rubric`), so that a rubric's
    # errors stop the matrix where it is read and the model reads no file itself.
    context = context_of(info)
    read = context.get("read_rubric")
    if read is not None and context.get("check_files", True):
        read(path)
    return path


class ScenarioJudge(Strict):
    enabled: bool | Literal["auto"] = Field(
        True, description='"auto": on when the judge API key variable is set at submit time'
    )
    rubric: Annotated[FilePath, AfterValidator(_read_rubric)]
    pass_threshold: Fraction = 0.7


class JudgeConfig(Strict):
    """Where the judge model is reached. The key itself is never in config or results."""

    protocol: Literal["openai", "anthropic"] = "openai"
    base_url: HttpUrl = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini"
    api_key_env: str | None = "OPENAI_API_KEY"
    allow_self_judge: bool = Field(False, description="allow judging with the model under test")
    timeout_s: float = Field(60.0, gt=0, allow_inf_nan=False)
    connect_timeout_s: float = Field(10.0, gt=0, allow_inf_nan=False)
    max_attempts: int = Field(3, ge=1, le=10)
    deadline_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="the whole judge call, every request and wait, ends by this "
        "(default: max_attempts x (connect_timeout_s + timeout_s) + the waits between them)",
    )
    max_transcript_chars: int = Field(24_000, ge=1000)
    max_tokens: int = Field(1024, ge=64)
    repeats: int = Field(
        1,
        ge=1,
        le=20,
        description="judge each run this many times: its score is their mean, their spread "
        'the judge\'s noise (report section "Judge noise")',
    )

    @property
    def deadline(self) -> float:
        """deadline_s, else enough for max_attempts requests that each use their whole
        timeouts, with the longest waits between them."""
        if self.deadline_s is not None:
            return self.deadline_s
        tries = self.max_attempts * (self.connect_timeout_s + self.timeout_s)
        return tries + (self.max_attempts - 1) * MAX_WAIT_S
