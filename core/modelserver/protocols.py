"""The wire protocols the scripted model server speaks, one class each.

Each reads what it needs of a request (how many answers the model already gave in
the conversation, its first user message, whether tools are offered, whether it
streams) and renders a scripted turn or error in its own shape: Anthropic Messages,
OpenAI Chat Completions, OpenAI Responses and Gemini generateContent, streaming
(server-sent events) and not.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from core.modelserver.script import ScriptedError, Turn

NewId = Callable[[str], str]  # prefix -> a fresh id, e.g. "toolu" -> "toolu_7"


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes | list[bytes]  # a list: server-sent events, sent as they come
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def streamed(self) -> bool:
        return isinstance(self.body, list)


def _json(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _sse(events: Iterable[tuple[str | None, dict[str, Any]]]) -> list[bytes]:
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode())
    return out


def _runs(items: Iterable[bool]) -> int:
    """How many runs of consecutive True there are: the model's answers in a history
    where one answer may span several entries (text, then each tool call)."""
    runs, previous = 0, False
    for item in items:
        runs += item and not previous
        previous = item
    return runs


@dataclass(frozen=True)
class _Call:
    name: str
    text: str  # the arguments as JSON text, for the protocols that send text
    arguments: dict[str, Any]  # as an object, for those that send one
    id: str | None


def _calls(turn: Turn) -> list[_Call]:
    calls = []
    for call in turn.tool_calls:
        if isinstance(call.arguments, str):
            text = call.arguments
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError:
                parsed = {}
            arguments = parsed if isinstance(parsed, dict) else {}
        else:
            text, arguments = json.dumps(call.arguments), call.arguments
        calls.append(_Call(call.name, text, arguments, call.id))
    return calls


_REASONS = {
    400: "the request was invalid",
    401: "invalid API key",
    403: "permission denied",
    404: "not found",
    429: "rate limit exceeded",
    500: "internal server error",
    503: "service unavailable",
    529: "overloaded",
}


def error_message(err: ScriptedError) -> str:
    return err.message or f"scripted error: {_REASONS.get(err.status, f'status {err.status}')}"


def _error_headers(err: ScriptedError) -> tuple[tuple[str, str], ...]:
    if err.retry_after is None:
        return ()
    return (("Retry-After", f"{err.retry_after:g}"),)


class Wire:
    """A protocol: how a request is read and a turn or an error is written."""

    name = ""

    def answers(self, body: dict[str, Any]) -> int:
        raise NotImplementedError

    def first_user(self, body: dict[str, Any]) -> Any:
        raise NotImplementedError

    def offers_tools(self, body: dict[str, Any]) -> bool:
        return bool(body.get("tools"))

    def streams(self, path: str, body: dict[str, Any]) -> bool:
        return bool(body.get("stream"))

    def model(self, path: str, body: dict[str, Any]) -> str:
        return str(body.get("model") or "scripted")

    def reply(self, turn: Turn, model: str, stream: bool, new_id: NewId) -> Answer:
        raise NotImplementedError

    def error(self, err: ScriptedError) -> Answer:
        raise NotImplementedError


class Anthropic(Wire):
    """`POST /v1/messages` (Claude Code adds `?beta=true`)."""

    name = "anthropic"
    _TYPES = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }

    def answers(self, body: dict[str, Any]) -> int:
        return _runs(m.get("role") == "assistant" for m in _dicts(body.get("messages")))

    def first_user(self, body: dict[str, Any]) -> Any:
        return next((m for m in _dicts(body.get("messages")) if m.get("role") == "user"), None)

    def reply(self, turn: Turn, model: str, stream: bool, new_id: NewId) -> Answer:
        blocks: list[dict[str, Any]] = []
        texts: list[str] = []  # each block's streamed text: a call's arguments as written
        if turn.text is not None:
            blocks.append({"type": "text", "text": turn.text})
            texts.append(turn.text)
        for call in _calls(turn):
            blocks.append({"type": "tool_use", "id": call.id or new_id("toolu"),
                           "name": call.name, "input": call.arguments})  # fmt: skip
            texts.append(call.text)
        u = turn.usage
        usage = {
            "input_tokens": u.input_tokens,
            "cache_creation_input_tokens": u.cache_write_tokens,
            "cache_read_input_tokens": u.cache_read_tokens,
            "output_tokens": u.output_tokens,
        }
        message = {
            "id": new_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": "tool_use" if turn.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        if not stream:
            return Answer(200, _json(message))
        # As the API streams: message_start carries the input usage and a placeholder
        # output count, message_delta the final output count.
        start = {**message, "content": [], "stop_reason": None,
                 "usage": {**usage, "output_tokens": min(1, u.output_tokens)}}  # fmt: skip
        events: list[tuple[str | None, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start})
        ]
        for index, (block, text) in enumerate(zip(blocks, texts, strict=True)):
            opened: dict[str, Any]
            if block["type"] == "text":
                opened = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": text}
            else:
                opened = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": text}
            events += [
                ("content_block_start",
                 {"type": "content_block_start", "index": index, "content_block": opened}),
                ("content_block_delta",
                 {"type": "content_block_delta", "index": index, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]  # fmt: skip
        events += [
            ("message_delta",
             {"type": "message_delta",
              "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
              "usage": {"output_tokens": u.output_tokens}}),
            ("message_stop", {"type": "message_stop"}),
        ]  # fmt: skip
        return Answer(200, _sse(events))

    def error(self, err: ScriptedError) -> Answer:
        kind = self._TYPES.get(err.status, "api_error")
        body = {"type": "error", "error": {"type": kind, "message": error_message(err)}}
        return Answer(err.status, _json(body), _error_headers(err))


def _openai_error(err: ScriptedError) -> Answer:
    codes = {401: "invalid_api_key", 429: "rate_limit_exceeded"}
    kinds = {401: "invalid_request_error", 429: "requests", 400: "invalid_request_error"}
    body = {
        "error": {
            "message": error_message(err),
            "type": kinds.get(err.status, "server_error"),
            "param": None,
            "code": codes.get(err.status),
        }
    }
    return Answer(err.status, _json(body), _error_headers(err))


class ChatCompletions(Wire):
    """`POST /v1/chat/completions`, OpenAI's and every OpenAI-compatible provider's."""

    name = "openai-chat"

    def answers(self, body: dict[str, Any]) -> int:
        return _runs(m.get("role") == "assistant" for m in _dicts(body.get("messages")))

    def first_user(self, body: dict[str, Any]) -> Any:
        return next((m for m in _dicts(body.get("messages")) if m.get("role") == "user"), None)

    def reply(self, turn: Turn, model: str, stream: bool, new_id: NewId) -> Answer:
        u = turn.usage
        usage = {
            "prompt_tokens": u.input_tokens + u.cache_read_tokens + u.cache_write_tokens,
            "completion_tokens": u.output_tokens,
            "total_tokens": u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
            + u.output_tokens,
            "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens},
        }  # fmt: skip
        calls = [
            {"id": call.id or new_id("call"), "type": "function",
             "function": {"name": call.name, "arguments": call.text}}
            for call in _calls(turn)
        ]  # fmt: skip
        finish = "tool_calls" if calls else "stop"
        head = {"id": new_id("chatcmpl"), "created": int(time.time()), "model": model}
        if not stream:
            message: dict[str, Any] = {"role": "assistant", "content": turn.text}
            if calls:
                message["tool_calls"] = calls
            choice = {"index": 0, "message": message, "finish_reason": finish}
            return Answer(200, _json({**head, "object": "chat.completion", "choices": [choice],
                                      "usage": usage}))  # fmt: skip
        chunk = {**head, "object": "chat.completion.chunk"}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": turn.text or ""}]
        deltas += [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(calls)]
        events: list[tuple[str | None, dict[str, Any]]] = [
            (None, {**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]})
            for d in deltas
        ]
        events.append((None, {**chunk, "choices": [{"index": 0, "delta": {},
                                                    "finish_reason": finish}]}))  # fmt: skip
        # The usage comes in a chunk of its own with no choices, as OpenAI sends it
        # when asked (`stream_options.include_usage`); every client reads it there.
        events.append((None, {**chunk, "choices": [], "usage": usage}))
        return Answer(200, [*_sse(events), b"data: [DONE]\n\n"])

    def error(self, err: ScriptedError) -> Answer:
        return _openai_error(err)


_OWN_ITEMS = {
    "function_call",
    "reasoning",
    "custom_tool_call",
    "local_shell_call",
    "web_search_call",
}


class Responses(Wire):
    """`POST /v1/responses`, OpenAI's Responses API (Codex)."""

    name = "openai-responses"

    def _items(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        given = body.get("input")
        return [{"role": "user", "content": given}] if isinstance(given, str) else _dicts(given)

    def answers(self, body: dict[str, Any]) -> int:
        return _runs(
            i.get("role") == "assistant" or i.get("type") in _OWN_ITEMS for i in self._items(body)
        )

    def first_user(self, body: dict[str, Any]) -> Any:
        return next((i for i in self._items(body) if i.get("role") == "user"), None)

    def reply(self, turn: Turn, model: str, stream: bool, new_id: NewId) -> Answer:
        u = turn.usage
        given = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
        usage = {
            "input_tokens": given,
            "input_tokens_details": {"cached_tokens": u.cache_read_tokens},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": given + u.output_tokens,
        }
        items: list[dict[str, Any]] = []
        if turn.text is not None:
            items.append({"type": "message", "id": new_id("msg"), "status": "completed",
                          "role": "assistant",
                          "content": [{"type": "output_text", "text": turn.text,
                                       "annotations": []}]})  # fmt: skip
        for call in _calls(turn):
            items.append({"type": "function_call", "id": new_id("fc"),
                          "call_id": call.id or new_id("call"), "name": call.name,
                          "arguments": call.text, "status": "completed"})  # fmt: skip
        response = {
            "id": new_id("resp"),
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": model,
            "output": items,
            "usage": usage,
        }
        if not stream:
            return Answer(200, _json(response))
        begun = {**response, "status": "in_progress", "output": [], "usage": None}
        events: list[tuple[str | None, dict[str, Any]]] = [
            ("response.created", {"response": begun}),
            ("response.in_progress", {"response": begun}),
        ]
        for index, item in enumerate(items):
            at = {"output_index": index, "item_id": item["id"]}
            if item["type"] == "message":
                events += [
                    ("response.output_item.added",
                     {"output_index": index, "item": {**item, "status": "in_progress",
                                                      "content": []}}),
                    ("response.content_part.added",
                     {**at, "content_index": 0,
                      "part": {"type": "output_text", "text": "", "annotations": []}}),
                    ("response.output_text.delta", {**at, "content_index": 0,
                                                    "delta": turn.text}),
                    ("response.output_text.done", {**at, "content_index": 0, "text": turn.text}),
                    ("response.content_part.done",
                     {**at, "content_index": 0, "part": item["content"][0]}),
                ]  # fmt: skip
            else:
                events += [
                    ("response.output_item.added",
                     {"output_index": index,
                      "item": {**item, "arguments": "", "status": "in_progress"}}),
                    ("response.function_call_arguments.delta",
                     {**at, "delta": item["arguments"]}),
                    ("response.function_call_arguments.done",
                     {**at, "arguments": item["arguments"]}),
                ]  # fmt: skip
            events.append(("response.output_item.done", {"output_index": index, "item": item}))
        events.append(("response.completed", {"response": response}))
        numbered = [
            (name, {"type": name, "sequence_number": n, **data})
            for n, (name, data) in enumerate(events)
        ]
        return Answer(200, _sse(numbered))

    def error(self, err: ScriptedError) -> Answer:
        return _openai_error(err)


_GEMINI_MODEL = re.compile(r"/models/([^/:]+):")


class Gemini(Wire):
    """`POST /v1beta/models/MODEL:generateContent` and `:streamGenerateContent`."""

    name = "gemini"
    _STATUSES = {
        400: "INVALID_ARGUMENT",
        401: "UNAUTHENTICATED",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        429: "RESOURCE_EXHAUSTED",
        500: "INTERNAL",
        503: "UNAVAILABLE",
        504: "DEADLINE_EXCEEDED",
    }

    def answers(self, body: dict[str, Any]) -> int:
        return _runs(c.get("role") == "model" for c in _dicts(body.get("contents")))

    def first_user(self, body: dict[str, Any]) -> Any:
        return next((c for c in _dicts(body.get("contents")) if c.get("role") != "model"), None)

    def offers_tools(self, body: dict[str, Any]) -> bool:
        return any(t.get("functionDeclarations") for t in _dicts(body.get("tools")))

    def streams(self, path: str, body: dict[str, Any]) -> bool:
        return ":streamGenerateContent" in path

    def model(self, path: str, body: dict[str, Any]) -> str:
        found = _GEMINI_MODEL.search(path)
        return found.group(1) if found else "scripted"

    def reply(self, turn: Turn, model: str, stream: bool, new_id: NewId) -> Answer:
        u = turn.usage
        prompt = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
        usage = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": u.output_tokens,
            "totalTokenCount": prompt + u.output_tokens,
            "cachedContentTokenCount": u.cache_read_tokens,
        }
        parts: list[dict[str, Any]] = [] if turn.text is None else [{"text": turn.text}]
        parts += [{"functionCall": {"name": c.name, "args": c.arguments}} for c in _calls(turn)]
        head = {"modelVersion": model, "responseId": new_id("resp")}
        whole = {
            "candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage,
            **head,
        }  # fmt: skip
        if not stream:
            return Answer(200, _json(whole))
        # Text first, then the calls with the finish reason and the usage, as Gemini
        # ends a stream.
        events: list[tuple[str | None, dict[str, Any]]] = []
        if turn.text is not None:
            events.append((None, {"candidates": [{"content": {"role": "model", "parts": parts[:1]},
                                                  "index": 0}], **head}))  # fmt: skip
            parts = parts[1:]
        last = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        events.append((None, {"candidates": [last], "usageMetadata": usage, **head}))
        return Answer(200, _sse(events))

    def error(self, err: ScriptedError) -> Answer:
        status = self._STATUSES.get(err.status, "UNAVAILABLE" if err.status >= 500 else "UNKNOWN")
        body = {"error": {"code": err.status, "message": error_message(err), "status": status}}
        return Answer(err.status, _json(body), _error_headers(err))


ANTHROPIC, CHAT, RESPONSES, GEMINI = Anthropic(), ChatCompletions(), Responses(), Gemini()


def wire_for(path: str) -> Wire | None:
    """The protocol a POST to `path` (its query left out) speaks; None: not a model call."""
    if path.endswith("/messages"):
        return ANTHROPIC
    if path.endswith("/chat/completions"):
        return CHAT
    if path.endswith("/responses"):
        return RESPONSES
    if path.endswith(":generateContent") or path.endswith(":streamGenerateContent"):
        return GEMINI
    return None


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
