"""core.modelserver.protocols: each wire finds where a conversation is and renders a turn
or an error in its own shape, streamed and not."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from core.modelserver import ScriptedError, Turn
from core.modelserver.protocols import (
    ANTHROPIC,
    CHAT,
    GEMINI,
    RESPONSES,
    Answer,
    Wire,
    error_message,
    wire_for,
)

TURN = Turn.model_validate(
    {
        "text": "Listing.",
        "tool_calls": [{"name": "Bash", "arguments": {"command": "ls"}}],
        "usage": {"input_tokens": 100, "output_tokens": 7, "cache_read_tokens": 50},
    }
)


def _ids() -> Any:
    count = itertools.count(1)
    return lambda prefix: f"{prefix}_{next(count)}"


def _body(answer: Answer) -> Any:
    assert isinstance(answer.body, bytes)
    return json.loads(answer.body)


def _events(answer: Answer) -> list[Any]:
    assert isinstance(answer.body, list)
    return [
        json.loads(line[len("data: ") :])
        for chunk in answer.body
        for line in chunk.decode().splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


@pytest.mark.parametrize(
    ("path", "wire"),
    [
        ("/v1/messages", ANTHROPIC),
        ("/v1/chat/completions", CHAT),
        ("/v1/responses", RESPONSES),
        ("/v1beta/models/gemini-2.5-pro:streamGenerateContent", GEMINI),
        ("/v1beta/models/gemini-2.5-pro:generateContent", GEMINI),
        ("/v1/models", None),
    ],
)
def test_the_path_names_the_protocol(path: str, wire: Wire | None) -> None:
    assert wire_for(path) is wire


def test_an_answer_spanning_several_entries_counts_once() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "text"},
        {"role": "assistant", "content": [{"type": "tool_use"}]},
        {"role": "user", "content": "result"},
        {"role": "assistant", "content": "more"},
        "not a message",
    ]
    assert ANTHROPIC.answers({"messages": messages}) == 2
    assert CHAT.answers({"messages": messages[:3]}) == 1
    assert ANTHROPIC.first_user({"messages": messages}) == messages[0]
    items = [{"role": "user"}, {"type": "reasoning"}, {"type": "function_call"}, {"role": "user"}]
    assert RESPONSES.answers({"input": items}) == 1
    assert RESPONSES.answers({"input": "just a prompt"}) == 0
    contents = [{"role": "user"}, {"role": "model"}, {"role": "user"}, {"role": "model"}]
    assert GEMINI.answers({"contents": contents}) == 2


def test_gemini_reads_its_model_and_streaming_from_the_path() -> None:
    path = "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    assert GEMINI.model(path, {}) == "gemini-2.5-pro" and GEMINI.streams(path, {})
    assert not GEMINI.streams("/v1beta/models/m:generateContent", {"stream": True})
    assert GEMINI.offers_tools({"tools": [{"functionDeclarations": [{"name": "f"}]}]})
    assert not GEMINI.offers_tools({"tools": [{"googleSearch": {}}]})


def test_anthropic_counts_cached_input_apart_and_streams_its_usage_last() -> None:
    whole = _body(ANTHROPIC.reply(TURN, "claude", False, _ids()))
    assert whole["usage"]["input_tokens"] == 100 and whole["usage"]["cache_read_input_tokens"] == 50
    assert whole["stop_reason"] == "tool_use"
    assert whole["content"][1] == {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                   "input": {"command": "ls"}}  # fmt: skip
    events = _events(ANTHROPIC.reply(TURN, "claude", True, _ids()))
    assert [e["type"] for e in (events[0], events[-2], events[-1])] == [
        "message_start", "message_delta", "message_stop",
    ]  # fmt: skip
    assert events[-2]["usage"] == {"output_tokens": 7}
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert deltas[1] == {"type": "input_json_delta", "partial_json": '{"command": "ls"}'}


def test_openai_counts_cached_input_inside_its_prompt_tokens() -> None:
    whole = _body(CHAT.reply(TURN, "gpt", False, _ids()))
    assert whole["usage"]["prompt_tokens"] == 150
    assert whole["usage"]["prompt_tokens_details"] == {"cached_tokens": 50}
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    streamed = _events(CHAT.reply(TURN, "gpt", True, _ids()))
    assert streamed[-1]["choices"] == [] and streamed[-1]["usage"] == whole["usage"]
    responses = _events(RESPONSES.reply(TURN, "codex", True, _ids()))
    assert [e["sequence_number"] for e in responses] == list(range(len(responses)))
    assert responses[-1]["type"] == "response.completed"
    assert responses[-1]["response"]["usage"]["input_tokens"] == 150


def test_a_malformed_call_is_sent_as_written_where_the_protocol_carries_text() -> None:
    broken = Turn.model_validate({"tool_calls": [{"name": "Bash", "arguments": '{"command": '}]})
    chat = _body(CHAT.reply(broken, "gpt", False, _ids()))
    assert chat["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == (
        '{"command": '
    )
    gemini = _body(GEMINI.reply(broken, "g", False, _ids()))
    assert gemini["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"name": "Bash", "args": {}}}
    ]


@pytest.mark.parametrize(
    ("wire", "kind"),
    [
        (ANTHROPIC, ("error", "type", "rate_limit_error")),
        (CHAT, ("error", "code", "rate_limit_exceeded")),
        (RESPONSES, ("error", "code", "rate_limit_exceeded")),
        (GEMINI, ("error", "status", "RESOURCE_EXHAUSTED")),
    ],
)
def test_an_error_is_in_the_protocols_shape_with_its_retry_after(
    wire: Wire, kind: tuple[str, str, str]
) -> None:
    answer = wire.error(ScriptedError(status=429, retry_after=1.5))
    assert answer.status == 429 and answer.headers == (("Retry-After", "1.5"),)
    outer, field, value = kind
    assert _body(answer)[outer][field] == value
    assert error_message(ScriptedError(status=429)) == "scripted error: rate limit exceeded"
    assert error_message(ScriptedError(status=418, message="teapot")) == "teapot"
