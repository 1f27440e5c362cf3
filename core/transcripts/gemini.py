"""Gemini CLI: `gemini -p --output-format json` and `--output-format stream-json`.

Checked against the formats of Gemini CLI 0.x as documented in docs/cli/headless.md
(2025-12) and packages/core/src/output/types.ts (fixtures SOURCES.md, section 4).
The traps, and how they are handled:
- `json` prints one object `{response, stats, error?}`. `stats.models[<model>].tokens`
  has `prompt` (cached tokens included), `cached`, `candidates`, `thoughts` and `tool`
  (tool-use prompt tokens); `total` = prompt + candidates + thoughts + tool. Each model
  becomes one aggregate LLM call (there is no per-call usage): input_tokens =
  prompt - cached + tool, cache_read_tokens = cached, output_tokens = candidates +
  thoughts (thinking is billed as output). `api.totalRequests` is the real call count
  and is kept as `reported_llm_calls`. No cost is reported: pricing comes from `pricing:`.
- `stream-json` prints `init`, `message`, `tool_use`, `tool_result`, `error` and a final
  `result{status, stats}`; an event without its distinguishing key (`_STREAM_TYPES`)
  is another CLI's, and a stream of none is `recognised=False`. `stats.input_tokens`
  includes `cached`; the result's stats become one aggregate call, and every
  `tool_use` event (any tool: shell, web search, file edits) is a tool call of it.
  Non-JSON warning lines before the stream are skipped.
- Why one aggregate call, though each round of tool calls is a request of its own:
  the stream tells no request from the next and gives no request's usage. In Gemini
  CLI 0.61.0 the non-interactive loop drops its session's per-request `usage` events
  (`case "usage": break`), and `result.stats` (`convertToStreamStats`) keeps per model
  only `total_tokens`, `input_tokens`, `output_tokens`, `cached` and `input`, and
  `tool_calls`: not the `api.totalRequests` that `json` output has. `tool_id`s name
  tool calls, not requests, and side requests (model routing, next-speaker checks,
  compression) leave no event. Seen against the scripted model server
  (tests/integration/test_real_agent_clis.py): two `streamGenerateContent` requests
  served (1000 in / 50 out with the `run_shell_command` call, then 1200 / 10, "done")
  printed as `message`, `tool_use`, `tool_result`, `message` and one `result` of
  input_tokens 2200, output_tokens 60, tool_calls 1. Each request's usage is only in
  the CLI's chat recording in its home (`~/.gemini/tmp/<project>/chats/session-*.jsonl`,
  `tokens` on each `gemini` message), not in stdout: a `gemini-cli` preset's run
  reads it (`chat_calls`), and its requests replace the session's call where their
  tokens add up to the same. The stream's `output_tokens` is
  the candidates' alone: thinking tokens, which `json` counts, are only inside
  `total_tokens`, not told apart from tool-use prompt tokens there.
- The shell tool (`run_shell_command`) reports no exit code: "Exit Code: N" in the
  tool output gives N, a `tool_result` with status "error" gives 1, otherwise the exit
  is unknown (a failing command still has status "success").
- Errors: `error` in the json object, `result.status` "error", and `error` events of
  severity "error" (warnings are not errors). Quota and rate-limit errors are outages
  (core.transcripts.outage), not the agent's failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.results.transcript import CommandRecord, LLMCallMetrics, Transcript
from core.transcripts.formats import TranscriptFormat, register_format
from core.transcripts.jsonlines import (
    JsonObject,
    as_object,
    count,
    duration,
    read_json_lines,
    text,
)

JSON_FORMAT = "gemini-json"
STREAM_FORMAT = "gemini-stream-json"
# Each stream event type, with a key that sets it apart from the other CLIs' events
# of the same name (Claude's `result` has a `subtype`; Codex's `error` no `severity`).
_STREAM_TYPES = {
    "init": "session_id",
    "message": "role",
    "tool_use": "tool_name",
    "tool_result": "tool_id",
    "error": "severity",
    "result": "stats",
}
_SHELL_TOOLS = {"run_shell_command", "shell", "Bash"}
_EXIT_CODE = re.compile(r"Exit Code: (-?\d+)")


def parse_gemini_json(output: str) -> Transcript:
    lines = read_json_lines(output)
    document = next((o for o in lines.objects if _is_json_result(o)), None)
    if document is None:  # `-o stream-json` output given to the json parser still reads
        transcript = parse_gemini_stream(output)
        return transcript.model_copy(update={"format": JSON_FORMAT})
    stats = as_object(document.get("stats"))
    calls, requests = _model_calls(as_object(stats.get("models")))
    response = text(document, "response")
    transcript = Transcript(
        format=JSON_FORMAT,
        llm_calls=calls,
        messages=[f"assistant: {response}"] if response else [],
        model=next((call.model for call in calls if call.model), None),
        agent_reported_error=_error_text(document.get("error")),
        reported_llm_calls=requests,
        malformed_lines=lines.malformed,
    )
    return transcript


def gemini_format(output: str) -> str | None:
    """Which of Gemini's two formats `output` is in, if either (for `transcript: auto`;
    each parser reads the other's output too, so recognising cannot tell them apart)."""
    objects = read_json_lines(output).objects
    if any(_is_json_result(o) for o in objects):
        return JSON_FORMAT
    return STREAM_FORMAT if _Stream().recognises(objects) else None


