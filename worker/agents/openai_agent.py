"""The built-in `openai` agent: a tool-using loop over an OpenAI-compatible endpoint.

The tier gives the system prompt, skill files (appended to the system prompt),
tools (`bash` or none) and `max_turns`. Each turn POSTs the conversation to
`{base_url}/chat/completions`; every `bash` tool call runs in the workspace
through `core.evaluation.shell.run_shell` and its bounded output goes back to the model.

How a run ends (the `AgentOutcome`):
- the model answers without tool calls: exit code 0;
- `max_turns` LLM calls made and the last still asked for tools (those tools are
  run, then the loop stops): exit code 1 and a note on stderr;
- the `timeout_s` deadline passes: `timed_out`, exit code None. No call or command
  starts past it; an LLM call has it as its deadline (connect, headers and body,
  however slowly they arrive) and a command is killed at it;
- a spend limit (`limits:`) crossed by the calls so far, or one more call would pass
  `max_llm_calls`: checked before every call, so the loop stops within one call of
  the limit; exit code None, `stopped` and `limit` say which and at what figure;
- HTTP or protocol errors: `error` set, exit code 1. The LLM calls go through
  core.llm.client: 429/5xx and transport errors are retried twice (Retry-After
  honoured, else back-off with jitter), and a response body past its size cap
  is an error naming the cap.

events.jsonl gets the events of core.transcripts.events: `llm_call` per response (tokens exactly
from `usage`, plus `cumulative_input`), `message` per assistant text,
`tool_call`/`tool_result` per tool call, and `component` events, which are
additive: a component's tokens are the sum of its events. A tool call the loop
cannot run is still recorded as a failed command: an unknown tool gets exit
code 127 (the shell's "command not found"), a `bash` call without a usable
`command` argument exit code 2 (usage error).

The API key is sent only in the Authorization header: it is removed from the
bash tool's environment and redacted from everything written.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from core.errors import DeadlineExceeded, LLMError
from core.evaluation.credentials import RunAs
from core.evaluation.shell import HeadTail, ShellResult, run_shell
from core.evidence.redact import redact as redact_secrets
from core.llm.client import Deadline, LLMHttp, LLMReply
from core.matrix import AgentConfig, Limits, ModelPrice
from core.metrics.limits import crossed, spend_of
from core.results.transcript import AgentOutcome, ComponentType, LLMCallMetrics, Transcript

BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": (
            "Run a bash command in the task's workspace (the current directory). "
            "Returns the exit code, stdout and stderr."
        ),
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the bash command"}},
            "required": ["command"],
        },
    },
}

TOOL_OUTPUT_BYTES = 16_000  # what the model sees of one command's output, both streams
_HTTP_ATTEMPTS = 3
_CUT_MARKER_RESERVE = 64
_UNKNOWN_TOOL_EXIT = 127
_BAD_ARGUMENTS_EXIT = 2

Redact = Callable[[str], str]


def estimate_tokens(text: str) -> int:
    """An ESTIMATE of a text's tokens, ceil(chars / 4): there is no tokenizer dependency.

    Only component breakdowns use it; per-call tokens come exactly from `usage`.
    """
    return math.ceil(len(text) / 4)


# wide: the loop's inputs; its tests call it with each
def run_openai_agent(
    agent: AgentConfig,
    prompt: str,
    workspace: Path,
    events_path: Path,
    env: Mapping[str, str],
    api_key: str | None,
    limits: Limits | None = None,
    price: ModelPrice | None = None,
    user: RunAs | None = None,
) -> AgentOutcome:
    """Run the loop in `workspace`, writing `events_path`; never raises for the run's failures.
    `limits` are checked between LLM calls (`price` prices them)."""
    started_at = time.time()
    redact = functools.partial(redact_secrets, secrets=[api_key])
    log = HeadTail(agent.max_transcript_bytes - _CUT_MARKER_RESERVE)
    with (
        events_path.open("w", encoding="utf-8") as events_file,
        LLMHttp(attempts=_HTTP_ATTEMPTS, headers=_headers(api_key)) as http,
    ):
        events = _Events(events_file, redact)
        loop = _Loop(
            agent, workspace, env, http, events, log, redact, limits or Limits(), price, user
        )
        end = loop.run(prompt)
    return AgentOutcome(
        exit_code=end.exit_code,
        timed_out=end.timed_out,
        error=redact(end.error) if end.error else None,
        stopped=end.limit,
        limit=end.limit,
        stdout=log.text(),
        stderr=redact("".join(f"{note}\n" for note in loop.notes)),
        output_truncated=log.truncated,
        started_at=started_at,
        ended_at=time.time(),
    )


@dataclass(frozen=True)
class _End:
    exit_code: int | None
    timed_out: bool = False
    error: str | None = None
    limit: str | None = None


@dataclass(frozen=True)
class _ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class _Reply:
    message: dict[str, Any]  # the assistant message, as sent back in the conversation
    tool_calls: list[_ToolCall]


# The loop's own signals, caught in _Loop.run and turned into the run's outcome: no
# caller ever sees them, so they stay here rather than in core.errors.
class _DeadlineReached(Exception):
    """The agent's deadline passed; the message, if any, says where."""


