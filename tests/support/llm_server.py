"""A loopback LLM server speaking the OpenAI and Anthropic HTTP protocols with scripted replies.

Tests drive the real ``openai`` and ``anthropic`` SDKs against it, so retries, timeouts, error
classes and response parsing are the SDKs' own, exactly as with a real provider; only the
replies are scripted. One server answers both protocols:

* ``.../chat/completions`` (OpenAI chat completions; ``openai_base_url`` ends in ``/v1``),
* ``.../messages`` (Anthropic messages; the SDK appends ``/v1/messages`` to
  ``anthropic_base_url``, which therefore has no ``/v1``).

Routes are matched on the path's ending, so a base URL with or without ``/v1`` both work.
Besides answers and HTTP errors, a reply can misbehave the ways real servers do: answer late
(``Reply.hang``), never answer (``Reply.silent``), or trickle its body a byte at a time
(``Reply.trickle``), which no per-read timeout catches; ``hangups`` records when a client let
go of such a connection.

    with ScriptedLLMServer() as server:
        server.script("openai", [Reply.error(429, retry_after_s=0.01), Reply.text("hi")])
        ...  # point a client at server.openai_base_url
        assert len(server.requests) == 2
"""

from __future__ import annotations

import json
import math
import select
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Route = Literal["openai", "anthropic"]
Responder = Callable[["RecordedRequest"], "Reply"]


@dataclass(frozen=True)
class Reply:
    """One scripted answer; build it with the class methods, not the constructor."""

    kind: Literal["text", "error", "malformed", "silent", "trickle"]
    content: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    # Protocol-neutral stop: rendered as "stop"/"length" (OpenAI) or "end_turn"/"max_tokens".
    stop: Literal["stop", "length"] = "stop"
    status: int = 200
    message: str = ""
    retry_after_s: float | None = None
    delay_s: float = 0.0
    body: bytes = b""
    #: "trickle": seconds between two bytes of the reply
    interval_s: float = 1.0

    @classmethod
    def text(
        cls,
        content: str,
        *,
        input_tokens: int = 10,
        output_tokens: int = 5,
        stop: Literal["stop", "length"] = "stop",
        delay_s: float = 0.0,
    ) -> Reply:
        """A successful completion with the given usage; ``delay_s`` waits before answering."""
        return cls(
            kind="text",
            content=content,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            stop=stop,
            delay_s=delay_s,
        )

    @classmethod
    def error(cls, status: int, message: str = "", *, retry_after_s: float | None = None) -> Reply:
        """An HTTP error in the protocol's own error shape (429 may carry a retry-after)."""
        return cls(kind="error", status=status, message=message, retry_after_s=retry_after_s)

    @classmethod
    def hang(cls, seconds: float) -> Reply:
        """Answer only after ``seconds`` (longer than the client's timeout makes it time out).

        The wait ends early when the server closes, so a hung reply never slows test teardown.
        """
        return cls.text("too late", delay_s=seconds)

    @classmethod
    def silent(cls) -> Reply:
        """Never answer: the request is read and the connection held open, without a byte back,
        until the client hangs up or the server closes (a provider that stalls)."""
        return cls(kind="silent")

    @classmethod
    def trickle(cls, content: str = "slow", *, interval_s: float = 1.0) -> Reply:
        """A 200 whose body comes one byte every ``interval_s`` seconds, until the client hangs
        up or the server closes: each read gets a byte in time, so a per-read timeout (the SDKs'
        own) never fires; only an overall deadline ends it."""
        return cls(kind="trickle", content=content, interval_s=interval_s)

    @classmethod
    def malformed(cls, body: bytes = b'{"id": "broken", "choices": [') -> Reply:
        """A 200 with a JSON content type whose body is not the protocol's JSON."""
        return cls(kind="malformed", body=body)


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received, for assertions (headers are lower-cased)."""

    route: Route
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float = field(default_factory=time.monotonic)

    @property
    def model(self) -> str | None:
        return self.body.get("model")

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))


class ScriptedLLMServer:
    """A ThreadingHTTPServer on 127.0.0.1 (free port) in a background thread.

    Each route answers from its queue of scripted replies, else from its responder callable;
    with neither, it answers 418 with ``x-should-retry: false`` so a test that forgot to script
    a reply fails at once instead of sitting in SDK retries.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[Route, deque[Reply]] = {"openai": deque(), "anthropic": deque()}
        self._responders: dict[Route, Responder] = {}
        self._requests: list[RecordedRequest] = []
        self._closing = threading.Event()
        self._hangups: list[float] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def _handler(self) -> type:
        """The request handler class (a subclass may wrap it to add routes)."""
        return _make_handler(self)

    def start(self) -> ScriptedLLMServer:
        handler = self._handler()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- addresses ---------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def openai_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- scripting ---------------------------------------------------------------------------
    def script(self, route: Route, replies: Iterable[Reply]) -> None:
        """Queue replies for ``route``; they are served in order, one per request."""
        with self._lock:
            self._queues[route].extend(replies)

    def respond_with(self, route: Route, responder: Responder) -> None:
        """Decide replies from the request (model, messages) once the route's queue is empty."""
        with self._lock:
            self._responders[route] = responder

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_for(self, route: Route) -> list[RecordedRequest]:
        return [r for r in self.requests if r.route == route]

    @property
    def hangups(self) -> list[float]:
        """``time.monotonic()`` of each moment a client hung up on a silent or trickling reply
        (a test can check that a call given up on really let go of its connection)."""
        with self._lock:
            return list(self._hangups)

    def pending(self, route: Route) -> int:
        """Scripted replies not yet served (a test can assert its script was used up)."""
        with self._lock:
            return len(self._queues[route])

    # -- used by the handler -----------------------------------------------------------------
    def _next_reply(self, request: RecordedRequest) -> Reply | None:
        with self._lock:
            self._requests.append(request)
            queue = self._queues[request.route]
            if queue:
                return queue.popleft()
            responder = self._responders.get(request.route)
        return responder(request) if responder is not None else None

    def _wait(self, seconds: float) -> None:
        self._closing.wait(seconds)

    def _hung_up(self) -> None:
        with self._lock:
            self._hangups.append(time.monotonic())