def _is_json_result(obj: JsonObject) -> bool:
    return "type" not in obj and ("stats" in obj or "response" in obj or "error" in obj)


def _model_calls(models: JsonObject) -> tuple[list[LLMCallMetrics], int | None]:
    calls, requests = [], None
    for name, entry in models.items():
        tokens = as_object(as_object(entry).get("tokens"))
        cached = count(tokens, "cached")
        calls.append(
            LLMCallMetrics(
                input_tokens=max(count(tokens, "prompt") - cached, 0) + count(tokens, "tool"),
                output_tokens=count(tokens, "candidates") + count(tokens, "thoughts"),
                cache_read_tokens=cached,
                model=name,
            )
        )
        api = as_object(as_object(entry).get("api"))
        if "totalRequests" in api:
            requests = (requests or 0) + count(api, "totalRequests")
    return calls, requests


@dataclass
class _Stream:
    recognised: bool = False
    model: str | None = None
    messages: list[str] = field(default_factory=list)
    commands: dict[str, CommandRecord] = field(default_factory=dict)
    error: str | None = None
    result: JsonObject | None = None
    assistant_text: str = ""
    tool_calls: int = 0

    def recognises(self, events: list[JsonObject]) -> bool:
        return any(self._ours(event) for event in events)

    @staticmethod
    def _ours(event: JsonObject) -> bool:
        kind = event.get("type")
        return isinstance(kind, str) and _STREAM_TYPES.get(kind) in event and "subtype" not in event

    def read(self, event: JsonObject, index: int) -> None:
        kind = event.get("type")
        if not self._ours(event):
            return
        self.recognised = True
        if kind == "init":
            self.model = self.model or text(event, "model")
        elif kind == "message":
            self._message(event)
        elif kind == "tool_use":
            self._flush_text()
            self.tool_calls += 1
            command = text(event.get("parameters"), "command")
            if event.get("tool_name") in _SHELL_TOOLS and command is not None:
                key = text(event, "tool_id") or f"#{index}"
                self.commands[key] = CommandRecord(command=command, id=text(event, "tool_id"))
        elif kind == "tool_result":
            record = self.commands.get(text(event, "tool_id") or "")
            if record is not None:
                record.exit_code = _exit_code(event)
        elif kind == "error" and event.get("severity") != "warning":
            self.error = text(event, "message") or "error"
        elif kind == "result":
            self.result = event

    def _message(self, event: JsonObject) -> None:
        content = text(event, "content") or ""
        if event.get("role") != "assistant":
            return
        if event.get("delta") is True:
            self.assistant_text += content
        else:
            self._flush_text()
            self.assistant_text = content

    def _flush_text(self) -> None:
        if self.assistant_text:
            self.messages.append(f"assistant: {self.assistant_text}")
        self.assistant_text = ""

    def transcript(self, malformed: int) -> Transcript:
        self._flush_text()
        transcript = Transcript(
            format=STREAM_FORMAT,
            commands=list(self.commands.values()),
            messages=self.messages,
            model=self.model,
            agent_reported_error=self.error,
            finished=self.result is not None,
            recognised=self.recognised,
            malformed_lines=malformed,
        )
        if self.result is not None:
            _apply_result(transcript, self.result, self.tool_calls)
        return transcript


