"""OpenCode: `opencode run --format json`.

The traps, and how they are handled (fixtures SOURCES.md, section 3):
- One `step_finish` is one LLM call (deduplicated by `part.id`); its tokens are per
  step. `input` excludes `cache.read`/`cache.write` (kept as cache tokens), and
  `reasoning` is additive, so output_tokens = output + reasoning.
- `part.cost` is per step: the reported cost is the sum (None when no step has one).
- Latency of a step: its `step_finish` timestamp minus its `step_start` timestamp,
  minus the time its tools ran (`state.time`). Duration: first to last timestamp.
- Commands are `bash` tool parts: exit code `state.metadata.exit` (status stays
  "completed" when it is non-zero). Status "error" (the tool failed or permission was
  refused) counts as failed: the metadata exit when given, else 1. `invalid` and
  other tools are not commands.
- `error` lines (no `part`) are the agent's error: opencode exits 0 after them (1.18.33:
  1). Their message is often only "Unexpected server error. Check server logs for
  details." with a `ref`: the cause is in OpenCode's log, which its preset prints on
  stderr (`--print-logs`; the log file in its home misses the lines written just
  before it exits), on the `message=failed ref=REF error="..."` line. That line
  becomes the error (fixtures SOURCES.md, "A CLI's log on stderr").
- A stream with no such event (a `part`, or an `error` line) is not OpenCode output:
  `recognised=False`. Checked against opencode of Dec 2025, Feb 2026 and 1.18.29.
- There is no final event: the run finished when the last `step_finish` has a
  reason other than "tool-calls" (older builds omit the reason: taken as finished).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.results.transcript import CommandRecord, LLMCallMetrics, Transcript
from core.transcripts.formats import TranscriptFormat, register_format
from core.transcripts.jsonlines import (
    MAX_COST_USD,
    MAX_DURATION_MS,
    JsonObject,
    as_object,
    cost,
    count,
    number,
    read_json_lines,
    text,
    within,
)

FORMAT = "opencode-json"
_EVENTS = {"step_start", "step_finish", "text", "reasoning", "tool_use", "error"}
# OpenCode's log line of the failure an `error` line names by its ref (logfmt: the
# error's value is quoted, its own quotes escaped).
_LOGGED_FAILURE = re.compile(r'level=ERROR .*?message=failed ref=(\S+) error="((?:[^"\\]|\\.)*)"')
# "Model not found: anthropic/claude-sonnet-4-5. Did you mean: claude-sonnet-4-5, ...?":
# OpenCode knows the model but lists no provider for it, which it does when the
# provider's API key is unset.
_UNCONFIGURED = re.compile(r"Model not found: ([^/\s]+)/(\S+)\. Did you mean: ([^?]*)\?")


@dataclass
class _Stream:
    calls: list[LLMCallMetrics] = field(default_factory=list)
    commands: dict[str, CommandRecord] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    seen_steps: set[str] = field(default_factory=set)
    cost: float | None = None
    step_started: float | None = None
    step_tool_ms: float = 0.0
    step_tools: int = 0
    last_reason: str | None = None
    steps_finished: int = 0
    error: str | None = None
    error_ref: str | None = None
    first_timestamp: float | None = None
    last_timestamp: float | None = None
    recognised: bool = False

    def read(self, event: JsonObject, index: int) -> None:
        kind = event.get("type")
        if isinstance(kind, str) and kind in _EVENTS and ("part" in event or "error" in event):
            self.recognised = True
        timestamp = number(event, "timestamp")
        if timestamp is not None:
            if self.first_timestamp is None:
                self.first_timestamp = timestamp
            self.last_timestamp = timestamp
        kind, part = event.get("type"), event.get("part")
        if kind == "error":
            error = as_object(event.get("error"))
            self.error = text(error.get("data"), "message") or text(error, "name") or "error"
            self.error_ref = text(error.get("data"), "ref")
        elif not isinstance(part, dict):
            return
        elif kind == "step_start":
            self.step_started, self.step_tool_ms, self.step_tools = timestamp, 0.0, 0
        elif kind == "tool_use":
            self._tool(part, index)
        elif kind == "text" and text(part, "text"):
            self.messages.append(f"assistant: {part['text']}")
        elif kind == "step_finish":
            self._step_finish(part, timestamp, index)

    def _tool(self, part: JsonObject, index: int) -> None:
        self.step_tools += 1
        state = as_object(part.get("state"))
        times = state.get("time")
        start, end = number(times, "start"), number(times, "end")
        if start is not None and end is not None:
            self.step_tool_ms += max(end - start, 0.0)
        command = text(state.get("input"), "command")
        if part.get("tool") != "bash" or command is None:
            return
        key = text(part, "id") or f"#{index}"
        self.commands[key] = CommandRecord(
            command=command, exit_code=_exit_code(state), id=text(part, "callID")
        )

    def _step_finish(self, part: JsonObject, timestamp: float | None, index: int) -> None:
        key = text(part, "id") or f"#{index}"
        if key in self.seen_steps:
            return
        self.seen_steps.add(key)
        self.steps_finished += 1
        self.last_reason = text(part, "reason")
        tokens = as_object(part.get("tokens"))
        cache = tokens.get("cache")
        latency = None
        if timestamp is not None and self.step_started is not None:
            spent = max(timestamp - self.step_started - self.step_tool_ms, 0.0)
            latency = within(spent, MAX_DURATION_MS)
        self.calls.append(
            LLMCallMetrics(
                input_tokens=count(tokens, "input"),
                output_tokens=count(tokens, "output") + count(tokens, "reasoning"),
                cache_read_tokens=count(cache, "read"),
                cache_write_tokens=count(cache, "write"),
                latency_ms=latency,
                tool_calls_made=self.step_tools,
            )
        )
        step_cost = cost(part, "cost")
        if step_cost is not None:
            self.cost = min((self.cost or 0.0) + step_cost, MAX_COST_USD)
        self.step_started = None

    def logged_error(self, log: str) -> str | None:
        """The error as OpenCode's log states it, when the log has its ref."""
        if self.error is None or self.error_ref is None:
            return self.error
        for ref, cause in _LOGGED_FAILURE.findall(log):
            if ref == self.error_ref:
                cause = cause.replace('\\"', '"')
                return f"{cause}{_unconfigured_hint(cause)} (OpenCode's log, {ref})"
        return self.error

    def transcript(self, malformed: int, log: str) -> Transcript:
        duration = None
        if self.first_timestamp is not None and self.last_timestamp is not None:
            duration = within(self.last_timestamp - self.first_timestamp, MAX_DURATION_MS)
        return Transcript(
            format=FORMAT,
            llm_calls=self.calls,
            commands=list(self.commands.values()),
            messages=self.messages,
            reported_cost_usd=self.cost,
            reported_duration_ms=duration,
            agent_reported_error=self.logged_error(log),
            finished=self.steps_finished > 0 and self.last_reason != "tool-calls",
            recognised=self.recognised,
            malformed_lines=malformed,
        )


def parse_opencode(output: str, log: str = "") -> Transcript:
    """`log`: what OpenCode printed on stderr, its log with `--print-logs`."""
    lines = read_json_lines(output)
    stream = _Stream()
    for index, event in enumerate(lines.objects):
        stream.read(event, index)
    return stream.transcript(lines.malformed, log)


def _unconfigured_hint(cause: str) -> str:
    found = _UNCONFIGURED.search(cause)
    if found is None:
        return ""
    provider, model, suggested = found.groups()
    if model not in (s.strip() for s in suggested.split(",")):
        return ""
    return (
        f": OpenCode knows {model} but has no provider {provider} for it, as when "
        f"{provider}'s API key is not set"
    )


def _exit_code(state: JsonObject) -> int | None:
    exit_code = as_object(state.get("metadata")).get("exit")
    if isinstance(exit_code, int) and not isinstance(exit_code, bool):
        return exit_code
    return 1 if state.get("status") == "error" else None


register_format(
    TranscriptFormat(
        FORMAT,
        lambda out: parse_opencode(out.stdout, out.stderr),
        streaming=True,
        json_stream=True,
        recognises=lambda stdout: parse_opencode(stdout).recognised,
    )
)
