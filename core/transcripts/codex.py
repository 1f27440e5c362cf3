"""OpenAI Codex CLI: `codex exec --json`, both protocols it has printed.

Checked against codex-cli 0.46.0 and 0.157.1 captures and the docs/exec.md sample
(thread/turn/item protocol), and against pre-0.44 captures (`{"id", "msg"}` protocol);
fixtures SOURCES.md, section 2.

The thread/turn/item protocol (0.44 onwards), and its traps:
- `turn.completed.usage` is the THREAD's running total: each turn's usage is the
  difference from the last total of the same thread. Where that total starts again
  is decided at the boundaries, not only by a number going down: a `thread.started`
  of another thread, or one that names no thread, starts from zero; the same thread
  started again is an `exec resume` (its total goes on from the earlier run's, as
  0.157 prints); and a total smaller in any field than the last one is a reset too.
- Exec JSON has no per-call usage, so each turn becomes one aggregate LLM call, though
  a turn makes one model request per round of tool calls and one for its answer.
  Nothing in the stream tells one request from the next: its events are
  `thread.started`, `turn.started`, `item.started|updated|completed` (items
  `agent_message`, `reasoning`, `command_execution`, `file_change`, `mcp_tool_call`,
  `web_search`, `todo_list`, `error`), `turn.completed{usage}`, `turn.failed` and
  `error`. Usage comes only on `turn.completed`, summed over the turn's requests;
  item ids (`item_N`) are the items', not the responses' (whose `msg_`/`fc_` ids are
  never printed); and requests that leave no item (a `write_stdin` poll of a running
  command, `view_image`, a retry after "Reconnecting...", a context compaction) show
  nowhere. Rounds of tool items would give a lower bound on the count, with no tokens
  to split among them, so it is not guessed. Seen with codex-cli 0.169.0 against the
  scripted model server (tests/integration/test_real_agent_clis.py): two Responses
  requests served (1000 in / 50 out, the `exec_command` call; then 1200 / 10,
  "done") printed as `agent_message`, `command_execution`, `agent_message` and one
  `turn.completed` of input 2200, output 60. Each request's usage is only in the
  session's rollout file in the CLI's home (`$CODEX_HOME/sessions/**/rollout-*.jsonl`:
  an `event_msg` `token_count` per request, its `last_token_usage`), not in stdout:
  a `codex` preset's run reads it (`rollout_calls`), and its requests replace the
  turns' calls where their tokens add up to the same.
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

The `{"id": ..., "msg": {"type": ...}}` protocol (before openai/codex PR #4525):
- The stream opens with the session's configuration, a bare object
  (`{"model", "provider", "sandbox", ...}`, no `msg`): its `model` is the run's
  model, as `session_configured{model}` is when that event comes instead.
- `exec_command_begin{call_id, command: argv}` pairs with `exec_command_end{call_id,
  exit_code}`; `agent_message{message}` is the assistant's text.
- Tool calls are `exec_command_begin`, `mcp_tool_call_begin`, `patch_apply_begin` and
  `web_search_begin`. A response's tools run before its `token_count`, so each
  `token_count` carries the tool calls since the last one; tool calls still
  uncounted when the task completes (a build that reports usage before running the
  tools) go on the turn's last LLM call. A turn that reported no usage has no LLM
  call to carry them: its commands are still recorded.
- `token_count` is one model response: its flat usage (early builds), or
  `info.last_token_usage` (later builds, which repeat the event with an unchanged
  `info.total_token_usage` on rate-limit updates: a repeat is not a new call).
- `error{message}` ends the task (a missing API key arrives this way);
  `task_complete` ends it normally, its `last_agent_message` the final answer
  (builds that print no `agent_message` event carry the answer only there).

A stream with no event of either protocol is not Codex output: `recognised=False`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from core.results.transcript import CommandRecord, LLMCallMetrics, Transcript
from core.transcripts.formats import TranscriptFormat, register_format
from core.transcripts.jsonlines import JsonObject, count, read_json_lines, text

FORMAT = "codex-exec-json"
_USAGE_KEYS = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens")
_SHELLS = {"bash", "sh", "zsh", "dash"}
_TOOL_ITEMS = {"command_execution", "mcp_tool_call", "file_change", "web_search"}
_LEGACY_TOOL_EVENTS = {
    "exec_command_begin",
    "mcp_tool_call_begin",
    "patch_apply_begin",
    "web_search_begin",
}


_ITEM_EVENTS = {
    "thread.started",
    "turn.started",
    "turn.completed",
    "turn.failed",
    "item.started",
    "item.updated",
    "item.completed",
}


@dataclass
class _Stream:
    thread: object = None  # the current thread's key in last_totals
    last_totals: dict[object, dict[str, int]] = field(default_factory=dict)
    recognised: bool = False
    model: str | None = None
    pending: dict[str, str] = field(default_factory=dict)  # legacy call_id -> command
    last_legacy_total: dict[str, int] | None = None
    calls: list[LLMCallMetrics] = field(default_factory=list)
    commands: list[CommandRecord] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    tools_this_turn: int = 0
    calls_at_turn_start: int = 0
    turn_open: bool = False
    turns_ended: int = 0
    failure: str | None = None
    transient_error: str | None = None

    def read(self, event: JsonObject) -> None:
        kind = event.get("type")
        if isinstance(event.get("msg"), dict) and "type" not in event:
            self._legacy(event["msg"])
            return
        if not isinstance(kind, str):
            if _is_legacy_configuration(event):
                self.model = self.model or text(event, "model")
            return
        if kind in _ITEM_EVENTS or (kind == "error" and set(event) == {"type", "message"}):
            self.recognised = True
        if kind == "thread.started":
            # A thread that names no id cannot be a resumed one: it starts from zero.
            self.thread = text(event, "thread_id") or object()
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
        if isinstance(kind, str) and kind in _TOOL_ITEMS:
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
        totals = _totals(usage)
        last = self.last_totals.get(self.thread)
        self.last_totals[self.thread] = totals
        return _call(_since(totals, last), self.tools_this_turn)

    def _legacy(self, msg: JsonObject) -> None:
        kind = msg.get("type")
        if not isinstance(kind, str):
            return
        self.recognised = True
        if kind == "session_configured":
            self.model = self.model or text(msg, "model")
        elif kind == "task_started":
            self.turn_open, self.tools_this_turn = True, 0
            self.calls_at_turn_start = len(self.calls)
        elif kind == "task_complete":
            self._complete_legacy_task(msg)
        elif kind == "agent_message" and text(msg, "message"):
            self.messages.append(f"assistant: {msg['message']}")
        elif kind in _LEGACY_TOOL_EVENTS:
            self.tools_this_turn += 1
            if kind == "exec_command_begin":
                self.pending[text(msg, "call_id") or ""] = _argv_command(msg.get("command"))
        elif kind == "exec_command_end":
            call_id = text(msg, "call_id") or ""
            command = self.pending.pop(call_id, None) or _argv_command(msg.get("command"))
            code = msg.get("exit_code")
            exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
            self.commands.append(
                CommandRecord(command=unwrap_shell(command), exit_code=exit_code, id=call_id)
            )
        elif kind == "token_count":
            self._legacy_tokens(msg)
        elif kind == "error":
            self.failure = text(msg, "message") or "error"
            self._end_turn()
        elif kind == "stream_error":
            self.transient_error = text(msg, "message") or "stream error"

    def _complete_legacy_task(self, msg: JsonObject) -> None:
        self._end_turn()
        final = text(msg, "last_agent_message")
        if final and not (self.messages and self.messages[-1] == f"assistant: {final}"):
            self.messages.append(f"assistant: {final}")
        if self.tools_this_turn and len(self.calls) > self.calls_at_turn_start:
            last = self.calls[-1]
            self.calls[-1] = last.model_copy(
                update={"tool_calls_made": last.tool_calls_made + self.tools_this_turn}
            )
        self.tools_this_turn = 0

    def _legacy_tokens(self, msg: JsonObject) -> None:
        info = msg.get("info")
        if not isinstance(info, dict):
            if "input_tokens" in msg or "output_tokens" in msg:
                self.calls.append(_call(_totals(msg), self.tools_this_turn))
                self.tools_this_turn = 0
            return
        total = info.get("total_token_usage")
        totals = _totals(total) if isinstance(total, dict) else None
        if totals is not None and totals == self.last_legacy_total:
            return  # the same figures again (a rate-limit update), not a new response
        last = info.get("last_token_usage")
        if isinstance(last, dict):
            usage = _totals(last)
        elif totals is not None:
            usage = _since(totals, self.last_legacy_total)
        else:
            return
        self.last_legacy_total = totals
        self.calls.append(_call(usage, self.tools_this_turn))
        self.tools_this_turn = 0

    def transcript(self, malformed: int) -> Transcript:
        return Transcript(
            format=FORMAT,
            llm_calls=self.calls,
            commands=self.commands,
            messages=self.messages,
            model=self.model,
            agent_reported_error=self.failure or self.transient_error,
            finished=self.turns_ended > 0 and not self.turn_open,
            recognised=self.recognised,
            malformed_lines=malformed,
        )


def parse_codex(output: str) -> Transcript:
    lines = read_json_lines(output)
    stream = _Stream()
    for event in lines.objects:
        stream.read(event)
    return stream.transcript(lines.malformed)


# A rollout's response items that are a tool call the model made.
_ROLLOUT_TOOL_ITEMS = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}


def rollout_calls(text: str) -> list[LLMCallMetrics]:
    """Each model request of a session, from the rollout file Codex keeps in its home
    (`$CODEX_HOME/sessions/**/rollout-*.jsonl`), which `exec --json` does not print:
    an `event_msg` `token_count` per request (the legacy protocol's event, read as
    there), carrying the tool calls its response made (`response_item`s of a call's
    kind) since the one before."""
    stream = _Stream()
    for line in read_json_lines(text).objects:
        payload = line.get("payload")
        if not isinstance(payload, dict):
            continue
        if line.get("type") == "response_item" and payload.get("type") in _ROLLOUT_TOOL_ITEMS:
            stream.tools_this_turn += 1
        elif line.get("type") == "event_msg" and payload.get("type") == "token_count":
            stream._legacy_tokens(payload)
    return stream.calls


def _is_legacy_configuration(event: JsonObject) -> bool:
    """The bare configuration object a pre-#4525 `codex exec --json` prints first."""
    return isinstance(event.get("model"), str) and any(
        key in event for key in ("provider", "sandbox", "approval", "workdir")
    )


