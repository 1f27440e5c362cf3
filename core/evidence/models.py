"""What a run leaves behind besides its numbers: the evidence behind them (README,
"Evidence"). One RunEvidence per run, stored compressed beside its RunResult
(core.store) and shown by `scheduler show`, the HTML report and rejudge.

Every text here is bounded (an Excerpt keeps head and tail with a cut marker) and
redacted before it is stored."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from core.results.record import Record
from core.results.run import RunResult


class Excerpt(Record):
    """A bounded text: its head and tail, `cut` bytes left out between them."""

    text: str = ""
    total_bytes: int = 0
    cut: int = Field(0, description="bytes left out in the middle (0: the whole text)")

    @classmethod
    def whole(cls, text: str) -> Excerpt:
        """All of `text`, before any cap (core.evidence.caps cuts it)."""
        return cls(text=text, total_bytes=len(text.encode()))


class GateEvidence(Record):
    """What one gate ran and saw (its verdict is in RunResult.gates, same order)."""

    command: str | None = None
    exit_code: int | None = None
    output: Excerpt = Field(default_factory=Excerpt)


class JudgeInputs(Record):
    """What the judge was shown, kept so that rejudge can ask again without the agent."""

    task_prompt: str
    transcript_text: Excerpt
    changes_summary: str = ""


class JudgeCall(Record):
    """One judgment (of K when judge.repeats > 1)."""

    model: str
    prompt: Excerpt
    raw_answer: Excerpt | None = None
    scores: dict[str, float] = Field(default_factory=dict)
    reasons: dict[str, str] = Field(default_factory=dict)
    weighted_score: float | None = None
    error: str | None = None
    cached: bool = False


class JudgeEvidence(Record):
    inputs: JudgeInputs
    calls: list[JudgeCall] = Field(default_factory=list)


class Attempt(Record):
    """One delivery of the run to a worker."""

    worker: str
    started_at: float
    ended_at: float | None = None
    outcome: str = Field(description="the status it recorded, or why it recorded none")


class RunEvidence(Record):
    experiment_id: str
    run_id: str
    stdout: Excerpt = Field(default_factory=Excerpt)
    stderr: Excerpt = Field(default_factory=Excerpt)
    transcript: Excerpt = Field(
        default_factory=Excerpt,
        description="the raw events file the agent wrote (EVALFLEET_EVENTS); an agent CLI "
        "whose transcript is its stdout has it under `stdout`, not twice",
    )
    events: list[dict[str, Any]] = Field(
        default_factory=list, description="the parsed events (LLM calls, tool calls, messages)"
    )
    gates: list[GateEvidence] = Field(default_factory=list)
    verifier: GateEvidence | None = Field(
        None, description="a benchmark task's verifier: its command, exit and output"
    )
    judge: JudgeEvidence | None = None
    changes_summary: str = ""
    patch: Excerpt = Field(default_factory=Excerpt, description="text changes, unified diff")
    phases: dict[str, float] = Field(
        default_factory=dict, description="seconds spent per phase (setup, agent, gates, judge)"
    )
    attempts: list[Attempt] = Field(default_factory=list)
    cuts: list[str] = Field(
        default_factory=list, description="what a cap left out, said once per item"
    )


class RunRecord(Record):
    """One run whole, as `scheduler show --json` prints it: its result (None while it
    has none), its evidence (None when none was stored) and every delivery so far."""

    result: RunResult | None = None
    evidence: RunEvidence | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    version: int = Field(
        1,
        description="the report version whose result `result` is: 1 the run as it ran, 2, "
        "3... a rejudge's or rescore's; the evidence is the run's own, its gates' output "
        "and each judgment's answer those of its first scoring",
    )
