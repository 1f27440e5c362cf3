"""OpenAI Codex CLI: `codex exec --json` (the thread/turn/item protocol, 0.4x onwards).

The traps, and how they are handled (fixtures SOURCES.md, section 2):
- `turn.completed.usage` is the THREAD's running total (it includes earlier
  `exec resume` runs): each turn's usage is the difference from the last total seen
  for the same `thread_id`. A total smaller than the last one (a reset) is taken whole.
- Exec JSON has no per-call usage, so each turn becomes one aggregate LLM call.
- `cached_input_tokens` (and `cache_write_input_tokens`, when present) are subsets of
  `input_tokens`: the call stores input_tokens = input - cached - cache_write, so a
  price computed as input*in + cache*cache_price never counts a token twice.
  `reasoning_output_tokens` is already inside `output_tokens`.
- Commands come from `item.completed` `command_execution` items only (started and
  completed share an id; ids restart at item_0 per process). The shell wrapper
  (`/bin/bash -lc '...'`, `bash -lc ...`, `zsh -lc`) is stripped to the inner command.
  `exit_code` is used when present; otherwise status "failed" -> 1 and "declined"
  (never ran) -> unknown.
- `turn.failed` is the run's error. A top-level `error` ("Reconnecting... n/5") is
  transient: it only counts when no `turn.completed` follows it.
- The stream is finished when every started turn ended (completed or failed).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from core.results import CommandRecord, LLMCallMetrics, Transcript
from core.transcripts.jsonlines import JsonObject, count, read_json_lines, text

FORMAT = "codex-exec-json"
_USAGE_KEYS = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens")
_SHELLS = {"bash", "sh", "zsh", "dash"}
_TOOL_ITEMS = {"command_execution", "mcp_tool_call", "file_change", "web_search"}


@dataclass
class _Stream:
    thread_id: str | None = None
    last_totals: dict[str | None, dict[str, int]] = field(default_factory=dict)
    calls: list[LLMCallMetrics] = field(default_factory=list)
    commands: list[CommandRecord] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    tools_this_turn: int = 0
    turn_open: bool = False
    turns_ended: int = 0
    failure: str | None = None
    transient_error: str | None = None

    def read(self, event: JsonObject) -> None:
        kind = event.get("type")
        if kind == "thread.started":
            self.thread_id = text(event, "thread_id")
        elif kind == "turn.started":
            self.turn_open, self.tools_this_turn = True, 0
        elif kind == "item.completed" and isinstance(event.get("item"), dict):
            self._item(event["item"])
        elif kind == "turn.completed":
            self._end_turn()
            self.transient_error = None
            if isinstance(event.get("usage"), dict):
                self.calls.append(self._turn_call(event["usage"]))
        elif kind == "turn.failed":
            self._end_turn()
            self.failure = text(event.get("error"), "message") or "turn failed"
        elif kind == "error":
            self.transient_error = text(event, "message") or "error"

    def _end_turn(self) -> None:
        self.turn_open = False
        self.turns_ended += 1

    def _item(self, item: JsonObject) -> None:
        kind = item.get("type", item.get("item_type"))  # `item_type`: right after PR #4525
        if kind in _TOOL_ITEMS:
            self.tools_this_turn += 1
        if kind in ("agent_message", "assistant_message") and text(item, "text"):
            self.messages.append(f"assistant: {item['text']}")
        elif kind == "command_execution" and (command := text(item, "command")) is not None:
            self.commands.append(
                CommandRecord(
                    command=unwrap_shell(command), exit_code=_exit_code(item), id=text(item, "id")
                )
            )

    def _turn_call(self, usage: JsonObject) -> LLMCallMetrics:
        totals = {key: count(usage, key) for key in _USAGE_KEYS}
        last = self.last_totals.get(self.thread_id)
        self.last_totals[self.thread_id] = totals
        if last is not None and all(totals[key] >= last[key] for key in _USAGE_KEYS):
            delta = {key: totals[key] - last[key] for key in _USAGE_KEYS}
        else:
            delta = totals
        cached, written = delta["cached_input_tokens"], delta["cache_write_input_tokens"]
        return LLMCallMetrics(
            input_tokens=max(delta["input_tokens"] - cached - written, 0),
            output_tokens=delta["output_tokens"],
            cache_read_tokens=cached,
            cache_write_tokens=written,
            tool_calls_made=self.tools_this_turn,
        )

    def transcript(self, malformed: int) -> Transcript:
        return Transcript(
            format=FORMAT,
            llm_calls=self.calls,
            commands=self.commands,
            messages=self.messages,
            agent_reported_error=self.failure or self.transient_error,
            finished=self.turns_ended > 0 and not self.turn_open,
            malformed_lines=malformed,
        )


def parse_codex(output: str) -> Transcript:
    lines = read_json_lines(output)
    stream = _Stream()
    for event in lines.objects:
        stream.read(event)
    return stream.transcript(lines.malformed)


def unwrap_shell(command: str) -> str:
    """`bash -lc 'ls -la'` -> `ls -la`; anything that is not such a wrapper is kept."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    if len(argv) < 3 or PurePosixPath(argv[0]).name not in _SHELLS:
        return command
    for position, arg in enumerate(argv[1:-1], start=1):
        if not arg.startswith("-") or arg.startswith("--"):
            return command
        if "c" in arg:
            return argv[position + 1]
    return command


def _exit_code(item: JsonObject) -> int | None:
    code = item.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    return 1 if item.get("status") == "failed" else None
