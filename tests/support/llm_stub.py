"""A scripted OpenAI/Anthropic-compatible HTTP server on loopback, for tests.

Its replies are rendered by the product's scripted model server (core.modelserver),
whose turns follow each conversation; this stub adds what tests of failures need and
the product does not do: steps taken strictly in order, replies computed from the
request, raw statuses and bodies, bodies that are malformed, dribbled or endless.

    with LLMStub([reply(content="hi"), status(429, headers={"Retry-After": "1"})]) as stub:
        client_base_url = stub.base_url          # "http://127.0.0.1:PORT/v1"
        ...
        stub.requests[0].headers["authorization"]  # every request is recorded

Endpoints: POST /v1/chat/completions (OpenAI shape) and POST /v1/messages
(Anthropic shape). Each request consumes the next scripted step; once the script
is exhausted the last step repeats (or, with ``repeat_last=False``, the stub
answers 500 "stub script exhausted"). A ``reply`` step is protocol-neutral and
rendered in the shape of the endpoint it is served on, so one script can drive
both protocols. A step may also be a callable ``(RecordedRequest) -> Step`` for
replies that depend on what was sent.

As a script, for subprocess tests:

    python tests/support/llm_stub.py --port 0 --script steps.json [--record requests.jsonl]

prints ``LISTENING http://127.0.0.1:PORT/v1`` once serving. ``steps.json`` is a
list of steps, or ``{"steps": [...], "repeat_last": true}``; a step is
``{"reply": {"content": ..., "tool_calls": [...], "prompt_tokens": N,
"completion_tokens": N}}``, ``{"status": 429, "headers": {...}, "body": ...}``,
``{"malformed": "text"}``, ``{"dribble": 2.0}`` (a reply's headers, then one
byte of its body every 2 s) or ``{"endless": true}`` (headers, then a body that
never ends), each with an optional ``"delay_s"``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from core.modelserver import ScriptedToolCall, Turn, Usage
from core.modelserver.protocols import ANTHROPIC, CHAT, Wire


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] | str  # a str is sent verbatim (lets tests send broken JSON)
    id: str | None = None


@dataclass(frozen=True)
class ChatReply:
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int = 10
    completion_tokens: int = 5
    finish_reason: str | None = None  # default: "tool_calls"/"stop" (stop_reason likewise)


@dataclass(frozen=True)
class Step:
    """One scripted answer: a chat reply, or a raw status/body, after an optional delay."""

    reply: ChatReply | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None  # JSON-encoded when not a str; a str is sent as is
    delay_s: float = 0.0
    # How the body is sent: at once; one byte every `interval_s` after the
    # headers ("dribble"); or as bytes that never end ("endless").
    stream: Literal["whole", "dribble", "endless"] = "whole"
    interval_s: float = 2.0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Step:
        delay = float(data.get("delay_s", 0.0))
        if "reply" in data:
            spec = dict(data["reply"])
            calls = spec.pop("tool_calls", None) or []
            return reply(tool_calls=[_tool_call(c) for c in calls], delay_s=delay, **spec)
        if "malformed" in data:
            return malformed(str(data["malformed"]), delay_s=delay)
        if "dribble" in data:
            return dribble(interval_s=float(data["dribble"]))
        if "endless" in data:
            return endless()
        return status(int(data["status"]), data.get("headers"), data.get("body"), delay)


ScriptItem = Step | Callable[["RecordedRequest"], Step]


def reply(
    content: str | None = None,
    tool_calls: Sequence[ToolCall | dict[str, Any]] = (),
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    finish_reason: str | None = None,
    delay_s: float = 0.0,
) -> Step:
    """A chat reply; tool calls as ToolCall or {"name", "arguments", "id"?} dicts."""
    calls = tuple(_tool_call(c) for c in tool_calls)
    return Step(
        reply=ChatReply(content, calls, prompt_tokens, completion_tokens, finish_reason),
        delay_s=delay_s,
    )


def status(
    code: int, headers: dict[str, str] | None = None, body: Any = None, delay_s: float = 0.0
) -> Step:
    """An HTTP status with optional headers and body, e.g. ``status(429, {"Retry-After": "1"})``."""
    body = {"error": {"message": f"stub status {code}"}} if body is None else body
    return Step(status=code, headers=headers or {}, body=body, delay_s=delay_s)


def malformed(text: str = "this is not JSON {", delay_s: float = 0.0) -> Step:
    """A 200 whose body is not JSON."""
    return Step(status=200, body=text, delay_s=delay_s)


def slow(seconds: float, step: Step | None = None) -> Step:
    """``step`` (default: a plain reply) after ``seconds``; long enough = never answers."""
    base = step or reply(content="late")
    return Step(base.reply, base.status, base.headers, base.body, seconds)


def dribble(step: Step | None = None, interval_s: float = 2.0) -> Step:
    """``step`` (default: a plain reply) with its headers at once, then its body one byte
    every ``interval_s``: each read is quick, the whole never arrives in time."""
    base = step or reply(content="late")
    return Step(base.reply, base.status, base.headers, base.body, stream="dribble",
                interval_s=interval_s)  # fmt: skip


def endless() -> Step:
    """A 200 whose body never ends (no Content-Length), sent as fast as the client reads."""
    return Step(status=200, body="", stream="endless")


def scripted_judge(
    scores: Mapping[str, Sequence[float]], model_scores: Mapping[str, float] | None = None
) -> Callable[[RecordedRequest], Step]:
    """A deterministic judge for one criterion `quality`: the request whose prompt names
    marker M gets, on its n-th request naming M, the score ``scores[M][n]`` (its last
    score once they run out), whatever order concurrent runs ask in. With
    `model_scores`, a request for one of those judge models gets its fixed score instead.
    Every answer gives a reason, "scripted N"."""
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def answer(request: RecordedRequest) -> Step:
        prompt = json.dumps(request.body)
        model = str((request.body or {}).get("model"))
        if model_scores and model in model_scores:
            return _judge_answer(model_scores[model])
        named = [m for m in scores if m in prompt]
        if len(named) != 1:
            return status(400, body={"error": {"message": f"markers in prompt: {named}"}})
        with lock:
            n = seen.get(named[0], 0)
            seen[named[0]] = n + 1
        script = scores[named[0]]
        return _judge_answer(script[min(n, len(script) - 1)])

    return answer


def _judge_answer(score: float) -> Step:
    body = {
        "scores": {"quality": score},
        "reasons": {"quality": f"scripted {score:g}"},
        "weighted_score": score,
        "confidence": 0.9,
        "issues": [],
        "highlights": [],
    }
    return reply(content=json.dumps(body))


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON, or None when the body was not JSON
    raw: bytes


def _tool_call(call: ToolCall | dict[str, Any]) -> ToolCall:
    if isinstance(call, ToolCall):
        return call
    return ToolCall(name=call["name"], arguments=call.get("arguments", {}), id=call.get("id"))


def _rendered(wire: Wire) -> Callable[[ChatReply, itertools.count[int]], Any]:
    """A reply in `wire`'s shape, rendered as the scripted model server renders its
    turns (core.modelserver): one rendering of each protocol for the product and tests."""

    def render(r: ChatReply, call_ids: itertools.count[int]) -> Any:
        calls = [ScriptedToolCall(name=c.name, arguments=c.arguments, id=c.id)
                 for c in r.tool_calls]  # fmt: skip
        turn = Turn.model_construct(  # content and calls may both be empty, as the stub may
            text=r.content, tool_calls=calls, error=None, delay_s=0.0,
            usage=Usage(input_tokens=r.prompt_tokens, output_tokens=r.completion_tokens),
        )  # fmt: skip
        answer = wire.reply(turn, "stub", False, lambda prefix: f"{prefix}_{next(call_ids)}")
        assert isinstance(answer.body, bytes)
        body = json.loads(answer.body)
        if r.finish_reason is not None:
            if wire is CHAT:
                body["choices"][0]["finish_reason"] = r.finish_reason
            else:
                body["stop_reason"] = r.finish_reason
        return body

    return render


_RENDERERS = {"/v1/chat/completions": _rendered(CHAT), "/v1/messages": _rendered(ANTHROPIC)}


class LLMStub:
    def __init__(
        self,
        script: Sequence[ScriptItem],
        *,
        repeat_last: bool = True,
        port: int = 0,
        record_path: Path | None = None,
    ):
        if not script:
            raise ValueError("LLMStub needs at least one scripted step")
        self.requests: list[RecordedRequest] = []
        self._script = list(script)
        self._repeat_last = repeat_last
        self._next = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._call_ids = itertools.count(1)
        self._record_path = record_path
        self._server = _Server(("127.0.0.1", port), _handler_for(self))
        # A short poll interval keeps close() quick (shutdown waits for one poll).
        serve = partial(self._server.serve_forever, poll_interval=0.05)
        self._thread = threading.Thread(target=serve, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LLMStub:
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread (script mode) until interrupted."""
        try:
            self._server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self._server.server_close()

    def close(self) -> None:
        """Stop serving; requests still waiting out a delay are dropped unanswered."""
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LLMStub:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _take(self, request: RecordedRequest) -> Step:
        with self._lock:
            self.requests.append(request)
            if self._record_path is not None:
                with self._record_path.open("a", encoding="utf-8") as out:
                    record = {"path": request.path, "headers": request.headers}
                    out.write(json.dumps({**record, "body": request.body}) + "\n")
            if self._next < len(self._script):
                item = self._script[self._next]
                self._next += 1
            elif self._repeat_last:
                item = self._script[-1]
            else:
                return status(500, body={"error": {"message": "stub script exhausted"}})
        return item(request) if callable(item) else item


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a handler stuck in a long delay must not block close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out and hang up are part of the tests, not errors.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler_for(stub: LLMStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw) if raw else None
            except json.JSONDecodeError:
                body = None
            headers = {k.lower(): v for k, v in self.headers.items()}
            step = stub._take(RecordedRequest(self.path, headers, body, raw))
            if step.delay_s and stub._stopping.wait(step.delay_s):
                return  # closing: never answer
            render = _RENDERERS.get(self.path)
            if step.reply is not None and render is None:
                self._send(404, {}, {"error": {"message": f"no endpoint {self.path}"}})
            elif step.stream == "endless":
                self._send_endless()
            elif step.reply is not None and render is not None:
                self._send(200, {}, render(step.reply, stub._call_ids), step)
            else:
                self._send(step.status, step.headers, step.body, step)

        def _send(
            self, code: int, headers: dict[str, str], body: Any, step: Step | None = None
        ) -> None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if step is None or step.stream != "dribble":
                self.wfile.write(data)
                return
            for byte in data:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                if stub._stopping.wait(step.interval_s):
                    return

        def _send_endless(self) -> None:
            # HTTP/1.0 without Content-Length: the body lasts until the connection does.
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"choices": [{"message": {"content": "')
            chunk = b"x" * 65536
            while not stub._stopping.is_set():
                self.wfile.write(chunk)

    return Handler


def load_script(path: Path) -> tuple[list[ScriptItem], bool]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, list):
        data = {"steps": data}
    return [Step.from_json(s) for s in data["steps"]], bool(data.get("repeat_last", True))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Scripted OpenAI/Anthropic-compatible stub server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", type=Path, required=True)
    parser.add_argument("--record", type=Path, help="append each request as a JSON line")
    args = parser.parse_args(argv)
    steps, repeat_last = load_script(args.script)
    stub = LLMStub(steps, repeat_last=repeat_last, port=args.port, record_path=args.record)
    print(f"LISTENING {stub.base_url}", flush=True)
    stub.serve_forever()


if __name__ == "__main__":
    main()
