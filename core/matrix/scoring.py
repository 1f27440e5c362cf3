"""How a run's checks become its score, and how tiers are compared: a scenario's
`evaluation:`, the top-level `scoring:` (weights and grades) and `report:`."""

from __future__ import annotations

from pydantic import Field, model_validator

from core.matrix.fields import Fraction, Strict, Weight
from core.matrix.gates import Gate
from core.matrix.judging import ScenarioJudge
from core.stats.choices import Correction


class CompositeWeights(Strict):
    """llm-tool-test's optional layered composite (gates / judge / interaction)."""

    gate_weight: Weight = 0.5
    judge_weight: Weight = 0.3
    interaction_weight: Weight = 0.2

    @model_validator(mode="after")
    def _positive_sum(self) -> CompositeWeights:
        if self.gate_weight + self.judge_weight + self.interaction_weight <= 0:
            raise ValueError("composite weights must not all be 0")
        return self


class Evaluation(Strict):
    gates: list[Gate] = Field(default_factory=list)
    judge: ScenarioJudge | None = None
    composite: CompositeWeights | None = None

    @property
    def judge_enabled(self) -> bool:
        return self.judge is not None and self.judge.enabled is True


DEFAULT_GRADES: dict[str, float] = {"A": 0.95, "B": 0.85, "C": 0.75, "D": 0.65, "F": 0.0}


class Scoring(Strict):
    pass_weight: Weight = 0.5
    impl_weight: Weight = 0.5
    grades: dict[str, Fraction] = Field(
        default_factory=lambda: dict(DEFAULT_GRADES),
        description="grade -> lowest composite median that earns it; one grade must start at 0",
    )

    @model_validator(mode="after")
    def _check(self) -> Scoring:
        if self.pass_weight + self.impl_weight <= 0:
            raise ValueError("pass_weight + impl_weight must be > 0")
        if not self.grades or min(self.grades.values()) != 0.0:
            raise ValueError("grades need one grade with threshold 0 so every score gets a grade")
        return self


class ReportOptions(Strict):
    """How reports test tiers against the baseline (docs/MATRIX.md, `report:`)."""

    correction: Correction = Field(
        "holm",
        description="multiple-comparison correction of every test of a report: holm "
        "(family-wise error rate), bh (Benjamini-Hochberg, false discovery rate) or none",
    )
    alpha: float = Field(
        0.05, gt=0.0, lt=1.0, description="significance level of the family of tests"
    )