class _ApiError(Exception):
    """The API answered with an error or an unreadable response; the message says which."""


class _Loop:
    # wide: one caller, whose values these are: an object would be built for this call alone
    def __init__(
        self,
        agent: AgentConfig,
        workspace: Path,
        env: Mapping[str, str],
        http: LLMHttp,
        events: _Events,
        log: HeadTail,
        redact: Redact,
        limits: Limits,
        price: ModelPrice | None,
        user: RunAs | None,
    ):
        self.agent, self.workspace, self.http, self.user = agent, workspace, http, user
        self.events, self.log, self.redact = events, log, redact
        # The loop's own credential is not the workspace's business.
        self.shell_env = {k: v for k, v in env.items() if k != agent.api_key_env}
        self.deadline = Deadline.after(agent.timeout_s)
        self.url = f"{(agent.base_url or '').rstrip('/')}/chat/completions"
        self.tools = [BASH_TOOL] if "bash" in agent.tools else []
        self.cumulative_input = 0
        self.notes: list[str] = []
        self.limits, self.price = limits, price
        self.calls: list[LLMCallMetrics] = []

    def run(self, prompt: str) -> _End:
        try:
            messages = self._opening(prompt)
        except (OSError, UnicodeDecodeError) as exc:
            return self._fail(f"cannot read a system prompt or skill file: {exc}")
        try:
            for turn in range(1, self.agent.max_turns + 1):
                if (limit := self._limit_before_call()) is not None:
                    self.notes.append(f"stopped: {limit}")
                    return _End(exit_code=None, limit=limit)
                reply = self._call(messages, turn)
                messages.append(reply.message)
                if not reply.tool_calls:
                    return _End(exit_code=0)
                for call in reply.tool_calls:
                    messages.append(self._run_tool(call))
        except _DeadlineReached as exc:
            where = f" during an LLM call ({exc})" if str(exc) else ""
            self.notes.append(f"agent timeout: {self.agent.timeout_s:g}s deadline reached{where}")
            return _End(exit_code=None, timed_out=True)
        except _ApiError as exc:
            return self._fail(str(exc))
        self.notes.append(
            f"stopped: max_turns={self.agent.max_turns} LLM calls made without a final answer"
        )
        return _End(exit_code=1)

    def _limit_before_call(self) -> str | None:
        """A limit the calls so far crossed, or one more call would (max_llm_calls)."""
        spent = spend_of(Transcript(format="events-jsonl", llm_calls=self.calls), self.price)
        if (limit := crossed(self.limits, spent)) is not None:
            return limit
        most = self.limits.max_llm_calls
        if most is not None and len(self.calls) >= most:
            return f"limit max_llm_calls {most} reached: {len(self.calls)} LLM calls"
        return None

    def _fail(self, error: str) -> _End:
        self.notes.append(f"error: {error}")
        self._say(f"[error] {error}\n")
        return _End(exit_code=1, error=error)

    def _say(self, text: str) -> None:
        """Add to the readable log (the outcome's stdout)."""
        self.log.add(self.redact(text))

    def _opening(self, prompt: str) -> list[dict[str, Any]]:
        """The first two messages; records the static components."""
        agent = self.agent
        system = agent.system_prompt or ""
        if agent.system_prompt_file is not None:
            system = agent.system_prompt_file.read_text(encoding="utf-8")
        skills = [path.read_text(encoding="utf-8") for path in agent.skills]
        if system:
            self._component(ComponentType.SYSTEM_PROMPT, system)
        for skill in skills:
            self._component(ComponentType.SKILL_PROMPT, skill)
        if self.tools:
            self._component(ComponentType.TOOL_SCHEMA, json.dumps(self.tools))
        system_text = "\n\n".join(part for part in [system, *skills] if part)
        messages = [{"role": "system", "content": system_text}] if system_text else []
        return [*messages, {"role": "user", "content": prompt}]

    def _component(self, component: ComponentType, text: str) -> None:
        self.events.write(type="component", component=component.value, tokens=estimate_tokens(text))

    # --- the LLM call ------------------------------------------------------------

    def _call(self, messages: list[dict[str, Any]], turn: int) -> _Reply:
        body: dict[str, Any] = {"model": self.agent.model, "messages": messages}
        if self.tools:
            body["tools"] = self.tools
        response = self._post(body)
        try:
            payload = response.json()
            return self._record(payload, response.latency_ms, turn)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            excerpt = response.text[:300]
            raise _ApiError(f"protocol error: unexpected response ({exc!r}): {excerpt}") from None

    def _post(self, body: dict[str, Any]) -> LLMReply:
        """The successful response, within the agent's deadline."""
        self._remaining()  # no call starts past the deadline
        try:
            return self.http.post(self.url, body, deadline=self.deadline, on_retry=self._retrying)
        except DeadlineExceeded as exc:
            raise _DeadlineReached(str(exc)) from None
        except LLMError as exc:
            raise _ApiError(f"LLM call to {self.url} failed: {exc}") from None

    def _retrying(self, problem: str, wait_s: float) -> None:
        self.notes.append(f"retrying in {wait_s:.1f}s after {problem}")

    def _record(self, payload: dict[str, Any], latency_ms: float, turn: int) -> _Reply:
        """Parse one chat completion and write its llm_call and message events."""
        message = payload["choices"][0]["message"]
        text = message.get("content") or ""
        raw_calls = message.get("tool_calls") or []
        calls = [
            _ToolCall(
                id=str(raw.get("id") or f"call_{turn}_{index}"),
                name=str(raw["function"]["name"]),
                arguments=str(raw["function"].get("arguments") or ""),
            )
            for index, raw in enumerate(raw_calls)
        ]
        # Tokens exactly as `usage` says (prompt_tokens includes any cached prefix, so
        # cache reads are priced as input); a server that reports no usage gets 0.
        usage = payload.get("usage") or {}
        input_tokens = int(usage.get("prompt_tokens") or 0)
        output_tokens = int(usage.get("completion_tokens") or 0)
        self.cumulative_input += input_tokens
        self.calls.append(LLMCallMetrics(input_tokens=input_tokens, output_tokens=output_tokens))
        self.events.write(
            type="llm_call",
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            latency_ms=round(latency_ms, 3),
            tool_calls=len(calls),
            cumulative_input=self.cumulative_input,
            # The requested model, not the served snapshot name: it is what pricing knows.
            model=self.agent.model,
        )
        if text:
            self.events.write(type="message", role="assistant", text=text)
            self._say(f"[assistant] {text}\n")
        sent: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if calls:
            sent["tool_calls"] = [_wire_tool_call(call) for call in calls]
        return _Reply(message=sent, tool_calls=calls)

    # --- tools ---------------------------------------------------------------------

    def _run_tool(self, call: _ToolCall) -> dict[str, Any]:
        """Run one tool call, record it, and return the tool message for the conversation."""
        self._component(ComponentType.TOOL_CALL, call.name + call.arguments)
        command = _bash_command(call) if call.name == "bash" and self.tools else None
        if command is None:
            return self._refuse(call)
        timeout_s = self._remaining()
        self.events.write(type="tool_call", id=call.id, command=command)
        self._say(f"$ {command}\n")
        result = run_shell(
            command,
            self.workspace,
            timeout_s=timeout_s,
            env=self.shell_env,
            max_output_bytes=TOOL_OUTPUT_BYTES // 2,
            user=self.user,
        )
        self.events.write(type="tool_result", id=call.id, exit_code=result.exit_code)
        output = _shell_output(result)
        self._say(f"{output}\n")
        if result.timed_out:
            raise _DeadlineReached
        return self._tool_message(call, output)

    def _refuse(self, call: _ToolCall) -> dict[str, Any]:
        """A call the loop cannot run: recorded as a failed command, explained to the model."""
        if call.name == "bash" and self.tools:
            exit_code = _BAD_ARGUMENTS_EXIT
            error = 'the bash tool needs JSON arguments like {"command": "ls"}'
            error += f"; got {call.arguments[:200]!r}"
        else:
            exit_code = _UNKNOWN_TOOL_EXIT
            available = ", ".join(self.agent.tools) or "none"
            error = f"unknown tool {call.name!r}; available tools: {available}"
        self.events.write(type="tool_call", id=call.id, command=f"{call.name} {call.arguments}")
        self.events.write(type="tool_result", id=call.id, exit_code=exit_code, error=error)
        self._say(f"[tool {call.name}] {call.arguments}\n[error] {error}\n")
        return self._tool_message(call, f"error: {error}")

    def _tool_message(self, call: _ToolCall, content: str) -> dict[str, Any]:
        self._component(ComponentType.TOOL_RESPONSE, content)
        return {"role": "tool", "tool_call_id": call.id, "content": content}

    # --- the deadline --------------------------------------------------------------

    def _remaining(self) -> float:
        """Seconds left before the deadline; past it, the run ends as timed out."""
        left = self.deadline.left()
        if left <= 0:
            raise _DeadlineReached
        return left


def _wire_tool_call(call: _ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _bash_command(call: _ToolCall) -> str | None:
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        return None
    command = arguments.get("command") if isinstance(arguments, dict) else None
    return command if isinstance(command, str) and command.strip() else None


def _shell_output(result: ShellResult) -> str:
    """What the model (and the log) sees of a command: status line, then both streams."""
    if result.error is not None:
        status = f"[could not start: {result.error}]"
    elif result.timed_out:
        status = "[killed: the agent's deadline was reached]"
    else:
        status = f"[exit code {result.exit_code}]"
    parts = [result.stdout.rstrip("\n")] if result.stdout else []
    if result.stderr:
        parts.append(f"[stderr]\n{result.stderr.rstrip()}")
    return "\n".join([*parts, status])


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class _Events:
    """events.jsonl, one flushed line per event so a killed worker still leaves them."""

    def __init__(self, file: IO[str], redact: Redact):
        self.file, self.redact = file, redact

    def write(self, **event: Any) -> None:
        self.file.write(self.redact(json.dumps(event, ensure_ascii=False)) + "\n")
        self.file.flush()
