"""The loopback LLM stub behaves like the APIs it stands in for."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import SUPPORT
from tests.support.llm_stub import (
    LLMStub,
    RecordedRequest,
    Step,
    dribble,
    endless,
    malformed,
    reply,
    slow,
    status,
)

STUB_SCRIPT = SUPPORT / "llm_stub.py"


def test_openai_reply_with_tool_calls_and_request_recorded() -> None:
    script = [
        reply(
            content="ok",
            tool_calls=[{"name": "bash", "arguments": {"command": "ls"}}],
            prompt_tokens=120,
            completion_tokens=7,
        )
    ]
    with LLMStub(script) as stub:
        r = httpx.post(
            f"{stub.base_url}/chat/completions",
            json={"model": "m", "messages": []},
            headers={"Authorization": "Bearer k-1"},
        )
    body = r.json()
    choice = body["choices"][0]
    assert r.status_code == 200
    assert choice["message"]["content"] == "ok"
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"command": "ls"}
    assert body["usage"] == {
        "prompt_tokens": 120,
        "completion_tokens": 7,
        "total_tokens": 127,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    [request] = stub.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer k-1"
    assert request.body == {"model": "m", "messages": []}


def test_same_reply_in_anthropic_shape() -> None:
    with LLMStub([reply(content="hello", prompt_tokens=3, completion_tokens=2)]) as stub:
        r = httpx.post(f"{stub.base_url}/messages", json={}, headers={"x-api-key": "k-2"})
    body = r.json()
    assert body["content"] == [{"type": "text", "text": "hello"}]
    assert body["usage"] == {
        "input_tokens": 3,
        "output_tokens": 2,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    assert body["stop_reason"] == "end_turn"
    assert stub.requests[0].headers["x-api-key"] == "k-2"


def test_steps_in_order_then_last_repeats() -> None:
    script = [status(429, headers={"Retry-After": "1"}), malformed("nope"), status(500)]
    with LLMStub(script) as stub:
        answers = [httpx.post(f"{stub.base_url}/messages", json={}) for _ in range(4)]
    assert [a.status_code for a in answers] == [429, 200, 500, 500]
    assert answers[0].headers["retry-after"] == "1"
    assert answers[1].text == "nope"


def test_exhausted_script_without_repeat_answers_500() -> None:
    with LLMStub([reply(content="once")], repeat_last=False) as stub:
        first = httpx.post(f"{stub.base_url}/chat/completions", json={})
        second = httpx.post(f"{stub.base_url}/chat/completions", json={})
    assert first.status_code == 200
    assert second.status_code == 500 and "exhausted" in second.text


def test_callable_step_sees_the_request() -> None:
    def echo(request: RecordedRequest) -> Step:
        return reply(content=request.body["messages"][-1]["content"])

    with LLMStub([echo]) as stub:
        r = httpx.post(
            f"{stub.base_url}/chat/completions",
            json={"messages": [{"role": "user", "content": "ping"}]},
        )
    assert r.json()["choices"][0]["message"]["content"] == "ping"


def test_slow_step_times_the_client_out_and_close_does_not_hang() -> None:
    stub = LLMStub([slow(30)]).start()
    errors: list[Exception] = []

    def hang() -> None:  # a second request still waiting when the stub closes
        try:
            httpx.post(f"{stub.base_url}/messages", json={}, timeout=60)
        except httpx.HTTPError as exc:
            errors.append(exc)

    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{stub.base_url}/messages", json={}, timeout=0.3)
    waiter = threading.Thread(target=hang)
    waiter.start()
    while len(stub.requests) < 2:
        time.sleep(0.01)
    started = time.monotonic()
    stub.close()
    waiter.join(timeout=5)
    assert time.monotonic() - started < 3
    assert not waiter.is_alive() and errors  # dropped unanswered, not answered late


def test_dribble_sends_headers_then_one_byte_per_interval() -> None:
    with LLMStub([dribble(reply(content="ping"), interval_s=0.2)]) as stub:
        started = time.monotonic()
        with httpx.stream("POST", f"{stub.base_url}/chat/completions", json={}) as response:
            headers_after = time.monotonic() - started
            chunks = list(itertools.islice(response.iter_raw(), 5))
            five_after = time.monotonic() - started
    assert response.status_code == 200 and headers_after < 0.5
    assert [len(c) for c in chunks] == [1] * 5  # byte by byte...
    assert five_after >= 0.8  # ...one every interval (the first comes with the headers)


def test_endless_body_never_ends() -> None:
    with (
        LLMStub([endless()]) as stub,
        httpx.stream("POST", f"{stub.base_url}/chat/completions", json={}) as response,
    ):
        assert "content-length" not in response.headers
        received = 0
        for chunk in response.iter_raw():
            received += len(chunk)
            if received > 20_000_000:
                break
    assert received > 20_000_000


def test_script_mode_serves_and_records(tmp_path: Path) -> None:
    script = tmp_path / "steps.json"
    script.write_text(
        json.dumps(
            {"steps": [{"reply": {"content": "from file"}}, {"status": 503, "delay_s": 0.1}]}
        )
    )
    record = tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(STUB_SCRIPT),
            "--port",
            "0",
            "--script",
            str(script),
            "--record",
            str(record),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[0] == "LISTENING"
        base_url = line[1]
        first = httpx.post(f"{base_url}/chat/completions", json={"n": 1})
        second = httpx.post(f"{base_url}/chat/completions", json={"n": 2})
    finally:
        proc.terminate()
        proc.wait(timeout=5)
    assert first.json()["choices"][0]["message"]["content"] == "from file"
    assert second.status_code == 503
    recorded = [json.loads(x) for x in record.read_text().splitlines()]
    assert [r["body"] for r in recorded] == [{"n": 1}, {"n": 2}]
