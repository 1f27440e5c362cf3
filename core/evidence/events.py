"""A run's parsed events as the evidence keeps them: compact dicts in the order the
agent most likely took its steps (README, "Evidence").

Parsers keep LLM calls and commands apart, not interleaved; an LLM call says how
many tool calls it made, so each call is followed by that many of the commands,
in order. Commands beyond the calls' counts follow the last call; the messages
come last, the final one last of all.

    {"type": "llm_call", "input_tokens": 1200, "output_tokens": 80, "tool_calls": 1}
    {"type": "tool_call", "command": "my-tool create --title x", "exit_code": 0}
    {"type": "message", "text": "assistant: Created the three notes."}
"""

from __future__ import annotations

from typing import Any

from core.results.transcript import CommandRecord, LLMCallMetrics, Transcript


def compact_events(transcript: Transcript) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    commands = iter(transcript.commands)
    for call in transcript.llm_calls:
        events.append(_llm_call(call))
        for _, command in zip(range(call.tool_calls_made), commands, strict=False):
            events.append(_tool_call(command))
    events.extend(_tool_call(command) for command in commands)
    events.extend({"type": "message", "text": text} for text in transcript.messages)
    return events


def _llm_call(call: LLMCallMetrics) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "llm_call",
        "input_tokens": call.input_tokens,
        "output_tokens": call.output_tokens,
    }
    optional = {
        "cache_read_tokens": call.cache_read_tokens,
        "cache_write_tokens": call.cache_write_tokens,
        "tool_calls": call.tool_calls_made,
        "latency_ms": call.latency_ms,
        "model": call.model,
    }
    event.update({name: value for name, value in optional.items() if value})
    return event


def _tool_call(command: CommandRecord) -> dict[str, Any]:
    return {"type": "tool_call", "command": command.command, "exit_code": command.exit_code}
