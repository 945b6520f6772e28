"""A real HTTP push endpoint on 127.0.0.1 for the push delivery's tests: it answers each push
as a script says and records what arrived, when, and how many pushes were open at once."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int = 204
    delay_s: float = 0.0
    """How long the endpoint works before answering (it finishes even if the caller left)."""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Push:
    """One request as the endpoint saw it."""

    envelope: dict[str, Any]
    arrived: float
    """time.monotonic() on arrival."""
    finished: float | None = None
    status: int | None = None
    open_on_arrival: int = 0
    """Pushes being worked on when this one arrived (itself included)."""

    @property
    def message_id(self) -> str:
        return str(self.envelope["message"]["messageId"])


Script = Callable[[int, dict[str, Any]], Answer]
"""(index of the request among all requests so far, its envelope) -> the answer."""


def fail_then_succeed(failures: int, status: int = 503,
                      headers: Callable[[int], dict[str, str]] | None = None) -> Script:
    """Answer ``status`` to each message's first ``failures`` pushes, 204 afterwards."""
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def script(_: int, envelope: dict[str, Any]) -> Answer:
        with lock:
            key = envelope["message"]["messageId"]
            seen[key] = seen.get(key, 0) + 1
            n = seen[key]
        if n <= failures:
            return Answer(status, headers=headers(n) if headers else {})
        return Answer(204)

    return script


class Endpoint:
    """The server; ``url`` is where to push."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.pushes: list[Push] = []
        self._open = 0
        self.max_open = 0
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                endpoint._handle(self, json.loads(body))

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _handle(self, handler: BaseHTTPRequestHandler, envelope: dict[str, Any]) -> None:
        with self._lock:
            index = len(self.pushes)
            self._open += 1
            self.max_open = max(self.max_open, self._open)
            push = Push(envelope, time.monotonic(), open_on_arrival=self._open)
            self.pushes.append(push)
        answer = self.script(index, envelope)
        try:
            time.sleep(answer.delay_s)
            with contextlib.suppress(OSError):  # the caller may have given up (ack deadline)
                handler.send_response(answer.status)
                for name, value in answer.headers.items():
                    handler.send_header(name, value)
                handler.send_header("Content-Length", "0")
                handler.end_headers()
        finally:
            with self._lock:
                self._open -= 1
                push.finished, push.status = time.monotonic(), answer.status

    def of(self, message_id: str) -> list[Push]:
        """The pushes of one message, in arrival order."""
        with self._lock:
            return [p for p in self.pushes if p.message_id == message_id]

    def wait_for(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"not after {timeout_s} s: {what}; pushes: {len(self.pushes)}")
            time.sleep(0.01)

    @contextlib.contextmanager
    def running(self) -> Iterator[Endpoint]:
        self._thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