def _totals(usage: JsonObject) -> dict[str, int]:
    return {key: count(usage, key) for key in _USAGE_KEYS}


def _since(totals: dict[str, int], last: dict[str, int] | None) -> dict[str, int]:
    """A running total's growth since `last`; a total smaller in any field restarted."""
    if last is None or any(totals[key] < last[key] for key in _USAGE_KEYS):
        return totals
    return {key: totals[key] - last[key] for key in _USAGE_KEYS}


def _call(usage: dict[str, int], tools: int) -> LLMCallMetrics:
    cached, written = usage["cached_input_tokens"], usage["cache_write_input_tokens"]
    return LLMCallMetrics(
        input_tokens=max(usage["input_tokens"] - cached - written, 0),
        output_tokens=usage["output_tokens"],
        cache_read_tokens=cached,
        cache_write_tokens=written,
        tool_calls_made=tools,
    )


def _argv_command(command: object) -> str:
    if isinstance(command, list):
        return shlex.join(str(arg) for arg in command)
    return command if isinstance(command, str) else ""


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


register_format(
    TranscriptFormat(
        FORMAT,
        lambda out: parse_codex(out.stdout),
        streaming=True,
        json_stream=True,
        session_calls=rollout_calls,
        recognises=lambda stdout: parse_codex(stdout).recognised,
    )
)
