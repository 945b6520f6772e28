"""A tiny real HTTP server on 127.0.0.1 answering every POST with JSON, for tests that need an
upstream to call (a Cloud Scheduler target, a Gemini-compatible endpoint that misbehaves)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Respond = Callable[[str, Mapping[str, str]], tuple[int, Any]]
"""(path, request headers) -> (status, JSON body)."""


@contextlib.contextmanager
def json_server(respond: Respond, received: list[Any] | None = None) -> Iterator[str]:
    """Serve ``respond`` on a free loopback port; yields the base URL. ``received`` collects
    each request's JSON body."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else b""
            if received is not None:
                received.append(json.loads(data) if data else None)
            status, payload = respond(self.path, dict(self.headers))
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
