"""The process's Gemini API key never reaches a record, a message or a log line, even when the
upstream echoes it in its error text (real google-genai client, real HTTP, the real engine)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import SecretStr
from tests.engine.fakes import CountingToolbox, make_loop

from ackloop.keys import run_id_for_request
from ackloop.model.gemini import build_gemini_model
from ackloop.records import RunStatus
from ackloop.settings import Settings
from ackloop.wire import QueryMessage

KEY = "plain-looking-key-7d1f0c2b"  # no known token shape: only registration can mask it


@pytest.fixture
def echoing_upstream() -> Iterator[tuple[str, list[int]]]:
    """A Gemini-compatible endpoint that refuses every call, quoting the caller's key."""
    statuses = [503, 400]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            key = self.headers.get("x-goog-api-key", "")
            code = statuses.pop(0) if len(statuses) > 1 else statuses[0]
            body = json.dumps({"error": {
                "code": code, "status": "INVALID_ARGUMENT" if code == 400 else "UNAVAILABLE",
                "message": f"API key {key} rejected (key={key})"}}).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", statuses
    finally:
        server.shutdown()
        server.server_close()


async def test_an_echoed_key_is_masked_in_every_record_message_and_log(
    echoing_upstream: tuple[str, list[int]], caplog: pytest.LogCaptureFixture
) -> None:
    url, _ = echoing_upstream
    settings = Settings(model_provider="gemini", gemini_api_key=SecretStr(KEY),
                        gemini_base_url=url, retry_wait_seconds=0)
    loop = make_loop(build_gemini_model(settings), CountingToolbox(), settings=settings)
    caplog.set_level(logging.DEBUG)

    await loop.submit(QueryMessage(request_id="leak", text="hello"))
    await loop.run_until_idle()

    run_id = run_id_for_request("leak")
    run = await loop.deps.store.get_run(run_id)
    assert run is not None and run.status is RunStatus.FAILED
    assert run.error is not None and "rejected" in run.error  # the upstream's words survive
    steps = await loop.deps.store.get_steps(run_id, ["0000-model"])
    stored = json.dumps([run.model_dump(mode="json"),
                         [s.model_dump(mode="json") for s in steps if s]])
    published = json.dumps([a.model_dump(mode="json") for a in loop.answers])
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert loop.answers and "rejected" in published
    for where, text in (("records", stored), ("answers", published), ("logs", logged)):
        assert KEY not in text, f"the key leaked into {where}"
