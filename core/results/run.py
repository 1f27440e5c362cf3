"""What a run produces: its spec, its status, the three evaluation layers and the
RunResult stored in Redis (transcripts: core.results.transcript; reports:
core.results.report)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, Strict

from core.results.record import Record
from core.results.transcript import ComponentType, LLMCallMetrics

# How a run's agent was confined (worker.confinement), and what that let it reach.
Isolation = Literal["user", "bwrap", "docker", "none"]
ISOLATIONS: dict[str, str] = {
    "user": "own user: graders read-only, hidden files unreadable, no other process's "
    "environment; the host's network",
    "bwrap": "bwrap: the host's folders read-only, graders read-only, hidden files masked; "
    "network only for an agent CLI's model or a task allowing it",
    "docker": "docker: a container of its own; graders and hidden files stay on the worker",
    "none": "unconfined: the agent could reach the worker's files, processes and local "
    "services; graders verified by hash",
}


class RunStatus(StrEnum):
    """A run's outcome: one closed set, each with one meaning (README, "Outcomes").

    Only `completed` runs can pass. completed, agent_error, timeout and limit are
    the agent's own results and enter the statistics; infra_error, cancelled and
    not_run do not, and are counted apart under their own names.
    """

    completed = "completed"  # the agent finished by itself with exit code 0
    agent_error = "agent_error"  # it ran and failed: non-zero exit, its own error, a limit hit
    timeout = "timeout"  # killed at the agent timeout: a real, failed result
    limit = "limit"  # it spent past a `limits:` figure (stopped there when watched)
    tampered = "tampered"  # the files evaluation reads were changed by the run: a failure
    infra_error = "infra_error"  # not the agent's doing: setup, the agent could not start,
    # the judge unreachable, the attempt cap
    # The experiment was cancelled before this run started, or after a delivery of it was
    # interrupted: it was not run (again).
    cancelled = "cancelled"
    not_run = "not_run"  # its projected cost did not fit the experiment's budget

    @property
    def is_infra(self) -> bool:
        return self is RunStatus.infra_error

    @property
    def counted(self) -> bool:
        """In the statistics: a result the agent earned."""
        return self in (
            RunStatus.completed,
            RunStatus.agent_error,
            RunStatus.timeout,
            RunStatus.limit,
            RunStatus.tampered,
        )


# How a run that fail-fast kept from starting says so, after its tier's error.
NOT_RUN_NOTE = " (not run: its tier was stopped after its first runs all failed this way)"


# A run's cost_unknown_reason when its agent has a model but its transcript recorded no
# usage at all (no LLM call, no token or cost figure): what it spent is unknown, not 0
# (core.metrics.limits; the reports count these apart too, with what makes them known).
NO_USAGE = (
    "its transcript recorded no token usage (a plain transcript cannot carry it; an "
    "events-jsonl agent must write llm_call events), so what its model spent is unknown"
)


# How a fail reason names the run's failed gates (core.evaluation.evaluate writes it).
GATES_FAILED = "gates failed: "
# How a fail reason says the judge never answered (core.evaluation.evaluate writes it): a
# run that could have passed is then an infrastructure error that `scheduler rejudge`
# restores, with no agent run again.
JUDGE_ERROR = "judge error: "
# How a fail reason says a rejudge or rescore could not redo a run (worker.reevaluate):
# an infrastructure error of that version, which the same command makes again.
REDONE_FAILED = "judging again failed: "

# A run's cost_unknown_reason when nothing of its transcript could be read: nothing read
# is not nothing spent (the reports count these apart from a model without a price).
UNREAD_TRANSCRIPT = (
    "its transcript could not be read (no line of it in its format with figures that are "
    "numbers), so what it spent is unknown"
)


def judge_alone_failed(fail_reason: str | None) -> bool:
    """Whether an infrastructure error is a judge's that did not answer a run whose agent
    and gates ran (`scheduler rejudge` restores it, no agent run again), not a run that
    fail-fast kept from starting after such errors (its agent never ran)."""
    first = fail_reason.splitlines()[0] if fail_reason else ""
    return first.startswith(JUDGE_ERROR) and not first.endswith(NOT_RUN_NOTE)


def error_key(fail_reason: str | None) -> str:
    """An infrastructure error's reason as runs share it: its first line, without
    the fail-fast note, so the runs it stopped count with the ones that stopped it,
    and without the gates that failed besides: a judge that cannot be reached is one
    error whatever each run's gates said (for fail-fast as for the report)."""
    first = fail_reason.splitlines()[0] if fail_reason else "unknown"
    return first.removesuffix(NOT_RUN_NOTE).split(f"; {GATES_FAILED}")[0][:300]


