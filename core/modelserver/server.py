"""The scripted model server: HTTP on loopback, answering every model call from a
`ModelScript` and recording every request.

    with ModelServer(load_model_script("script.yaml"), record=Path("requests.jsonl")) as server:
        env = server.environment()   # ANTHROPIC_BASE_URL, OPENAI_BASE_URL, ...
        ...
        server.model_requests()      # what each model call asked and was answered

The same records are served at `GET /_evalfleet/requests`. Credentials a client sends
(Authorization, x-api-key, x-goog-api-key, a `key=` query) are recorded as
"[redacted]": a real key pointed here by mistake is never written down.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
import threading
from collections import defaultdict
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from core.modelserver.protocols import Answer, Wire, wire_for
from core.modelserver.script import ModelScript, Turn
from core.results.record import Record

REQUESTS_PATH = "/_evalfleet/requests"
REDACTED = "[redacted]"
_SECRET_HEADERS = {"authorization", "x-api-key", "x-goog-api-key", "api-key", "cookie"}
_SECRET_QUERY = {"key", "api_key"}


class ServedRequest(Record):
    """One request the server received and how it answered."""

    seq: int  # arrival order, from 0
    method: str
    path: str  # with its query, credentials redacted
    protocol: str | None  # anthropic | openai-chat | openai-responses | gemini; None: no model call
    model: str | None = None
    stream: bool = False
    turn: int | None = None  # the script's turn that answered, from 0
    status: int
    headers: dict[str, str]
    body: Any = None  # the JSON sent, or None


class ModelServer:
    def __init__(
        self,
        script: ModelScript | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        record: Path | None = None,
    ):
        self.script = script or ModelScript()
        self._record = record
        self._requests: list[ServedRequest] = []
        self._errors_served: defaultdict[tuple[str, int], int] = defaultdict(int)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server = _Server((host, port), _handler_for(self))
        serve = partial(self._server.serve_forever, poll_interval=0.05)
        self._thread = threading.Thread(target=serve, daemon=True, name="model-server")

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{host}:{self.port}"

    def environment(self) -> dict[str, str]:
        """The variables that point each agent CLI's provider at this server."""
        return {
            "ANTHROPIC_BASE_URL": self.base_url,
            "OPENAI_BASE_URL": f"{self.base_url}/v1",
            "GOOGLE_GEMINI_BASE_URL": self.base_url,
        }

    def requests(self) -> list[ServedRequest]:
        with self._lock:
            return list(self._requests)

    def model_requests(self) -> list[ServedRequest]:
        """The model calls among the requests (each got a scripted turn or error)."""
        return [r for r in self.requests() if r.turn is not None]

    def start(self) -> ModelServer:
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (the CLI command)."""
        try:
            self._server.serve_forever(poll_interval=0.2)
        finally:
            self._stopping.set()
            self._server.server_close()

    def close(self) -> None:
        """Stop serving; a request still waiting out its delay is dropped unanswered."""
        self._stopping.set()
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def choose(self, wire: Wire, body: dict[str, Any]) -> int:
        """The index of the turn that answers this request of a conversation."""
        first = json.dumps(wire.first_user(body), sort_keys=True, default=str)
        conversation = hashlib.sha256(f"{wire.name}\0{first}".encode()).hexdigest()
        answered = wire.answers(body)
        turns = self.script.turns
        with self._lock:
            replies = 0
            for index, turn in enumerate(turns):
                if turn.error is not None:
                    key = (conversation if turn.error.per == "conversation" else "", index)
                    if replies == answered and self._errors_served[key] < turn.error.times:
                        self._errors_served[key] += 1
                        return index
                elif replies == answered:
                    return index
                else:
                    replies += 1
        return len(turns) - 1

    def answer(self, wire: Wire, path: str, body: dict[str, Any]) -> tuple[int, Turn, Answer]:
        index = self.choose(wire, body)
        turn = self.script.turns[index]
        if turn.error is not None:
            return index, turn, wire.error(turn.error)
        if turn.tool_calls and not wire.offers_tools(body):
            # A model cannot call a tool it was not given: a side request (a title,
            # a summary) gets the turn's text alone.
            turn = turn.model_copy(update={"tool_calls": [], "text": turn.text or "done"})
        model = wire.model(path, body)
        return index, turn, wire.reply(turn, model, wire.streams(path, body), self._new_id)

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids)}"

    def note(self, request: ServedRequest) -> ServedRequest:
        with self._lock:
            request = request.model_copy(update={"seq": len(self._requests)})
            self._requests.append(request)
            if self._record is not None:
                with self._record.open("a", encoding="utf-8") as out:
                    out.write(request.model_dump_json() + "\n")
        return request


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a handler waiting out a delay must not hold close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-answer (killed with its run) is not an error here.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _redacted_path(raw: str) -> str:
    parts = urlsplit(raw)
    if not parts.query:
        return parts.path
    query = [(k, REDACTED if k in _SECRET_QUERY else v) for k, v in parse_qsl(parts.query, True)]
    return f"{parts.path}?{urlencode(query, safe='[]')}"


# long: the request handler's class, made per server so that its methods reach
# the server; each method is short.
def _handler_for(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, and chunked streams

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == REQUESTS_PATH:
                data = [r.model_dump(mode="json") for r in server.requests()]
                self._send(Answer(200, json.dumps(data).encode()))
                return
            self._note(None, None, 200 if path.endswith("/models") else 404)
            if path.endswith("/models"):
                # A client that lists models first is told the one it will be answered as.
                model = {"id": "scripted", "object": "model", "type": "model"}
                self._send(Answer(200, json.dumps({"object": "list", "data": [model]}).encode()))
            else:
                self._send(Answer(404, b'{"error": {"message": "not found"}}'))

        def do_POST(self) -> None:
            raw = self._body()
            try:
                body = json.loads(raw) if raw else None
            except json.JSONDecodeError:
                body = None
            path = urlsplit(self.path).path
            wire = wire_for(path)
            if path.endswith("/count_tokens") or path.endswith(":countTokens"):
                self._note(None, body, 200)
                self._send(Answer(200, b'{"input_tokens": 100, "totalTokens": 100}'))
                return
            if wire is None or not isinstance(body, dict):
                self._note(None, body, 404 if wire is None else 400)
                message = "not a model endpoint" if wire is None else "the body is not JSON"
                status = 404 if wire is None else 400
                self._send(Answer(status, json.dumps({"error": {"message": message}}).encode()))
                return
            index, turn, answer = server.answer(wire, path, body)
            server.note(
                ServedRequest(
                    seq=0, method="POST", path=_redacted_path(self.path), protocol=wire.name,
                    model=wire.model(path, body), stream=answer.streamed, turn=index,
                    status=answer.status, headers=self._headers(), body=body,
                )
            )  # fmt: skip
            if turn.delay_s and server._stopping.wait(turn.delay_s):
                return
            self._send(answer)

        def _body(self) -> bytes:
            if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))
            # A client that streams its request (chunked) says no length up front.
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers, up to the blank line
                pass
            return b"".join(chunks)

        def _headers(self) -> dict[str, str]:
            return {
                k.lower(): REDACTED if k.lower() in _SECRET_HEADERS else v
                for k, v in self.headers.items()
            }

        def _note(self, protocol: str | None, body: Any, status: int) -> None:
            server.note(
                ServedRequest(
                    seq=0, method=self.command, path=_redacted_path(self.path), protocol=protocol,
                    status=status, headers=self._headers(), body=body,
                )
            )  # fmt: skip

        def _send(self, answer: Answer) -> None:
            self.send_response(answer.status)
            for name, value in answer.headers:
                self.send_header(name, value)
            if isinstance(answer.body, bytes):
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)
                return
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in answer.body:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler
