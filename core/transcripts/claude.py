"""Claude Code: `claude -p --output-format stream-json --verbose`, and `--output-format json`.

The traps, and how they are handled (fixtures SOURCES.md, section 1):
- One API call is one distinct `message.id` (then `request_id`, then `uuid`) over the
  WHOLE stream: 2.x prints each content block as its own, non-adjacent line with a
  copied `usage`. Copies that disagree (2.x: a thinking block's line first, then the
  text/tool_use lines with the cache counts filled in) keep the max of EACH usage field,
  so no cache-read or cache-write token of the call is lost.
- `input_tokens`, `cache_creation_input_tokens` and `cache_read_input_tokens` are
  disjoint: they map to input_tokens, cache_write_tokens and cache_read_tokens.
- Per-line `output_tokens` is a placeholder (the message_start value; 1 from 2.1.332
  against the scripted model server, whose requests are otherwise one call each, by
  `message.id`, with their input exact). The calls keep
  it, and the `result` line's `usage.output_tokens` becomes `reported_output_tokens`,
  the authoritative total that cost and run totals use. The session log in the
  CLI's home has each response's final usage: a `claude-code` preset's run reads it
  (`session_calls`) for exact calls. Likewise `total_cost_usd`
  (older builds: `cost_usd`) is the reported cost; usage is never re-priced here.
- Subagent calls (`parent_tool_use_id` set) are real calls and counted; the Agent
  tool's own usage summaries are not added on top.
- A `<synthetic>` assistant line is an API error, not a call.
- Bash `tool_use` pairs with the later `tool_result` of the same id. No numeric exit
  code exists: `is_error` true -> N from a leading "Exit code N", else 1. `is_error`
  false/absent -> 0, unless the line's `tool_use_result` has a
  `returnCodeInterpretation`: Claude Code treats exit 1 of grep, rg, find, diff and
  test as no error and names it ("No matches found", "Files differ", ...), so the
  command exited 1 (N when the text says "exit code N"). A background Bash
  (`run_in_background`) returns at once, so its immediate result says nothing: its
  exit comes only from `system/task_notification` ("... completed (exit code N)"),
  and stays unknown when the stream has none.
- No `result` line: the process was killed or crashed (`finished=False`); cost and
  duration stay unknown.
- A stream with no `system`/`result` line with a `subtype` and no `assistant`/`user`
  line with a `message` is not Claude Code output: `recognised=False`.
- Checked against Claude Code 2.1.3, 2.1.7, 2.1.270 and 2.1.284 captures (fixtures SOURCES.md).
- `--output-format json` prints only the result object (or an array of all
  messages). With no assistant lines, the result's session usage becomes one
  aggregate call, as Gemini CLI runs have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.results.transcript import CommandRecord, LLMCallMetrics, Transcript
from core.transcripts.formats import TranscriptFormat, register_format
from core.transcripts.jsonlines import (
    JsonObject,
    as_object,
    cost,
    count,
    duration,
    read_json_lines,
    text,
)

FORMAT = "claude-stream-json"
_EXIT_CODE = re.compile(r"^(?:Error: )?Exit code (\d+)")
_BACKGROUND_EXIT = re.compile(r"\(exit code (\d+)\)")
_INTERPRETED_EXIT = re.compile(r"exit code (\d+)", re.IGNORECASE)


_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def session_calls(log: str) -> list[LLMCallMetrics]:
    """Each model request, from the session log Claude Code keeps in its home
    (`~/.claude/projects/<folder>/<session>.jsonl`): its `assistant` records are
    stream-json's lines, but with each response's final usage, where stream-json's
    carry the output count of the response's start (1)."""
    stream = _Stream()
    for index, line in enumerate(read_json_lines(log).objects):
        if line.get("type") == "assistant":
            stream._assistant(line, index)
    return [call.metrics() for call in stream.calls.values()]


@dataclass
class _Call:
    model: str | None
    usage: dict[str, int] = field(default_factory=dict)
    tool_use_ids: set[str] = field(default_factory=set)

    def merge(self, usage: JsonObject) -> None:
        for key in _USAGE_KEYS:
            self.usage[key] = max(self.usage.get(key, 0), count(usage, key))

    def metrics(self) -> LLMCallMetrics:
        return LLMCallMetrics(
            input_tokens=self.usage.get("input_tokens", 0),
            output_tokens=self.usage.get("output_tokens", 0),
            cache_read_tokens=self.usage.get("cache_read_input_tokens", 0),
            cache_write_tokens=self.usage.get("cache_creation_input_tokens", 0),
            tool_calls_made=len(self.tool_use_ids),
            model=self.model,
        )


