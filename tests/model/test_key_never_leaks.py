"""The process's Gemini API key never reaches a record, a message or a log line, even when the
upstream echoes it in its error text (real google-genai client, real HTTP, the real engine)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from pydantic import SecretStr
from tests.engine.fakes import CountingToolbox, make_loop
from tests.support.json_server import json_server

from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import QueryMessage
from ackloop.model.gemini import build_gemini_model

KEY = "plain-looking-key-7d1f0c2b"  # no known token shape: only registration can mask it


@pytest.fixture
def echoing_upstream() -> Iterator[str]:
    """A Gemini-compatible endpoint that refuses every call, quoting the caller's key: 503
    first, then 400."""
    statuses = [503, 400]

    def respond(_: str, headers: Mapping[str, str]) -> tuple[int, Any]:
        key = next((v for k, v in headers.items() if k.lower() == "x-goog-api-key"), "")
        code = statuses.pop(0) if len(statuses) > 1 else statuses[0]
        return code, {"error": {
            "code": code, "status": "INVALID_ARGUMENT" if code == 400 else "UNAVAILABLE",
            "message": f"API key {key} rejected (key={key})"}}

    with json_server(respond) as url:
        yield url


async def test_an_echoed_key_is_masked_in_every_record_message_and_log(
    echoing_upstream: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = echoing_upstream
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
