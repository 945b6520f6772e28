"""The streamed Gemini call through the real google-genai client against the fake server: its
text arrives in pieces while the call runs, and the turn it returns is the unary call's."""

from __future__ import annotations

import base64
import time

import httpx
import pytest

from ackloop.domain.errors import ModelPermanentError, ModelRetryableError
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.wire import Usage
from ackloop.model.base import ModelRequest, ModelTurn, StreamingModelClient
from ackloop.model.gemini import GeminiModel
from ackloop_dev.fakes.gemini_server import FakeGeminiServer

SIGNATURE = bytes([0xFB, 0xFF, 0xBF, 0x00, 0x3E, 0x3F]) * 4
ANSWER = "Streams arrive in pieces; the record keeps one turn, whatever the chunks."


def _request() -> ModelRequest:
    return ModelRequest(model="gemini-test", system_instruction="Be brief.",
                        contents=[{"role": "user", "parts": [{"text": "q"}]}])


def _turn(parts: list[JsonDict]) -> ModelTurn:
    return ModelTurn(parts=parts, usage=Usage(model_calls=1, prompt_tokens=5, output_tokens=9,
                                              total_tokens=14),
                     finish_reason="STOP", model_version="gemini-test-001")


MIXED = _turn([
    {"text": "thinking it over", "thought": True},
    {"text": ANSWER, "thought_signature": base64.urlsafe_b64encode(SIGNATURE).decode()},
    {"function_call": {"name": "a", "args": {"x": 1}, "id": "1"},
     "thought_signature": base64.urlsafe_b64encode(SIGNATURE).decode()},
    {"function_call": {"name": "b", "args": {}, "id": "2"}},
])


async def test_a_streamed_turn_is_the_unary_turn_and_its_text_comes_in_pieces() -> None:
    with FakeGeminiServer(lambda request: MIXED, stream_chunk_chars=7) as server:
        model = GeminiModel(api_key="k", base_url=server.url)
        unary = await model.generate(_request())
        pieces: list[str] = []
        streamed = await model.generate_streaming(_request(), pieces.append)
        chunks = [text for _, text in server.chunks_sent]

    assert isinstance(model, StreamingModelClient)
    assert streamed == unary  # parts (signatures, thoughts, calls), text, usage, finish, version
    assert streamed.parts[1]["text"] == ANSWER
    assert base64.urlsafe_b64decode(streamed.parts[1]["thought_signature"]) == SIGNATURE
    # The answer in pieces of 7 characters; thoughts and calls are not shown.
    assert "".join(pieces) == ANSWER == streamed.text
    assert len(pieces) == -(-len(ANSWER) // 7) and all(len(p) <= 7 for p in pieces)
    assert len(chunks) > len(pieces)  # the thought's chunks and the calls' were sent too


async def test_each_piece_is_handed_out_while_the_call_runs() -> None:
    """A piece reaches the caller before the next chunk is even sent."""
    seen: list[tuple[float, str]] = []
    with FakeGeminiServer(lambda request: _turn([{"text": ANSWER}]), stream_chunk_chars=10,
                          stream_delay=0.1) as server:
        model = GeminiModel(api_key="k", base_url=server.url)
        turn = await model.generate_streaming(_request(), lambda t: seen.append((time.time(), t)))
        sent = list(server.chunks_sent)

    assert turn.text == ANSWER == "".join(t for _, t in seen)
    for (got_at, text), (next_sent_at, _) in zip(seen, sent[1:], strict=False):
        assert got_at < next_sent_at, f"{text!r} arrived after the next chunk was sent"


async def test_a_failure_after_some_chunks_is_retryable_and_the_text_so_far_was_shown() -> None:
    with FakeGeminiServer(lambda request: _turn([{"text": ANSWER}]), faults="midstream:3",
                          stream_chunk_chars=5) as server:
        model = GeminiModel(api_key="k", base_url=server.url)
        pieces: list[str] = []
        with pytest.raises(ModelRetryableError, match="503"):
            await model.generate_streaming(_request(), pieces.append)
        again: list[str] = []
        turn = await model.generate_streaming(_request(), again.append)

    assert pieces == [ANSWER[0:5], ANSWER[5:10], ANSWER[10:15]]
    assert "".join(again) == turn.text == ANSWER


@pytest.mark.parametrize(("fault", "reason"), [("malformed", "model_malformed_response"),
                                               ("safety", "model_safety_block"),
                                               ("empty", "model_empty_response"),
                                               ("400", "model_invalid_request")])
async def test_a_streamed_call_fails_like_a_unary_one(fault: str, reason: str) -> None:
    with FakeGeminiServer(faults=f"{fault},{fault}") as server:
        model = GeminiModel(api_key="k", base_url=server.url)
        with pytest.raises(ModelPermanentError) as unary:
            await model.generate(_request())
        with pytest.raises(ModelPermanentError) as streamed:
            await model.generate_streaming(_request(), lambda text: None)

    assert streamed.value.reason == unary.value.reason == reason


async def test_a_429_in_a_stream_keeps_its_retry_after() -> None:
    with FakeGeminiServer(faults="429:7") as server, pytest.raises(ModelRetryableError) as error:
        await GeminiModel(api_key="k", base_url=server.url).generate_streaming(
            _request(), lambda text: None)

    assert error.value.retry_after == 7


def test_the_stream_settings_and_the_chunk_log_are_served_over_http() -> None:
    with FakeGeminiServer(lambda request: _turn([{"text": "abcdef"}])) as server:
        set_to = httpx.post(f"{server.url}/_admin/stream", json={"delay": 0.01, "chunk_chars": 2})
        bad = httpx.post(f"{server.url}/_admin/stream", json={"chunk_chars": 0})
        body = {"contents": [{"role": "user", "parts": [{"text": "q"}]}]}
        with httpx.stream("POST", f"{server.url}/v1beta/models/m:streamGenerateContent?alt=sse",
                          json=body) as response:
            events = [line for line in response.iter_lines() if line.startswith("data: ")]
        chunks = httpx.get(f"{server.url}/_admin/chunks").json()["chunks"]

    assert set_to.json() == {"delay": 0.01, "chunk_chars": 2}
    assert bad.status_code == 400
    assert response.headers["content-type"] == "text/event-stream" and len(events) == 3
    assert [c["text"] for c in chunks] == ["ab", "cd", "ef"]
