"""What an agent left behind, normalized: its LLM calls, commands, context components
and messages (core/transcripts/ parses each CLI's output into these), and how its
process ended."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from core.results.record import Record


class ComponentType(StrEnum):
    """ProjectScylla's ten token components (its token tracking)."""

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
    """One LLM API call (onetool's per-call metrics)."""

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
        """llm-tool-test's completion: exited by itself with code 0."""
        return (
            not self.timed_out
            and self.error is None
            and self.stopped is None
            and self.exit_code == 0
        )
