"""One HTTP client for every LLM call: the judge's and the built-in `openai` agent's.

A call POSTs a JSON body and wants a 2xx answer. It is bounded three ways:

- tries: 429, 5xx, timeouts and connection errors are tried again, up to
  `attempts` requests, after the server's Retry-After (seconds or an HTTP date)
  or else an exponential back-off of 1, 2, 4, ... s with up to 25 % jitter, so
  workers throttled together do not come back together; every wait is capped
  at MAX_WAIT_S. Other HTTP errors (401, 404, ...) are not retried.
- time: one `Deadline` for the whole call, every try and wait included, set by
  the caller from the call's start. httpx's timeouts bound each socket
  operation, so a server that dribbles headers or a body one byte at a time
  would never trip them; a watchdog shuts the connection down when the
  deadline passes, and the blocked read returns at once.
- size: the body is streamed, and reading stops past `max_response_bytes`, so
  an endless body costs that much memory and no more.

Every failure is an `LLMError` whose message says what happened and is fit to
be recorded as the run's reason; `DeadlineExceeded` when the deadline passed.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import json
import logging
import os
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import certifi

from core.errors import DeadlineExceeded, LLMError, UnusableURL
from core.matrix import MAX_WAIT_S
from core.wording import plural

if TYPE_CHECKING:
    # Imported where a call is made: httpx (and the rich console its command line
    # loads) is ~50 ms of every worker's and CLI's start, and most runs call no LLM.
    import httpx

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 1.0
JITTER = 0.25
MAX_RESPONSE_BYTES = 8 * 1024 * 1024  # a long answer with tool calls is well under 1 MB
MAX_ERROR_BODY_CHARS = 200

OnRetry = Callable[[str, float], None]  # (what failed, seconds until the next try)


@dataclass(frozen=True)
class Deadline:
    seconds: float  # its length, for messages
    at: float  # time.monotonic() when it passes

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(seconds, time.monotonic() + seconds)

    def left(self) -> float:
        return self.at - time.monotonic()


@dataclass(frozen=True)
class LLMReply:
    """A 2xx answer, read whole."""

    status_code: int
    content: bytes
    latency_ms: float

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


@dataclass(frozen=True)
class _Retryable:
    """A failed try worth repeating."""

    reason: str
    detail: str
    retry_after_s: float | None = None

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason


class LLMHttp:
    """An HTTP client with the retry policy, the deadline and the size cap.

    `timeout_s` and `connect_timeout_s` bound each try (None: only the deadline
    does). `tries` counts every request made, retried ones included.
    """

    def __init__(
        self,
        *,
        attempts: int,
        timeout_s: float | None = None,
        connect_timeout_s: float | None = None,
        headers: Mapping[str, str] | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.attempts = attempts
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_response_bytes = max_response_bytes
        self.sleep = sleep
        self.tries = 0
        # No kept-alive connections: the watchdog learns a request's socket when
        # it connects, and a reused connection would not tell it. A new
        # connection per LLM call costs a handshake, little beside the answer.
        import httpx

        self._client = httpx.Client(
            headers=headers,
            verify=_tls_context(),
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def __enter__(self) -> LLMHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    def post(
        self,
        url: str,
        payload: Any,
        *,
        deadline: Deadline,
        headers: Mapping[str, str] | None = None,
        on_retry: OnRetry | None = None,
    ) -> LLMReply:
        """The 2xx answer, or LLMError saying why there is none."""
        failed: _Retryable | None = None
        for attempt in range(1, self.attempts + 1):
            if failed is not None:
                wait = _wait_s(attempt - 1, failed.retry_after_s)
                if wait >= deadline.left():
                    raise LLMError(
                        f"{failed.reason} after {plural(attempt - 1, 'attempt')}, and no time "
                        "left before "
                        f"the {deadline.seconds:g} s deadline to try again{_colon(failed.detail)}"
                    )
                (on_retry or _log_retry)(str(failed), wait)
                self.sleep(wait)
            outcome = self._try(url, payload, headers, deadline)
            if isinstance(outcome, LLMReply):
                return outcome
            failed = outcome
        assert failed is not None
        raise LLMError(
            f"{failed.reason} after {plural(self.attempts, 'attempt')}{_colon(failed.detail)}"
        )

    def _try(
        self, url: str, payload: Any, headers: Mapping[str, str] | None, deadline: Deadline
    ) -> LLMReply | _Retryable:
        import httpx

        left = deadline.left()
        if left <= 0:
            raise DeadlineExceeded(_too_late(deadline, "before the request could start"))
        self.tries += 1
        read_s = _at_most(self.timeout_s, left)
        connect_s = _at_most(self.connect_timeout_s, left)
        watchdog = _Watchdog(left)
        body = _Body(self.max_response_bytes)
        started = time.monotonic()
        try:
            with self._client.stream(
                "POST",
                url,
                json=payload,
                headers=headers,
                timeout=httpx.Timeout(read_s, connect=connect_s),
                extensions={"trace": watchdog.trace},
            ) as response:
                body.read(response)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise UnusableURL(f"URL {url!r} is not usable: {exc}") from None
        except httpx.TransportError as exc:
            if watchdog.fired or deadline.left() <= 0:
                raise DeadlineExceeded(_too_late(deadline, body.progress())) from None
            return _retryable(exc, read_s, connect_s)
        finally:
            watchdog.stop()
        if watchdog.fired:  # a body that ends where the connection does ended by our hand
            raise DeadlineExceeded(_too_late(deadline, body.progress()))
        content = body.content()
        if response.is_success:
            latency_ms = (time.monotonic() - started) * 1000
            return LLMReply(response.status_code, content, latency_ms)
        shown = excerpt(content.decode("utf-8", errors="replace"))
        if response.status_code == 429 or response.status_code >= 500:
            retry_after = _retry_after_s(response.headers.get("retry-after"))
            return _Retryable(f"HTTP {response.status_code}", shown, retry_after)
        raise LLMError(f"HTTP {response.status_code}: {shown}")


class _Body:
    """A response body read in chunks, refused past the size cap."""

    def __init__(self, limit: int):
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.headers_seen = False

    def read(self, response: httpx.Response) -> None:
        self.headers_seen = True
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            raise LLMError(
                f"response of {int(declared)} bytes refused: over the {self.limit}-byte limit"
            )
        for chunk in response.iter_bytes():
            self.size += len(chunk)
            if self.size > self.limit:
                raise LLMError(
                    f"response body over the {self.limit}-byte limit: reading stopped there"
                )
            self.chunks.append(chunk)

    def content(self) -> bytes:
        return b"".join(self.chunks)

    def progress(self) -> str:
        if not self.headers_seen:
            return "no response headers yet"
        return f"the body was still arriving ({self.size} bytes so far)"


class _Watchdog:
    """Shuts the request's connection down when its deadline passes.

    httpcore reports each new connection's stream through the `trace`
    extension; a duplicate of its file descriptor is kept so that shutdown
    still reaches the socket after TLS has taken the original object over.
    shutdown(2), unlike close(2), wakes a read blocked in another thread.
    """

    def __init__(self, left_s: float):
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(left_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event != "connection.connect_tcp.complete":
            return
        sock = info["return_value"].get_extra_info("socket")
        if sock is None:
            return
        with self._lock:
            copy = socket.socket(fileno=os.dup(sock.fileno()))
            self._sockets.append(copy)
            if self.fired:
                _shut(copy)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets:
                _shut(sock)

    def stop(self) -> None:
        self._timer.cancel()
        with self._lock:
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the other end
        sock.shutdown(socket.SHUT_RDWR)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Building a context loads the CA bundle (~40 ms of CPU): once per process.
    return ssl.create_default_context(cafile=certifi.where())


def _retryable(exc: httpx.TransportError, read_s: float, connect_s: float) -> _Retryable:
    import httpx

    if isinstance(exc, httpx.ConnectTimeout):
        return _Retryable("connect timeout", f"no connection within {connect_s:g} s")
    if isinstance(exc, httpx.TimeoutException):
        kind = {httpx.ReadTimeout: "read", httpx.WriteTimeout: "write"}.get(type(exc), "pool")
        return _Retryable(f"{kind} timeout", f"no answer within {read_s:g} s")
    return _Retryable("connection failed", f"{type(exc).__name__}: {exc}")


def _wait_s(failures: int, retry_after_s: float | None) -> float:
    """Seconds before the next try: the server's word, else back-off with jitter."""
    if retry_after_s is not None:
        return min(retry_after_s, MAX_WAIT_S)
    backoff = FIRST_BACKOFF_S * 2.0 ** (failures - 1)
    return min(backoff * (1 + JITTER * random.random()), MAX_WAIT_S)


def _retry_after_s(value: str | None) -> float | None:
    """Retry-After in seconds: a number, or an HTTP date from now; None if unusable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return max(seconds, 0.0) if seconds == seconds else None  # NaN is no answer


def _at_most(limit: float | None, left: float) -> float:
    return left if limit is None else min(limit, left)


def _too_late(deadline: Deadline, progress: str) -> str:
    return f"no complete response within the {deadline.seconds:g} s deadline: {progress}"


def _colon(detail: str) -> str:
    return f": {detail}" if detail else ""


def excerpt(text: str) -> str:
    """A body as shown in an error message: one line, cut short."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_BODY_CHARS else text[:MAX_ERROR_BODY_CHARS] + "..."


def _log_retry(problem: str, wait_s: float) -> None:
    log.warning("LLM request failed (%s); retry in %.1f s", problem, wait_s)
