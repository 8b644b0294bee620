"""The scripted loopback LLM server of tests/agent, plus the models list: ``GET .../models``.

`kgen doctor` asks each configured endpoint for its models list through the real SDK
(``client.models.list()``: ``GET /v1/models`` in both protocols), and falls back to a
one-token completion when the server has none. This server answers that list in the shape of
the protocol whose SDK asked (the Anthropic SDK sends ``anthropic-version``):

    with ModelsListServer(models=["gpt-5"]) as server:      # lists gpt-5
    with ModelsListServer() as server:                      # no models list: 404
        server.script_models([Reply.error(401)])             # scripted replies come first
        server.script_models([Trickle(0.2)])                 # a body that never ends

Completions are the base server's (``server.script("openai", [...])``).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import llm_server
from llm_server import RecordedRequest, Reply, ScriptedLLMServer

__all__ = ["ModelsListServer", "RecordedRequest", "Reply", "Trickle"]


@dataclass(frozen=True)
class Trickle:
    """A 200 whose body comes one byte every ``interval_s`` seconds and never ends (until the
    client hangs up or the server closes): a per-read timeout never fires on it."""

    interval_s: float = 0.2


class ModelsListServer(ScriptedLLMServer):
    def __init__(self, models: Iterable[str] | None = None) -> None:
        super().__init__()
        #: the names ``GET .../models`` lists; None: the server has no models list (404)
        self.models: list[str] | None = None if models is None else list(models)
        self._models_script: deque[Reply | Trickle] = deque()
        self._models_requests: list[RecordedRequest] = []

    def script_models(self, replies: Iterable[Reply | Trickle]) -> None:
        """Answer the next models-list requests with these, in order (errors, hangs, ...)."""
        with self._lock:
            self._models_script.extend(replies)

    @property
    def models_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._models_requests)

    def _next_models_reply(self, request: RecordedRequest) -> Reply | Trickle | None:
        with self._lock:
            self._models_requests.append(request)
            return self._models_script.popleft() if self._models_script else None

    def _handler(self) -> type:
        return _with_models_list(self, llm_server._make_handler(self))

    def __enter__(self) -> ModelsListServer:
        return self.start()


def _with_models_list(server: ModelsListServer, base: type) -> type:
    class Handler(base):
        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            headers = {k.lower(): v for k, v in self.headers.items()}
            protocol = "anthropic" if "anthropic-version" in headers else "openai"
            if not path.endswith("/models"):
                self._send(404, llm_server._error_body(protocol, 404, f"no route GET {path}"))
                return
            request = RecordedRequest(route="models", path=path, headers=headers, body={})  # type: ignore[arg-type]
            reply = server._next_models_reply(request)
            if isinstance(reply, Trickle):
                self._trickle_forever(reply.interval_s)
                return
            if reply is None:
                if server.models is None:  # a server without a models list
                    self._send(404, llm_server._error_body(protocol, 404, f"no route GET {path}"))
                else:
                    self._send(200, _models_list(protocol, server.models))
                return
            if reply.delay_s:
                server._wait(reply.delay_s)
            if reply.kind == "error":
                self._send(reply.status, llm_server._error_body(protocol, reply.status, reply.message))
            elif reply.kind == "malformed":
                self._send_raw(200, reply.body)
            else:
                self._send(200, _models_list(protocol, server.models or []))

        def _trickle_forever(self, interval_s: float) -> None:
            self.close_connection = True
            data = json.dumps(_models_list("openai", ["slow"])).encode()
            try:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data) * 1000))
                self.end_headers()
                index = 0
                while not server._closing.is_set():
                    self.wfile.write(data[index % len(data):index % len(data) + 1])
                    self.wfile.flush()
                    index += 1
                    server._wait(interval_s)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up, as it should

    return Handler


def _models_list(protocol: str, names: list[str]) -> dict[str, Any]:
    if protocol == "openai":
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "scripted"} for name in names
        ]}
    return {
        "data": [{"id": name, "type": "model", "display_name": name,
                  "created_at": "2025-01-01T00:00:00Z"} for name in names],
        "has_more": False,
        "first_id": names[0] if names else None,
        "last_id": names[-1] if names else None,
    }
