"""The scripted model server answers each wire protocol as the real APIs do, turn by
turn from its script, and records every request."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.errors import ConfigError
from core.modelserver import (
    REQUESTS_PATH,
    ModelScript,
    ModelServer,
    ScriptedError,
    ScriptedToolCall,
    Turn,
    Usage,
    load_model_script,
)
from tests.conftest import run_cli, start_cli

WRITE = Turn(
    text="Writing it.",
    tool_calls=[ScriptedToolCall(name="Bash", arguments={"command": "echo hi > out.txt"})],
    usage=Usage(input_tokens=1000, output_tokens=50, cache_read_tokens=300),
)
DONE = Turn(text="done", usage=Usage(input_tokens=1200, output_tokens=10))
TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer(ModelScript(turns=[WRITE, DONE])) as running:
        yield running


def sse(response: httpx.Response) -> list[tuple[str | None, Any]]:
    """(event name, data) of each server-sent event; data parsed when it is JSON."""
    events = []
    for block in response.text.split("\n\n"):
        if not block.strip():
            continue
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        data = fields["data"]
        events.append((fields.get("event"), data if data == "[DONE]" else json.loads(data)))
    return events


def anthropic_history(*assistant: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "write hi"}]
    for answer in assistant:
        messages += [answer, {"role": "user", "content": [{"type": "tool_result"}]}]
    return messages


def test_anthropic_turns_follow_the_conversation_streaming_and_not(server: ModelServer) -> None:
    url = f"{server.base_url}/v1/messages?beta=true"
    first = httpx.post(url, json={"model": "claude-x", "messages": anthropic_history(),
                                  "tools": TOOLS})  # fmt: skip
    assert first.status_code == 200
    message = first.json()
    assert message["model"] == "claude-x" and message["stop_reason"] == "tool_use"
    assert message["content"][0] == {"type": "text", "text": "Writing it."}
    call = message["content"][1]
    assert (call["type"], call["name"], call["input"]) == (
        "tool_use",
        "Bash",
        {"command": "echo hi > out.txt"},
    )
    assert message["usage"] == {
        "input_tokens": 1000,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 300,
        "output_tokens": 50,
    }

    # The same conversation with the model's answer in its history: the next turn, streamed.
    answered = anthropic_history({"role": "assistant", "content": message["content"]})
    body = {"model": "claude-x", "stream": True, "tools": TOOLS, "messages": answered}
    second = httpx.post(url, json=body)
    assert second.headers["content-type"] == "text/event-stream"
    events = sse(second)
    names = [name for name, _ in events]
    assert names == ["message_start", "content_block_start", "content_block_delta",
                     "content_block_stop", "message_delta", "message_stop"]  # fmt: skip
    assert events[0][1]["message"]["usage"]["input_tokens"] == 1200
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "done"}
    assert events[4][1]["delta"]["stop_reason"] == "end_turn"
    assert events[4][1]["usage"] == {"output_tokens": 10}
    assert [r.turn for r in server.model_requests()] == [0, 1]

    # Past the end of the script its last turn repeats.
    body["messages"] = anthropic_history(message, message)
    assert httpx.post(url, json={**body, "stream": False}).json()["content"][0]["text"] == "done"


def test_anthropic_stream_carries_a_tool_call_as_input_json_delta(server: ModelServer) -> None:
    body = {"model": "m", "stream": True, "messages": anthropic_history(), "tools": TOOLS}
    events = sse(httpx.post(f"{server.base_url}/v1/messages", json=body))
    started = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert started[1]["type"] == "tool_use" and started[1]["name"] == "Bash"
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]
    assert json.loads(deltas[1]["partial_json"]) == {"command": "echo hi > out.txt"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def chat_body(stream: bool, answered: int = 0) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"},
                                      {"role": "user", "content": "write hi"}]  # fmt: skip
    for _ in range(answered):
        messages += [{"role": "assistant", "content": "x"}, {"role": "tool", "content": ""}]
    tools = [{"type": "function", "function": {"name": "Bash"}}]
    return {"model": "gpt-x", "stream": stream, "messages": messages, "tools": tools}


def test_chat_completions_whole_and_streamed(server: ModelServer) -> None:
    url = f"{server.base_url}/v1/chat/completions"
    whole = httpx.post(url, json=chat_body(stream=False)).json()
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Writing it."
    function = choice["message"]["tool_calls"][0]["function"]
    assert function["name"] == "Bash"
    assert json.loads(function["arguments"]) == {"command": "echo hi > out.txt"}
    # OpenAI counts cached input inside prompt_tokens.
    assert whole["usage"]["prompt_tokens"] == 1300
    assert whole["usage"]["prompt_tokens_details"] == {"cached_tokens": 300}

    events = sse(httpx.post(url, json=chat_body(stream=True)))
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    calls = [tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get(
        "tool_calls", [])]  # fmt: skip
    assert text == "Writing it." and calls[0]["function"]["name"] == "Bash"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 50

    after = httpx.post(url, json=chat_body(stream=False, answered=1)).json()
    assert after["choices"][0]["message"] == {"role": "assistant", "content": "done"}


def test_responses_api_streams_items_and_usage_as_codex_reads_them(server: ModelServer) -> None:
    url = f"{server.base_url}/v1/responses"
    body: dict[str, Any] = {
        "model": "gpt-5-codex",
        "stream": True,
        "input": [{"type": "message", "role": "developer", "content": []},
                  {"type": "message", "role": "user", "content": [{"text": "write hi"}]}],
        "tools": [{"type": "function", "name": "exec_command"}],
    }  # fmt: skip
    events = sse(httpx.post(url, json=body))
    names = [name for name, _ in events]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    done = [data["item"] for name, data in events if name == "response.output_item.done"]
    assert done[0]["type"] == "message" and done[0]["content"][0]["text"] == "Writing it."
    assert done[1]["type"] == "function_call" and done[1]["name"] == "Bash"
    completed = events[-1][1]["response"]
    assert completed["usage"]["input_tokens"] == 1300
    assert completed["usage"]["input_tokens_details"]["cached_tokens"] == 300
    assert completed["usage"]["output_tokens"] == 50

    # The answer's items in the input (one turn however many items it has) and the
    # call's output: the next turn.
    body["input"] += [done[0], done[1], {"type": "function_call_output", "output": ""}]
    whole = httpx.post(url, json={**body, "stream": False}).json()
    assert whole["output"][0]["content"][0]["text"] == "done"


def test_gemini_generate_content_streamed_as_sse_and_whole(server: ModelServer) -> None:
    body: dict[str, Any] = {
        "contents": [{"role": "user", "parts": [{"text": "write hi"}]}],
        "tools": [{"functionDeclarations": [{"name": "Bash"}]}],
    }
    base = f"{server.base_url}/v1beta/models/gemini-x"
    events = sse(httpx.post(f"{base}:streamGenerateContent?alt=sse", json=body))
    parts = [p for _, data in events for p in data["candidates"][0]["content"]["parts"]]
    call = {"functionCall": {"name": "Bash", "args": {"command": "echo hi > out.txt"}}}
    assert parts == [{"text": "Writing it."}, call]
    last = events[-1][1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert last["usageMetadata"]["promptTokenCount"] == 1300
    assert last["usageMetadata"]["candidatesTokenCount"] == 50
    assert last["modelVersion"] == "gemini-x"

    body["contents"] += [{"role": "model", "parts": parts}, {"role": "user", "parts": []}]
    whole = httpx.post(f"{base}:generateContent", json=body).json()
    assert whole["candidates"][0]["content"]["parts"] == [{"text": "done"}]


@pytest.mark.parametrize("per", ["server", "conversation"])
def test_an_error_turn_is_served_times_then_the_script_goes_on(per: str) -> None:
    error = ScriptedError.model_validate({"status": 429, "retry_after": 2, "per": per})
    with ModelServer(ModelScript(turns=[Turn(error=error), DONE])) as server:
        url = f"{server.base_url}/v1/messages"
        one = {"model": "m", "messages": [{"role": "user", "content": "one"}]}
        two = {"model": "m", "messages": [{"role": "user", "content": "two"}]}
        limited = httpx.post(url, json=one)
        assert limited.status_code == 429 and limited.headers["retry-after"] == "2"
        assert limited.json()["error"]["type"] == "rate_limit_error"
        assert httpx.post(url, json=one).json()["content"][0]["text"] == "done"  # the retry
        # Another conversation (a run sent again works in another folder, which CLIs
        # tell the model): it meets the error again only when counted per conversation.
        again = httpx.post(url, json=two).status_code
        assert again == (429 if per == "conversation" else 200)
        assert [(r.turn, r.status) for r in server.model_requests()] == [
            (0, 429), (1, 200), (0 if per == "conversation" else 1, again)
        ]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "status", "check"),
    [
        ("/v1/messages", 529, lambda b: b["error"]["type"] == "overloaded_error"),
        ("/v1/messages", 401, lambda b: b["error"]["type"] == "authentication_error"),
        ("/v1/chat/completions", 429, lambda b: b["error"]["code"] == "rate_limit_exceeded"),
        ("/v1/responses", 401, lambda b: b["error"]["code"] == "invalid_api_key"),
        ("/v1beta/models/g:generateContent", 429,
         lambda b: b["error"]["status"] == "RESOURCE_EXHAUSTED"),
    ],
)  # fmt: skip
def test_a_last_error_turn_repeats_in_each_protocols_own_shape(
    path: str, status: int, check: Any
) -> None:
    with ModelServer(ModelScript(turns=[Turn(error=ScriptedError(status=status))])) as server:
        for _ in range(2):
            answer = httpx.post(f"{server.base_url}{path}", json={"messages": [], "input": []})
            assert answer.status_code == status and check(answer.json())


def test_a_request_that_offers_no_tools_gets_the_turns_text_alone(server: ModelServer) -> None:
    # A CLI's side request (a title) must not be answered with a call it cannot make.
    title = {"model": "m", "messages": [{"role": "user", "content": "title this"}]}
    answer = httpx.post(f"{server.base_url}/v1/messages", json=title).json()
    assert answer["content"] == [{"type": "text", "text": "Writing it."}]
    assert answer["stop_reason"] == "end_turn"


def test_default_script_answers_done_to_any_conversation() -> None:
    with ModelServer() as server:
        answer = httpx.post(f"{server.base_url}/v1/chat/completions", json=chat_body(False, 3))
        assert answer.json()["choices"][0]["message"]["content"] == "done"


def test_every_request_is_recorded_with_credentials_redacted(tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    with ModelServer(record=record) as server:
        httpx.post(
            f"{server.base_url}/v1beta/models/g:generateContent?key=SECRET-1",
            json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
            headers={"x-goog-api-key": "SECRET-2", "Authorization": "Bearer SECRET-3"},
        )
        httpx.get(f"{server.base_url}/v1/models")
        served = httpx.get(f"{server.base_url}{REQUESTS_PATH}").json()
    assert [(r["method"], r["protocol"], r["turn"]) for r in served] == [
        ("POST", "gemini", 0), ("GET", None, None)
    ]  # fmt: skip
    assert served[0]["model"] == "g" and served[0]["body"]["contents"][0]["role"] == "user"
    written = record.read_text()
    assert [json.loads(line) for line in written.splitlines()] == served
    assert "SECRET" not in written
    assert served[0]["headers"]["x-goog-api-key"] == "[redacted]"


def test_concurrent_conversations_each_walk_the_script_from_its_start() -> None:
    with ModelServer(ModelScript(turns=[WRITE, DONE])) as server:
        answers: list[str] = []

        def converse(n: int) -> None:
            messages: list[dict[str, Any]] = [{"role": "user", "content": f"run {n}"}]
            body = {"model": "m", "tools": TOOLS, "messages": messages}
            first = httpx.post(f"{server.base_url}/v1/messages", json=body).json()
            messages += [{"role": "assistant", "content": first["content"]},
                         {"role": "user", "content": "result"}]  # fmt: skip
            second = httpx.post(f"{server.base_url}/v1/messages", json=body).json()
            answers.append(first["content"][0]["text"] + "/" + second["content"][0]["text"])

        threads = [threading.Thread(target=converse, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert answers == ["Writing it./done"] * 6


def test_a_bad_script_names_the_file_line_and_field(tmp_path: Path) -> None:
    script = tmp_path / "turns.yaml"
    script.write_text("turns:\n  - text: hi\n  - error: {status: 200}\n")
    with pytest.raises(ConfigError) as caught:
        load_model_script(script)
    assert str(caught.value).startswith(f"{script}:3:")
    assert "turns.1.error.status" in str(caught.value)
    script.write_text('{"turns": [{"text": "a", "tool_calls": [{"name": "x"}]}]}')  # JSON too
    assert load_model_script(script).turns[0].tool_calls[0].name == "x"


def test_cli_serves_the_script_and_says_where(tmp_path: Path, fleet_env: dict[str, str]) -> None:
    script = tmp_path / "turns.yaml"
    script.write_text("turns:\n  - text: scripted hello\n    usage: {output_tokens: 7}\n")
    record = tmp_path / "requests.jsonl"
    process = start_cli(
        "model-server", "--script", str(script), "--record", str(record), env=fleet_env
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().split()
        assert first[0] == "LISTENING"
        exports = [process.stdout.readline().strip() for _ in range(3)]
        assert exports[0] == f"export ANTHROPIC_BASE_URL={first[1]}"
        answer = httpx.post(f"{first[1]}/v1/messages", json={"messages": []}).json()
        assert answer["content"][0]["text"] == "scripted hello"
        assert answer["usage"]["output_tokens"] == 7
        assert json.loads(record.read_text())["protocol"] == "anthropic"
    finally:
        process.terminate()
        process.wait(timeout=10)

    script.write_text("turns:\n  - {text: a, error: {status: 429}}\n")
    refused = run_cli("model-server", "--script", str(script), env=fleet_env)
    assert refused.returncode == 2
    assert f"{script}:2:" in refused.stderr and "either an error or an answer" in refused.stderr


def test_a_call_with_its_own_id_and_malformed_arguments_is_sent_as_written() -> None:
    broken = ScriptedToolCall(name="Bash", arguments='{"command": "ls"', id="call_fixed")
    with ModelServer(ModelScript(turns=[Turn(tool_calls=[broken])])) as server:
        chat = httpx.post(f"{server.base_url}/v1/chat/completions", json=chat_body(False))
        call = chat.json()["choices"][0]["message"]["tool_calls"][0]
        assert call["id"] == "call_fixed" and call["function"]["arguments"] == '{"command": "ls"'
        # Anthropic carries an object: what cannot be parsed is empty.
        body = {"messages": anthropic_history(), "tools": TOOLS}
        block = httpx.post(f"{server.base_url}/v1/messages", json=body).json()["content"][0]
        assert (block["id"], block["input"]) == ("call_fixed", {})


def test_a_chunked_request_body_is_read_and_the_connection_kept(server: ModelServer) -> None:
    body = json.dumps({"model": "m", "messages": anthropic_history(), "tools": TOOLS}).encode()

    def chunks() -> Iterator[bytes]:
        yield body[:10]
        yield body[10:]

    with httpx.Client() as client:
        first = client.post(f"{server.base_url}/v1/messages", content=chunks())
        second = client.post(f"{server.base_url}/v1/messages", content=chunks())
    assert first.json()["content"][1]["name"] == "Bash"
    assert second.status_code == 200 and server.model_requests()[1].body == json.loads(body)
