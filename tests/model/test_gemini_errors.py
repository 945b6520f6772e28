"""Every way a Gemini call fails maps to the right ackloop error, through the real SDK."""

from __future__ import annotations

import email.utils
import socket
import time

import pytest

from ackloop.domain.errors import ModelPermanentError, ModelRetryableError
from ackloop.model.base import ModelRequest
from ackloop.model.gemini import GeminiModel
from ackloop.model.gemini_errors import parse_retry_after_header
from ackloop_dev.fakes.gemini_server import FakeGeminiServer

REQUEST = ModelRequest(
    model="gemini-test",
    system_instruction="",
    contents=[{"role": "user", "parts": [{"text": "tell me a joke"}]}],
)


@pytest.mark.parametrize(
    ("fault", "retry_after"),
    [("429:12", 12.0), ("429-details:7", 7.0), ("429", None), ("500", None), ("503", None)],
)
async def test_retryable_statuses(fault: str, retry_after: float | None) -> None:
    with FakeGeminiServer(faults=fault) as server:
        with pytest.raises(ModelRetryableError) as caught:
            await GeminiModel(api_key="k", base_url=server.url).generate(REQUEST)
        requests = server.stats()["requests"]

    assert caught.value.retry_after == retry_after
    assert requests == 1  # the SDK did not retry on its own


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("400", "model_invalid_request"),
        ("403", "model_permission_denied"),
        ("safety", "model_safety_block"),
        ("safety-finish", "model_safety_block"),
        ("empty", "model_empty_response"),
        ("no-content", "model_empty_response"),
        ("malformed", "model_malformed_response"),
    ],
)
async def test_permanent_failures(fault: str, reason: str) -> None:
    with FakeGeminiServer(faults=fault) as server, pytest.raises(ModelPermanentError) as caught:
        await GeminiModel(api_key="k", base_url=server.url).generate(REQUEST)

    assert caught.value.reason == reason


async def test_slow_answer_times_out_as_retryable_and_the_next_call_succeeds() -> None:
    with FakeGeminiServer(faults="delay:5") as server:
        model = GeminiModel(api_key="k", base_url=server.url, timeout_seconds=0.3)
        started = time.monotonic()
        with pytest.raises(ModelRetryableError, match="timed out"):
            await model.generate(REQUEST)
        elapsed = time.monotonic() - started
        turn = await model.generate(REQUEST)

    assert elapsed < 3
    assert turn.text is not None and len(turn.text.splitlines()) == 3


async def test_request_timeout_can_only_shorten_the_model_timeout() -> None:
    short = REQUEST.model_copy(update={"timeout_seconds": 0.3})
    with FakeGeminiServer(faults="delay:5") as server:
        started = time.monotonic()
        with pytest.raises(ModelRetryableError):
            await GeminiModel(api_key="k", base_url=server.url, timeout_seconds=30).generate(short)

    assert time.monotonic() - started < 3


async def test_connection_refused_is_retryable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port now.
    with pytest.raises(ModelRetryableError, match="failed"):
        await GeminiModel(api_key="k", base_url=f"http://127.0.0.1:{port}").generate(REQUEST)


async def test_contents_that_do_not_fit_gemini_are_permanent_without_a_request(
    fake_gemini: FakeGeminiServer, gemini: GeminiModel
) -> None:
    bad = REQUEST.model_copy(update={"contents": [{"role": "user", "parts": [{"nope": 1}]}]})
    with pytest.raises(ModelPermanentError) as caught:
        await gemini.generate(bad)

    assert caught.value.reason == "model_invalid_request"
    assert fake_gemini.stats()["requests"] == 0


def test_retry_after_header_accepts_seconds_and_http_dates() -> None:
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)

    assert parse_retry_after_header("30") == 30.0
    assert 8.0 <= (parse_retry_after_header(in_ten) or 0.0) <= 10.0
    assert parse_retry_after_header("soon") is None