def _make_handler(server: ScriptedLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' connection pools expect

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # quiet: tests assert on recorded requests, not on stderr

        def handle(self) -> None:
            try:
                super().handle()
            except (ConnectionResetError, BrokenPipeError):
                pass  # the client closed its connection (each model call has its own)

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            route: Route | None
            if path.endswith("/chat/completions"):
                route = "openai"
            elif path.endswith("/messages"):
                route = "anthropic"
            else:
                route = None
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            if route is None:
                self._send(404, {"error": {"message": f"no route {path}"}})
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                body = {"_unparsed": raw.decode("utf-8", "replace")}
            headers = {k.lower(): v for k, v in self.headers.items()}
            request = RecordedRequest(route=route, path=path, headers=headers, body=body)
            reply = server._next_reply(request)
            if reply is None:
                message = f"no scripted reply left for route {route!r}"
                self._send(418, _error_body(route, 418, message), {"x-should-retry": "false"})
                return
            if reply.delay_s:
                server._wait(reply.delay_s)
            if reply.kind == "silent":
                self._hold_silently()
            elif reply.kind == "trickle":
                payload = (_openai_completion(reply, request.model) if route == "openai"
                           else _anthropic_message(reply, request.model))
                self._trickle(json.dumps(payload).encode(), reply.interval_s)
            elif reply.kind == "malformed":
                self._send_raw(200, reply.body)
            elif reply.kind == "error":
                self._send(reply.status, _error_body(route, reply.status, reply.message),
                           _retry_headers(reply.retry_after_s))
            elif route == "openai":
                self._send(200, _openai_completion(reply, request.model))
            else:
                self._send(200, _anthropic_message(reply, request.model))

        def _client_gone(self) -> bool:
            """Whether the client closed its end (readable with nothing to read)."""
            try:
                readable, _, _ = select.select([self.connection], [], [], 0)
                return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True

        def _hold_silently(self) -> None:
            while not server._closing.is_set():
                if self._client_gone():
                    server._hung_up()
                    break
                server._wait(0.05)
            self.close_connection = True

        def _trickle(self, data: bytes, interval_s: float) -> None:
            self.close_connection = True
            try:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                # announce the whole body, then send it so slowly that it (nearly) never ends
                self.send_header("content-length", str(len(data) * 1000))
                self.end_headers()
                self.wfile.flush()
                index = 0
                while not server._closing.is_set():
                    if self._client_gone():
                        server._hung_up()
                        return
                    self.wfile.write(data[index % len(data):index % len(data) + 1])
                    self.wfile.flush()
                    index += 1
                    server._wait(interval_s)
            except (BrokenPipeError, ConnectionResetError):
                server._hung_up()

        def _send(self, status: int, payload: dict[str, Any],
                  headers: dict[str, str] | None = None) -> None:
            self._send_raw(status, json.dumps(payload).encode(), headers)

        def _send_raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("x-request-id", f"req_{uuid.uuid4().hex[:16]}")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timed out) before we answered

    return Handler


def _retry_headers(retry_after_s: float | None) -> dict[str, str]:
    if retry_after_s is None:
        return {}
    return {
        "retry-after": str(max(0, math.ceil(retry_after_s))),
        "retry-after-ms": str(int(retry_after_s * 1000)),
    }


_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _error_body(route: Route, status: int, message: str) -> dict[str, Any]:
    message = message or f"scripted error {status}"
    if route == "openai":
        kind = _OPENAI_ERROR_TYPES.get(status, "server_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}
    kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _openai_completion(reply: Reply, model: str | None) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model or "unknown",
        "system_fingerprint": "fp_scripted",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content, "refusal": None},
                "logprobs": None,
                "finish_reason": reply.stop,
            }
        ],
        "usage": {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        },
    }


def _anthropic_message(reply: Reply, model: str | None) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model or "unknown",
        "content": [{"type": "text", "text": reply.content}],
        "stop_reason": "end_turn" if reply.stop == "stop" else "max_tokens",
        "stop_sequence": None,
        "usage": {
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
