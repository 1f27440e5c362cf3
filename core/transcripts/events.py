"""events.jsonl: the runner's own transcript contract (README, "matrix.yaml").

    {"type":"llm_call","input_tokens":1200,"output_tokens":80,"latency_ms":900,"tool_calls":1,"model":"m"}
    {"type":"tool_call","id":"c1","command":"my-tool create --title x"}
    {"type":"tool_result","id":"c1","exit_code":0}
    {"type":"component","component":"TOOL_SCHEMA","tokens":5400}
    {"type":"message","role":"assistant","text":"Created the three notes."}

`llm_call` may also carry `cache_read_tokens` / `cache_write_tokens` (kept apart from
`input_tokens`, as in LLMCallMetrics). A `tool_result` may come before or after its
`tool_call`; a missing `exit_code` means unknown. Component names are matched
case-insensitively against ComponentType; an unknown name makes the line malformed.
Unknown event types are ignored. Malformed lines (not JSON, no `type`, wrong field
types, a negative figure, or one beyond its ceiling: a token count or `tool_calls`
above 10**12, a `latency_ms` above a week, core.transcripts.jsonlines) are counted
in `events_file_malformed_lines` and skipped, never fatal.
"""

from __future__ import annotations

from typing import Any

from core.results.transcript import CommandRecord, ComponentTokens, LLMCallMetrics, Transcript
from core.transcripts.formats import AgentOutput, TranscriptFormat, register_format
from core.transcripts.jsonlines import (
    MAX_DURATION_MS,
    MAX_TOKENS,
    JsonObject,
    read_json_lines,
)
from core.transcripts.plain import parse_plain

FORMAT = "events-jsonl"


class _Malformed(ValueError):
    """One event of the wrong shape: counted as malformed by parse_events, never raised
    past it, so not one of core.errors (a caller sees only the count)."""


def parse_events(text: str) -> Transcript:
    lines = read_json_lines(text)
    malformed = lines.malformed
    calls: list[LLMCallMetrics] = []
    commands: list[CommandRecord] = []
    components: list[ComponentTokens] = []
    messages: list[str] = []
    exit_codes: dict[str, int | None] = {}
    for event in lines.objects:
        kind = event.get("type")
        try:
            if kind == "llm_call":
                calls.append(_llm_call(event))
            elif kind == "tool_call":
                commands.append(_tool_call(event))
            elif kind == "tool_result":
                exit_codes[_id(event)] = _exit_code(event)
            elif kind == "component":
                components.append(_component(event))
            elif kind == "message":
                messages.append(f"{_string(event, 'role', 'assistant')}: {_string(event, 'text')}")
            elif not isinstance(kind, str):
                raise _Malformed("no event type")
        except ValueError:  # pydantic's ValidationError is a ValueError too
            malformed += 1
    for command in commands:
        if command.id in exit_codes:
            command.exit_code = exit_codes[command.id]
    return Transcript(
        format=FORMAT,
        llm_calls=calls,
        commands=commands,
        components=components,
        messages=messages,
        model=next((call.model for call in calls if call.model), None),
        events_file_malformed_lines=malformed,
    )


_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "tool_calls")


def _llm_call(event: JsonObject) -> LLMCallMetrics:
    for key in _COUNTS:
        _within(event, key, MAX_TOKENS)
    _within(event, "latency_ms", MAX_DURATION_MS)
    return LLMCallMetrics.model_validate(
        {
            "input_tokens": event.get("input_tokens"),
            "output_tokens": event.get("output_tokens"),
            "cache_read_tokens": event.get("cache_read_tokens", 0),
            "cache_write_tokens": event.get("cache_write_tokens", 0),
            "latency_ms": event.get("latency_ms"),
            "tool_calls_made": event.get("tool_calls", 0),
            "model": event.get("model"),
        }
    )


def _tool_call(event: JsonObject) -> CommandRecord:
    command = _string(event, "command")
    return CommandRecord(command=command, id=_id(event) if "id" in event else None)


def _exit_code(event: JsonObject) -> int | None:
    code: Any = event.get("exit_code")
    if code is None or (isinstance(code, int) and not isinstance(code, bool)):
        return code
    raise _Malformed("exit_code must be an integer or null")


def _component(event: JsonObject) -> ComponentTokens:
    _within(event, "tokens", MAX_TOKENS)
    name = event.get("component")
    if isinstance(name, str):
        name = name.upper()
    return ComponentTokens.model_validate({"component": name, "tokens": event.get("tokens")})


def _within(event: JsonObject, key: str, ceiling: float) -> None:
    """A figure above its ceiling is no call's: pricing and statistics would overflow
    on it (its type and sign are the model's to check)."""
    value = event.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > ceiling:
        raise _Malformed(f"{key} {value} is above {ceiling:g}")


def _id(event: JsonObject) -> str:
    value = event.get("id")
    if isinstance(value, str | int) and not isinstance(value, bool):
        return str(value)
    raise _Malformed("id must be a string or integer")


def _string(event: JsonObject, key: str, default: str | None = None) -> str:
    value = event.get(key, default)
    if not isinstance(value, str):
        raise _Malformed(f"{key} must be a string")
    return value


def _stdout_alone(out: AgentOutput) -> Transcript:
    # No events file: the plain regex fallback over stdout, under this format's name.
    return parse_plain(out.stdout, out.command_pattern).model_copy(update={"format": FORMAT})


register_format(TranscriptFormat(FORMAT, _stdout_alone, events_only=True))
