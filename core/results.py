"""What a run produces: one model per concept, stored in Redis and shown in reports.

Every model serializes non-finite floats as the strings "Infinity"/"NaN"
(DESIGN.md): a cost of pass that never passes is infinite, and bare
`Infinity` is not JSON.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class RunStatus(StrEnum):
    """A run's outcome: one closed set, each with one meaning (README, "Outcomes").

    Only `completed` runs can pass. completed, agent_error, timeout and limit are
    the agent's own results and enter the statistics; infra_error and cancelled do
    not, and are counted apart under their own names.
    """

    completed = "completed"  # the agent finished by itself with exit code 0
    agent_error = "agent_error"  # it ran and failed: non-zero exit, its own error, a limit hit
    timeout = "timeout"  # killed at the agent timeout: a real, failed result
    limit = "limit"  # it spent past a `limits:` figure (stopped there when watched)
    infra_error = "infra_error"  # not the agent's doing: setup, the agent could not start,
    # the judge unreachable, the attempt cap
    cancelled = "cancelled"  # the experiment was cancelled before this run started

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
        )


# How a run that fail-fast kept from starting says so, after its tier's error.
NOT_RUN_NOTE = " (not run: its tier was stopped after its first runs all failed this way)"


def error_key(fail_reason: str | None) -> str:
    """An infrastructure error's reason as runs share it: its first line, without
    the fail-fast note, so the runs it stopped count with the ones that stopped it."""
    first = (fail_reason or "unknown").splitlines()[0] if fail_reason else "unknown"
    return first.removesuffix(NOT_RUN_NOTE)[:300]


class ComponentType(StrEnum):
    """The seed's ten token components (metrics formulas, token tracking)."""

    SYSTEM_PROMPT = "SYSTEM_PROMPT"
    SKILL_PROMPT = "SKILL_PROMPT"
    DOMAIN_EXPERTISE = "DOMAIN_EXPERTISE"
    TOOL_SCHEMA = "TOOL_SCHEMA"
    TOOL_CALL = "TOOL_CALL"
    TOOL_RESPONSE = "TOOL_RESPONSE"
    ORCHESTRATOR = "ORCHESTRATOR"
    SUB_AGENT = "SUB_AGENT"
    MONITOR = "MONITOR"
    EVALUATOR = "EVALUATOR"


# --- the transcript, normalized ---------------------------------------------------------


class LLMCallMetrics(Record):
    """One LLM API call (per-call metrics seed)."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cache_read_tokens: int = Field(0, ge=0)
    cache_write_tokens: int = Field(0, ge=0)
    latency_ms: float | None = Field(None, ge=0)
    tool_calls_made: int = Field(0, ge=0)
    cumulative_input: int = Field(0, ge=0, description="sum of input_tokens of calls 1..N")
    model: str | None = None


class CommandRecord(Record):
    """A shell command the agent ran, with its exit code when known."""

    command: str
    exit_code: int | None = None
    id: str | None = None


class ComponentTokens(Record):
    component: ComponentType
    tokens: int = Field(ge=0)


class Transcript(Record):
    """What a parser makes of an agent's output, whatever the agent CLI."""

    format: str
    llm_calls: list[LLMCallMetrics] = Field(default_factory=list)
    commands: list[CommandRecord] = Field(default_factory=list)
    components: list[ComponentTokens] = Field(default_factory=list)
    messages: list[str] = Field(default_factory=list)
    # Totals the agent CLI reported itself; authoritative over summed calls.
    reported_input_tokens: int | None = None
    reported_output_tokens: int | None = None
    reported_cache_read_tokens: int | None = None
    reported_cache_write_tokens: int | None = None
    reported_cost_usd: float | None = None
    reported_duration_ms: float | None = None
    reported_llm_calls: int | None = Field(
        None, description="LLM calls the CLI counted, when its usage comes only as aggregates"
    )
    model: str | None = None
    agent_reported_error: str | None = None
    finished: bool = Field(True, description="False when the output ends before its final event")
    recognised: bool = Field(
        True, description="False when not one line of the output is in the parser's format"
    )
    outage: str | None = Field(
        None,
        description="the provider's message when the agent's model provider refused or failed "
        "(rate limit, overload, quota, authentication): not the agent's doing",
    )
    retry_after_s: float | None = Field(
        None, description="how long the provider said to wait before trying again"
    )
    structured: bool = Field(True, description="False for the plain regex fallback")
    exit_codes_approximate: bool = False
    malformed_lines: int = 0
    events_file_malformed_lines: int = 0