# --- layer 1 ----------------------------------------------------------------------------


class SubcommandStats(Record):
    total: int = 0
    errors: int = 0
    unique: int = 0
    help_invocations: int = 0


# The row of `per_subcommand` that sums the subcommands past its bound (core.metrics.
# interaction): a name no `(\S+)` group captures.
OTHER_SUBCOMMANDS = "(other subcommands)"


class InteractionMetrics(Record):
    """Layer 1 of llm-tool-test's evaluation."""

    total_commands: int = 0
    unique_commands: int = 0
    error_count: int = 0
    retry_count: int = 0
    help_invocations: int = 0
    error_rate: float = 0.0
    retry_rate: float = 0.0
    first_try_success_rate: float = 0.0
    iteration_ratio: float = 0.0
    completed: bool = False
    source: Literal["events", "transcript"] = "events"
    exit_codes_approximate: bool = False
    per_subcommand: dict[str, SubcommandStats] = Field(default_factory=dict)
    subcommands_folded: int = Field(
        0, description=f"distinct subcommands summed in per_subcommand's {OTHER_SUBCOMMANDS!r}"
    )


# --- layer 2 ----------------------------------------------------------------------------


class GateResult(Record):
    gate_type: str
    name: str | None = None
    passed: bool
    message: str
    duration_s: float = 0.0
    details: Any = Field(None, description="JSON a `script` gate printed")


# --- layer 3 ----------------------------------------------------------------------------


# A number the judge answered: a JSON number and finite, never true or "1". Lax pydantic
# would read those as 1.0, and a judge that says `true` has not given a score.
JudgeNumber = Annotated[float, Strict(), Field(allow_inf_nan=False)]


class JudgeResponse(Record):
    """The judge's answer, as llm-tool-test's schema demands. A score's range is the
    rubric's, checked where the answer is read against it (core.evaluation.judge)."""

    model_config = ConfigDict(extra="ignore", ser_json_inf_nan="strings")

    scores: dict[str, JudgeNumber]
    weighted_score: Annotated[JudgeNumber, Field(ge=0.0, le=1.0)]
    confidence: Annotated[JudgeNumber, Field(ge=0.0, le=1.0)]
    issues: list[str]
    highlights: list[str]
    reasons: dict[str, str] = Field(
        default_factory=dict, description="a short reason per criterion (optional in answers)"
    )


class JudgeResult(Record):
    model: str
    response: JudgeResponse | None = None
    weighted_score: float | None = Field(
        None, description="recomputed from scores and rubric weights"
    )
    reported_weighted_score: float | None = Field(None, description="the judge's own figure")
    pass_threshold: float
    passed: bool = False
    attempts: int = 0
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    latency_ms: float | None = None
    repeats: int = Field(
        1, description="judgments asked for (judge.repeats); the score is their mean"
    )
    scores: list[float] = Field(
        default_factory=list, description="the weighted score of each judgment, in order"
    )
    scores_sd: float | None = Field(
        None, description="sample standard deviation of `scores` (repeats > 1): the judge's noise"
    )
    cached: int = Field(0, description="judgments answered from the judgment cache (no request)")


# --- process and token metrics -----------------------------------------------------------


class ProcessMetrics(Record):
    r_prog: float | None = None
    r_prog_simple: float | None = None
    strategic_drift: float | None = None
    strategic_drift_binary: float | None = None
    change_fail_percentage: float | None = None
    pr_revert_rate: float | None = None


class TokenMetrics(Record):
    schema_overhead: int = 0
    skill_tokens: int = 0
    skill_efficiency: float | None = None
    token_efficiency_ratio: float | None = None
    by_component: dict[ComponentType, int] = Field(default_factory=dict)
    cost_by_component: dict[ComponentType, float] = Field(default_factory=dict)
    percentage_by_component: dict[ComponentType, float] = Field(default_factory=dict)


# --- the run ------------------------------------------------------------------------------


class RunSpec(Record):
    """One planned run: what a worker receives (ids only; the matrix lives in Redis)."""

    experiment_id: str
    run_id: str
    tier: str
    scenario: str
    run_index: int = Field(ge=0)
    queue: str | None = None


def cell_specs(
    experiment_id: str, tier: str, scenario: str, indices: Iterable[int], queue: str | None
) -> Iterator[RunSpec]:
    """The runs of one tier x scenario with these run indices; ids depend only on them."""
    for index in indices:
        yield RunSpec(
            experiment_id=experiment_id,
            run_id=f"{experiment_id}:{tier}:{scenario}:{index}",
            tier=tier,
            scenario=scenario,
            run_index=index,
            queue=queue,
        )


