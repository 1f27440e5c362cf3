"""core.llm.client: one POST bounded in tries, time and size, against a real HTTP server
on loopback (tests.support.llm_stub): what is retried and after how long, what is not,
the deadline over the whole call, the size cap."""

from __future__ import annotations

import email.utils
import json
import socket
import time

import pytest

from core.errors import DeadlineExceeded, LLMError, UnusableURL
from core.llm.client import (
    FIRST_BACKOFF_S,
    JITTER,
    MAX_ERROR_BODY_CHARS,
    Deadline,
    LLMHttp,
    _retry_after_s,
    _wait_s,
    excerpt,
)
from core.matrix import MAX_WAIT_S
from tests.support.llm_stub import LLMStub, dribble, endless, reply, slow, status

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _post(
    stub: LLMStub, attempts: int = 3, deadline_s: float = 30, **client: object
) -> tuple[dict[str, object], LLMHttp, list[float]]:
    waits: list[float] = []
    with LLMHttp(attempts=attempts, sleep=waits.append, **client) as http:  # type: ignore[arg-type]
        answer = http.post(
            f"{stub.base_url}/chat/completions", PAYLOAD, deadline=Deadline.after(deadline_s)
        )
    return answer.json(), http, waits


def test_an_answer_is_read_whole_and_the_request_sent_as_json() -> None:
    with LLMStub([reply(content="hello")]) as stub:
        body, http, waits = _post(stub)
    assert body["choices"][0]["message"]["content"] == "hello"  # type: ignore[index]
    assert stub.requests[0].body == PAYLOAD and http.tries == 1 and waits == []


def test_a_throttled_or_failing_server_is_tried_again_after_its_retry_after() -> None:
    script = [status(429, {"Retry-After": "3"}), status(503), reply(content="ok")]
    with LLMStub(script) as stub:
        _, http, waits = _post(stub)
    assert http.tries == 3
    assert waits[0] == 3.0
    # No Retry-After: the back-off of a second failure, whatever the first waited.
    assert 2 * FIRST_BACKOFF_S <= waits[1] <= 2 * FIRST_BACKOFF_S * (1 + JITTER)


def test_a_client_error_is_not_retried_and_its_body_is_the_reason() -> None:
    with (
        LLMStub([status(401, body={"error": "bad key"})]) as stub,
        pytest.raises(LLMError, match=r'^HTTP 401: \{"error": "bad key"\}$'),
    ):
        _post(stub)
    assert len(stub.requests) == 1


def test_the_last_failure_is_said_after_the_last_try() -> None:
    with (
        LLMStub([status(500, body="upstream down")]) as stub,
        pytest.raises(LLMError, match=r"^HTTP 500 after 2 attempts: upstream down$"),
    ):
        _post(stub, attempts=2)


def test_no_retry_is_begun_that_the_deadline_would_cut() -> None:
    with (
        LLMStub([status(429, {"Retry-After": "20"})]) as stub,
        pytest.raises(LLMError, match="no time left before the 5 s deadline to try again"),
    ):
        _post(stub, deadline_s=5)
    assert len(stub.requests) == 1


def test_a_body_that_never_arrives_in_time_ends_at_the_deadline() -> None:
    with LLMStub([dribble(interval_s=0.2)]) as stub:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="the body was still arriving"):
            _post(stub, deadline_s=1.5, timeout_s=10)
    assert time.monotonic() - started < 5


def test_a_server_that_never_answers_ends_at_the_deadline_not_its_timeout() -> None:
    with LLMStub([slow(30)]) as stub:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="no response headers yet"):
            _post(stub, attempts=1, deadline_s=1)
    assert time.monotonic() - started < 5


def test_an_endless_body_is_read_no_further_than_the_cap() -> None:
    with (
        LLMStub([endless()]) as stub,
        pytest.raises(LLMError, match="over the 65536-byte limit: reading stopped there"),
    ):
        _post(stub, max_response_bytes=65536)


def test_a_declared_length_over_the_cap_is_refused_before_reading() -> None:
    with (
        LLMStub([reply(content="x" * 5000)]) as stub,
        pytest.raises(LLMError, match=r"^response of \d+ bytes refused: over the 1000-byte"),
    ):
        _post(stub, max_response_bytes=1000)


def test_a_connection_refused_is_retried_then_said() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with (
        LLMHttp(attempts=2, sleep=lambda _: None) as http,
        pytest.raises(LLMError, match=r"^connection failed after 2 attempts: ConnectError"),
    ):
        http.post(f"http://127.0.0.1:{port}/v1/x", {}, deadline=Deadline.after(10))
    assert http.tries == 2


def test_a_url_without_a_scheme_is_unusable_at_once() -> None:
    with LLMHttp(attempts=3) as http, pytest.raises(UnusableURL):
        http.post("judge.example/v1", {}, deadline=Deadline.after(10))
    assert http.tries == 1


def test_retry_after_is_seconds_or_a_date_and_nothing_else() -> None:
    assert _retry_after_s("2.5") == 2.5
    assert _retry_after_s("-4") == 0.0
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55 <= (_retry_after_s(in_a_minute) or 0) <= 60
    assert _retry_after_s("soon") is None
    assert _retry_after_s("nan") is None
    assert _retry_after_s(None) is None


def test_waits_back_off_doubling_with_jitter_and_never_past_the_cap() -> None:
    for failures in (1, 2, 3):
        base = FIRST_BACKOFF_S * 2 ** (failures - 1)
        assert base <= _wait_s(failures, None) <= base * (1 + JITTER)
    assert _wait_s(30, None) == MAX_WAIT_S
    assert _wait_s(1, 10_000) == MAX_WAIT_S and _wait_s(1, 2) == 2


def test_an_error_body_is_shown_on_one_line_cut_short() -> None:
    assert excerpt("a\n  b\tc") == "a b c"
    long = excerpt(json.dumps({"e": "x" * 1000}))
    assert len(long) == MAX_ERROR_BODY_CHARS + 3 and long.endswith("...")