class AgentOutcome(Record):
    """How the agent process ended, before any evaluation."""

    exit_code: int | None = None
    timed_out: bool = False
    error: str | None = Field(None, description="the agent could not be started or crashed")
    stopped: str | None = Field(
        None,
        description="why evalfleet stopped the agent early (its workspace size, a spend limit)",
    )
    limit: str | None = Field(None, description="the spend limit that stopped it, and the figure")
    stdout: str = ""
    stderr: str = ""
    output_truncated: bool = False
    started_at: float
    ended_at: float

    @property
    def completed(self) -> bool:
        """The seed's completion: exited by itself with code 0."""
        return (
            not self.timed_out
            and self.error is None
            and self.stopped is None
            and self.exit_code == 0
        )


# --- layer 1 ----------------------------------------------------------------------------


class SubcommandStats(Record):
    total: int = 0
    errors: int = 0
    unique: int = 0
    help_invocations: int = 0


class InteractionMetrics(Record):
    """Layer 1 of the evaluation seed."""

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


# --- layer 2 ----------------------------------------------------------------------------


class GateResult(Record):
    gate_type: str
    name: str | None = None
    passed: bool
    message: str
    duration_s: float = 0.0
    details: Any = Field(None, description="JSON a `script` gate printed")


# --- layer 3 ----------------------------------------------------------------------------


class JudgeResponse(Record):
    """The judge's answer, as the seed's schema demands."""

    model_config = ConfigDict(extra="ignore", ser_json_inf_nan="strings")

    scores: dict[str, float]
    weighted_score: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    confidence: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    issues: list[str]
    highlights: list[str]


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


class RunResult(Record):
    """Everything one run produced: per-run metrics of the seeds and the three layers."""

    experiment_id: str
    run_id: str
    tier: str
    scenario: str
    run_index: int
    status: RunStatus
    fail_reason: str | None = None
    attempts: int = 1
    worker: str | None = None
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

    # outcome and the seed's per-run metrics
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
    process: ProcessMetrics | None = None

    # transcript bookkeeping
    transcript_format: str | None = None
    transcript_malformed_lines: int = 0
    transcript_truncated: bool = False
    transcript_unfinished: bool = False
    transcript_unrecognised: bool = Field(
        False, description="not one line of the agent's output was in its transcript format"
    )

    @property
    def is_infra_error(self) -> bool:
        return self.status.is_infra

    @property
    def counted(self) -> bool:
        """In the statistics (RunStatus.counted)."""
        return self.status.counted


# --- reports --------------------------------------------------------------------------------


class Statistics(Record):
    """The seed's aggregate statistics. Empty input gives count 0 and None values."""

    median: float | None = None
    mean: float | None = None
    mode: float | None = None
    min: float | None = None
    max: float | None = None
    std_dev: float | None = None
    count: int = 0


class Interval(Record):
    """A confidence interval and how it was computed (core/significance.py)."""

    low: float
    high: float
    confidence: float = 0.95
    method: str


class Verdict(StrEnum):
    """What the two tests of a Comparison say at its alpha."""

    better = "better"
    worse = "worse"
    mixed = "mixed"  # one test significantly better, the other significantly worse
    no_difference = "no significant difference"
    not_enough_runs = "not enough runs"


class Comparison(Record):
    """A group of runs against a reference group: a tier against the baseline tier, or a
    tier (x scenario) against the same one in an earlier experiment. Only valid runs count.
    Deltas are this group minus the reference."""

    reference: str = Field(description="the baseline tier, or the reference experiment's id")
    runs: int
    passes: int
    reference_runs: int
    reference_passes: int
    pass_rate: float | None = None
    reference_pass_rate: float | None = None
    pass_rate_delta: float | None = None
    fisher_p: float | None = Field(None, description="two-sided Fisher's exact test on passes")
    composite_median: float | None = None
    reference_composite_median: float | None = None
    composite_median_delta: float | None = None
    mann_whitney_u: float | None = Field(None, description="U of this group's composite scores")
    mann_whitney_p: float | None = Field(None, description="two-sided Mann-Whitney U test")
    mann_whitney_method: str | None = Field(None, description="exact or asymptotic")
    prob_superior: float | None = Field(
        None, description="U / (n*m): chance a run here scores above a reference run, ties half"
    )
    alpha: float
    verdict: Verdict


class TierAnalysis(Record):
    """Beyond the seed statistics: intervals, pass@k, flakiness, the test against the baseline."""

    pass_rate_ci: Interval | None = None
    composite_median_ci: Interval | None = None
    pass_at_k: dict[int, float] = Field(
        default_factory=dict, description="1 - C(n-c,k)/C(n,k); a tier averages its scenarios"
    )
    pass_hat_k: dict[int, float] = Field(
        default_factory=dict, description="C(c,k)/C(n,k); a tier averages its scenarios"
    )
    flaky_scenarios: list[str] = Field(
        default_factory=list, description="scenarios where some runs passed and some failed"
    )
    vs_baseline: Comparison | None = None