class RunResult(Record):
    """Everything one run produced: ProjectScylla's per-run metrics and the three layers."""

    experiment_id: str
    run_id: str
    tier: str
    scenario: str
    run_index: int
    status: RunStatus
    fail_reason: str | None = None
    attempts: int = 1
    worker: str | None = None
    kept_folder: str | None = Field(
        None, description="the run's folder on its worker, kept (`--keep-workspaces`)"
    )
    isolation: Isolation | None = Field(
        None, description="how its agent was confined (ISOLATIONS says what each means)"
    )
    limit: str | None = Field(
        None, description="the `limits:` figure the run went past, and its own figure"
    )
    outage: bool = Field(
        False, description="an infrastructure error because the model provider failed: retried"
    )
    retry_after_s: float | None = Field(
        None, description="the wait the provider asked for before the next attempt"
    )
    outages: list[str] = Field(
        default_factory=list,
        description="the provider outages of this run's deliveries, each retried but the last",
    )

    # outcome and ProjectScylla's per-run metrics
    passed: bool = False
    pass_rate: float = 0.0
    impl_rate: float = 0.0
    composite_score: float = 0.0
    layered_composite: float | None = None
    cost_usd: float | None = Field(None, description="None when the model has no known price")
    cost_unknown_reason: str | None = None
    cost_of_pass: float | None = None
    judge_cost_usd: float | None = None
    duration_seconds: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None

    # tokens and per-call metrics
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    llm_calls: list[LLMCallMetrics] = Field(default_factory=list)
    base_context: int | None = None
    context_growth_avg: float | None = None
    tokens: TokenMetrics = Field(default_factory=TokenMetrics)

    # the three layers
    interaction: InteractionMetrics = Field(default_factory=InteractionMetrics)
    gates: list[GateResult] = Field(default_factory=list)
    gates_passed: int = 0
    gates_total: int = 0
    judge: JudgeResult | None = None
    rewards: dict[str, float] = Field(
        default_factory=dict,
        description="a benchmark task's verifier's rewards by name (`reward` for reward.txt)",
    )
    process: ProcessMetrics | None = None

    # transcript bookkeeping
    transcript_format: str | None = None
    transcript_malformed_lines: int = 0
    transcript_truncated: bool = False
    transcript_unfinished: bool = False
    transcript_unrecognised: bool = Field(
        False, description="not one line of the agent's output was in its transcript format"
    )

    @classmethod
    def of(cls, spec: RunSpec, status: RunStatus, **fields: Any) -> RunResult:
        """The result of `spec`'s run: the run's ids, its status and `fields` (a name
        that is no field is refused, as everywhere in a Record)."""
        return cls(
            experiment_id=spec.experiment_id,
            run_id=spec.run_id,
            tier=spec.tier,
            scenario=spec.scenario,
            run_index=spec.run_index,
            status=status,
            **fields,
        )

    @property
    def is_infra_error(self) -> bool:
        return self.status.is_infra

    def tampered_with(self, path: str) -> RunResult:
        """This run, which changed the files evaluation reads (`path` the first found):
        a failure counted against its agent with no credit, whatever its gates said."""
        return self.model_copy(
            update={
                "status": RunStatus.tampered,
                "fail_reason": f"tampered: {path}",
                "passed": False,
                "pass_rate": 0.0,
                "impl_rate": 0.0,
                "composite_score": 0.0,
                "layered_composite": None if self.layered_composite is None else 0.0,
                # As for any run that did not pass (core.metrics.formulas.cost_of_pass).
                "cost_of_pass": None if self.cost_usd is None else math.inf,
            }
        )

    @property
    def counted(self) -> bool:
        """In the statistics (RunStatus.counted)."""
        return self.status.counted

    @property
    def outcome(self) -> str:
        """What a reader asks first: a completed run `passed` or `failed`; any other
        status is its outcome by itself (it cannot pass)."""
        if self.status is RunStatus.completed:
            return "passed" if self.passed else "failed"
        return self.status.value


# Every RunResult.outcome, in the order a reader scans them: results, then the rest.
OUTCOMES = ("passed", "failed", *(s.value for s in RunStatus if s is not RunStatus.completed))


def outcome(result: RunResult) -> str:
    """A delivery's outcome as its attempt shows it: the status, and why."""
    why = f": {error_key(result.fail_reason)}" if result.fail_reason else ""
    return result.status.value + why