def parse_gemini_stream(output: str) -> Transcript:
    lines = read_json_lines(output)
    stream = _Stream()
    for index, event in enumerate(lines.objects):
        stream.read(event, index)
    if not stream.recognised and any(_is_json_result(o) for o in lines.objects):
        return parse_gemini_json(output).model_copy(update={"format": STREAM_FORMAT})
    return stream.transcript(lines.malformed)


def chat_calls(recording: str) -> list[LLMCallMetrics]:
    """Each model request of a session, from the chat recording Gemini CLI keeps in its
    home (`~/.gemini/tmp/<project>/chats/session-*.jsonl`), which stream-json does not
    print: a `gemini` message per response with its `tokens`, written again (same id)
    as it gains its `toolCalls`; the last writing of each counts. Output is the
    candidates' (`output`), as the stream's total counts it."""
    latest: dict[str, JsonObject] = {}
    for record in read_json_lines(recording).objects:
        if record.get("type") == "gemini" and isinstance(record.get("tokens"), dict):
            latest[text(record, "id") or str(len(latest))] = record
    calls = []
    for record in latest.values():
        tokens = as_object(record.get("tokens"))
        cached = count(tokens, "cached")
        tools = record.get("toolCalls")
        calls.append(
            LLMCallMetrics(
                input_tokens=max(count(tokens, "input") - cached, 0) + count(tokens, "tool"),
                output_tokens=count(tokens, "output"),
                cache_read_tokens=cached,
                tool_calls_made=len(tools) if isinstance(tools, list) else 0,
                model=text(record, "model"),
            )
        )
    return calls


def _apply_result(transcript: Transcript, result: JsonObject, tool_calls: int) -> None:
    stats = as_object(result.get("stats"))
    cached = count(stats, "cached")
    total_input = count(stats, "input_tokens")
    uncached = count(stats, "input") if "input" in stats else max(total_input - cached, 0)
    output = count(stats, "output_tokens")
    if uncached or cached or output:
        transcript.llm_calls = [
            LLMCallMetrics(
                input_tokens=uncached,
                output_tokens=output,
                cache_read_tokens=cached,
                tool_calls_made=tool_calls,
                model=transcript.model,
            )
        ]
    transcript.reported_duration_ms = duration(stats, "duration_ms")
    if result.get("status") == "error":
        transcript.agent_reported_error = (
            _error_text(result.get("error")) or transcript.agent_reported_error or "error"
        )


def _exit_code(event: JsonObject) -> int | None:
    for source in (text(event, "output"), text(as_object(event.get("error")), "message")):
        found = _EXIT_CODE.search(source or "")
        if found:
            return int(found.group(1))
    return 1 if event.get("status") == "error" else None


def _error_text(error: object) -> str | None:
    if isinstance(error, str):
        return error
    message = text(error, "message")
    if message is None and isinstance(error, dict):
        return text(error, "type")
    return message


# Each parser reads the other's output too: which one it is, gemini_format tells.
register_format(
    TranscriptFormat(
        JSON_FORMAT,
        lambda out: parse_gemini_json(out.stdout),
        json_stream=True,
        recognises=lambda stdout: gemini_format(stdout) == JSON_FORMAT,
    )
)
register_format(
    TranscriptFormat(
        STREAM_FORMAT,
        lambda out: parse_gemini_stream(out.stdout),
        streaming=True,
        json_stream=True,
        session_calls=chat_calls,
        recognises=lambda stdout: gemini_format(stdout) == STREAM_FORMAT,
    )
)