class TierReport(Record):
    """Per tier (and, under `scenarios`, per tier x scenario): the same shape."""

    runs: int = Field(description="runs with a result, infrastructure errors included")
    errors: int = Field(description="infrastructure errors, kept out of the statistics")
    cancelled: int = Field(0, description="runs cancelled before they started, kept out")
    counted: int = Field(
        0, description="runs in the statistics: completed, agent_error and timeout"
    )

    @model_validator(mode="before")
    @classmethod
    def _counted_of_older_reports(cls, data: Any) -> Any:
        # Reports stored before `counted` existed knew only infrastructure errors.
        if isinstance(data, dict) and "counted" not in data and "runs" in data:
            data = {**data, "counted": data["runs"] - data.get("errors", 0)}
        return data

    passes: int = 0
    grade: str | None = None
    cost_of_pass: float | None = Field(None, description="mean(cost_usd) / mean(pass_rate)")
    cost_unknown_runs: int = 0
    approximate_exit_code_runs: int = Field(
        0, description="runs whose exit codes came from the plain regex fallback (approximate)"
    )
    pass_rate: Statistics = Field(default_factory=Statistics)
    impl_rate: Statistics = Field(default_factory=Statistics)
    cost_usd: Statistics = Field(default_factory=Statistics)
    judge_cost_usd: Statistics = Field(default_factory=Statistics)
    duration_seconds: Statistics = Field(default_factory=Statistics)
    composite_score: Statistics = Field(default_factory=Statistics)
    layered_composite: Statistics | None = None
    cost_of_pass_per_run: Statistics = Field(default_factory=Statistics)
    input_tokens: Statistics = Field(default_factory=Statistics)
    output_tokens: Statistics = Field(default_factory=Statistics)
    base_context: Statistics = Field(default_factory=Statistics)
    context_growth_avg: Statistics = Field(default_factory=Statistics)
    interaction: dict[str, Statistics] = Field(default_factory=dict)
    process: dict[str, Statistics] = Field(default_factory=dict)
    statuses: dict[str, int] = Field(default_factory=dict)
    context_by_call: list[Statistics] = Field(
        default_factory=list, description="input tokens of the i-th LLM call, over the runs"
    )
    analysis: TierAnalysis = Field(default_factory=TierAnalysis)
    scenarios: dict[str, TierReport] = Field(default_factory=dict)


class CrossTierResult(Record):
    baseline: str
    tier_uplift: dict[str, float | None] = Field(default_factory=dict)
    uplift_note: str | None = Field(None, description="why uplift is undefined, when it is")
    pass_rate_variance: float | None = None
    cost_variance: float | None = None
    cost_delta: float | None = None


class ExperimentStatus(StrEnum):
    pending = "pending"
    running = "running"
    complete = "complete"
    cancelled = "cancelled"


class ExperimentInfo(Record):
    id: str
    name: str
    status: ExperimentStatus = ExperimentStatus.pending
    total_runs: int = 0
    completed_runs: int = Field(0, description="runs with a stored result, of any status")
    errors: int = Field(0, description="infrastructure errors")
    cancelled: int = Field(0, description="runs cancelled before they started")
    passes: int = 0
    created_at: float
    finished_at: float | None = None
    tiers: list[str] = Field(default_factory=list)
    scenarios: list[str] = Field(default_factory=list)
    runs_per_tier: int = 0


class ExperimentReport(Record):
    experiment: ExperimentInfo
    tiers: dict[str, TierReport] = Field(default_factory=dict)
    cross_tier: CrossTierResult
    error_reasons: dict[str, int] = Field(
        default_factory=dict,
        description="infrastructure errors by reason (error_key), most common first",
    )
    runs: list[RunResult] | None = Field(None, description="every RunResult, with --runs")


class ExperimentComparison(Record):
    """`scheduler compare A B`: each tier and tier x scenario of B against A."""

    reference: ExperimentInfo
    experiment: ExperimentInfo
    alpha: float
    tiers: dict[str, Comparison] = Field(default_factory=dict)
    scenarios: dict[str, dict[str, Comparison]] = Field(default_factory=dict)
    unmatched_tiers: list[str] = Field(
        default_factory=list, description="tiers in only one of the two experiments"
    )
    regressions: list[str] = Field(
        default_factory=list, description="tiers significantly worse in B (verdict worse or mixed)"
    )