@dataclass
class _Stream:
    calls: dict[str, _Call] = field(default_factory=dict)
    commands: dict[str, CommandRecord] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)
    background: set[str] = field(default_factory=set)
    background_exit_codes: dict[str, int] = field(default_factory=dict)
    recognised: bool = False
    messages: list[str] = field(default_factory=list)
    model: str | None = None
    api_error: str | None = None
    result: JsonObject | None = None

    def read(self, line: JsonObject, index: int) -> None:
        kind, subtype = line.get("type"), line.get("subtype")
        if (kind in ("system", "result") and "subtype" in line) or (
            kind in ("assistant", "user") and isinstance(line.get("message"), dict)
        ):
            self.recognised = True  # Gemini prints `result` lines too, without a subtype
        if kind == "assistant":
            self._assistant(line, index)
        elif kind == "user":
            self._user(line)
        elif kind == "result":
            self.result = line
        elif kind == "system" and subtype == "init":
            self.model = self.model or text(line, "model")
        elif kind == "system" and subtype == "task_notification":
            self._task_notification(line)

    def _assistant(self, line: JsonObject, index: int) -> None:
        message = line.get("message")
        if not isinstance(message, dict):
            return
        if message.get("model") == "<synthetic>" or line.get("is_api_error_message"):
            self.api_error = _error_text(line) or _content_text(message.get("content"))
            return
        key = text(message, "id") or text(line, "request_id") or text(line, "uuid") or f"#{index}"
        call = self.calls.get(key)
        if call is None:
            call = self.calls[key] = _Call(text(message, "model"))
        call.merge(as_object(message.get("usage")))
        role = "assistant" if line.get("parent_tool_use_id") is None else "subagent"
        for block in _blocks(message.get("content")):
            if block.get("type") == "text" and text(block, "text"):
                self.messages.append(f"{role}: {block['text']}")
            elif block.get("type") == "tool_use" and (tool_id := text(block, "id")):
                call.tool_use_ids.add(tool_id)
                command = text(block.get("input"), "command")
                if block.get("name") == "Bash" and command is not None:
                    self.commands.setdefault(tool_id, CommandRecord(command=command, id=tool_id))
                    if as_object(block.get("input")).get("run_in_background") is True:
                        self.background.add(tool_id)

    def _user(self, line: JsonObject) -> None:
        for block in _blocks(as_object(line.get("message")).get("content")):
            tool_id = text(block, "tool_use_id")
            if block.get("type") != "tool_result" or tool_id is None:
                continue
            raw = line.get("tool_use_result")
            if block.get("is_error") is not True:
                self.exit_codes[tool_id] = _interpreted_exit(raw)
                continue
            candidates = [_content_text(block.get("content")), raw if isinstance(raw, str) else ""]
            found = next((m for c in candidates if (m := _EXIT_CODE.match(c.strip()))), None)
            self.exit_codes[tool_id] = int(found.group(1)) if found else 1

    def _task_notification(self, line: JsonObject) -> None:
        tool_id = text(line, "tool_use_id")
        found = _BACKGROUND_EXIT.search(text(line, "summary") or "")
        if tool_id is not None and found:
            self.background_exit_codes[tool_id] = int(found.group(1))

    def transcript(self, malformed: int) -> Transcript:
        for tool_id, command in self.commands.items():
            exits = self.background_exit_codes if tool_id in self.background else self.exit_codes
            command.exit_code = exits.get(tool_id)
        calls = [call.metrics() for call in self.calls.values()]
        model = self.model or next((call.model for call in calls if call.model), None)
        transcript = Transcript(
            format=FORMAT,
            llm_calls=calls,
            commands=list(self.commands.values()),
            messages=self.messages,
            model=model,
            agent_reported_error=self.api_error,
            finished=self.result is not None,
            recognised=self.recognised,
            malformed_lines=malformed,
        )
        if self.result is not None:
            _apply_result(transcript, self.result)
        return transcript


def parse_claude(output: str) -> Transcript:
    lines = read_json_lines(output)
    stream = _Stream()
    for index, line in enumerate(lines.objects):
        stream.read(line, index)
    return stream.transcript(lines.malformed)


def _apply_result(transcript: Transcript, result: JsonObject) -> None:
    usage = result.get("usage")
    if isinstance(usage, dict):
        transcript.reported_input_tokens = count(usage, "input_tokens")
        transcript.reported_output_tokens = count(usage, "output_tokens")
        transcript.reported_cache_read_tokens = count(usage, "cache_read_input_tokens")
        transcript.reported_cache_write_tokens = count(usage, "cache_creation_input_tokens")
        if not transcript.llm_calls and any(count(usage, key) for key in usage):
            aggregate = _Call(transcript.model)
            aggregate.merge(usage)
            transcript.llm_calls = [aggregate.metrics()]
    spent = cost(result, "total_cost_usd")
    transcript.reported_cost_usd = spent if spent is not None else cost(result, "cost_usd")
    transcript.reported_duration_ms = duration(result, "duration_ms")
    failed = result.get("is_error")
    if failed is True or (failed is None and result.get("subtype") not in (None, "success")):
        transcript.agent_reported_error = (
            text(result, "result")
            or "; ".join(e for e in result.get("errors") or [] if isinstance(e, str))
            or text(result, "terminal_reason")
            or text(result, "subtype")
            or "error"
        )
    final = text(result, "result")
    if final and not (transcript.messages and transcript.messages[-1].endswith(final)):
        transcript.messages.append(f"result: {final}")


def _interpreted_exit(result: object) -> int:
    """The exit of a Bash call Claude Code reported as no error: 0, unless it named the
    non-zero exit it let pass (its `returnCodeInterpretation`)."""
    interpretation = text(result, "returnCodeInterpretation")
    if not interpretation:
        return 0
    found = _INTERPRETED_EXIT.search(interpretation)
    return int(found.group(1)) if found else 1


def _blocks(content: object) -> list[JsonObject]:
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict)]


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(text(block, "text") or "" for block in _blocks(content))


def _error_text(line: JsonObject) -> str | None:
    error = line.get("error")
    return error if isinstance(error, str) else text(error, "message")


register_format(
    TranscriptFormat(
        FORMAT,
        lambda out: parse_claude(out.stdout),
        streaming=True,
        json_stream=True,
        session_calls=session_calls,
        recognises=lambda stdout: parse_claude(stdout).recognised,
    )
)
