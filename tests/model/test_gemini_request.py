"""What the real google-genai client sends through GeminiModel, and how answers are parsed."""

from __future__ import annotations

import base64
import json
import ssl

from ackloop.domain.jsondict import JsonDict
from ackloop.domain.wire import FunctionCall, Usage
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.gemini import GeminiModel
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop_dev.fakes.gemini_server import FakeGeminiServer

# Bytes whose standard base64 has "+" and "/", so URL-safe re-encoding is visible.
SIGNATURE = bytes([0xFB, 0xFF, 0xBF, 0x00, 0x3E, 0x3F]) * 4


def _request(contents: list[JsonDict], **extra: object) -> ModelRequest:
    return ModelRequest(
        model="gemini-test",
        system_instruction="Be brief.",
        contents=contents,
        tools=[{"name": "lookup", "description": "Look a word up."}],
        **extra,  # type: ignore[arg-type]
    )


async def test_function_call_round_trip_is_what_the_sdk_sends() -> None:
    script = ScriptedModel.from_turns(
        [
            calls_turn([FunctionCall(name="lookup", args={"word": "haiku"}, id="c1")]),
            text_turn("A haiku has three lines."),
        ]
    )
    with FakeGeminiServer(script.decide) as server:
        model = GeminiModel(api_key="k", base_url=server.url)
        question: JsonDict = {"role": "user", "parts": [{"text": "What is a haiku?"}]}
        first = await model.generate(_request([question]))
        contents: list[JsonDict] = [
            question,
            {"role": "model", "parts": first.parts},
            {
                "role": "user",
                "parts": [
                    {
                        "function_response": {
                            "id": "c1",
                            "name": "lookup",
                            "response": {"result": "a short poem"},
                        }
                    }
                ],
            },
        ]
        second = await model.generate(_request(contents))
        bodies = [r.body for r in server.requests]

    assert first.calls == [FunctionCall(name="lookup", args={"word": "haiku"}, id="c1")]
    assert second.text == "A haiku has three lines." and second.calls == []
    # One HTTP request per generate: no SDK retries, no automatic function calling.
    assert len(bodies) == 2
    sent = bodies[1]
    assert [c["role"] for c in sent["contents"]] == ["user", "model", "user"]
    assert sent["contents"][1]["parts"][0]["functionCall"] == {
        "id": "c1",
        "name": "lookup",
        "args": {"word": "haiku"},
    }
    assert sent["contents"][2]["parts"][0]["functionResponse"] == {
        "id": "c1",
        "name": "lookup",
        "response": {"result": "a short poem"},
    }
    assert sent["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    assert sent["tools"][0]["functionDeclarations"][0]["name"] == "lookup"


async def test_thought_signature_bytes_survive_json_storage_and_resend() -> None:
    script = ScriptedModel.from_turns(
        [calls_turn([("lookup", {})], thought_signature=SIGNATURE), text_turn("done")]
    )
    with FakeGeminiServer(script.decide) as server:
        model = GeminiModel(api_key="k", base_url=server.url)
        question: JsonDict = {"role": "user", "parts": [{"text": "go"}]}
        first = await model.generate(_request([question]))
        stored = json.loads(json.dumps(first.parts))  # what Firestore would hold
        reply: JsonDict = {"function_response": {"name": "lookup", "response": {"result": 1}}}
        await model.generate(
            _request(
                [question, {"role": "model", "parts": stored}, {"role": "user", "parts": [reply]}]
            )
        )
        sent_back = server.requests[1].body["contents"][1]["parts"][0]["thoughtSignature"]
        served = server.requests  # keep the server alive until read

    assert len(served) == 2
    assert base64.urlsafe_b64decode(stored[0]["thought_signature"]) == SIGNATURE
    # The SDK re-encodes URL-safe; the bytes are what matters.
    assert base64.urlsafe_b64decode(sent_back) == SIGNATURE


async def test_response_schema_asks_for_json() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    with FakeGeminiServer(ScriptedModel.from_turns([text_turn('{"answer": "x"}')]).decide) as s:
        turn = await GeminiModel(api_key="k", base_url=s.url).generate(
            _request([{"role": "user", "parts": [{"text": "q"}]}], response_schema=schema)
        )
        config = s.requests[0].body["generationConfig"]

    assert json.loads(turn.text or "") == {"answer": "x"}
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == schema


async def test_parallel_calls_thoughts_usage_and_version_are_parsed() -> None:
    turn = ModelTurn(
        parts=[
            {"text": "let me think", "thought": True},
            {"function_call": {"name": "a", "args": {"x": 1}, "id": "1"}},
            {"function_call": {"name": "b", "args": {}, "id": "2"}},
            {"text": "Calling "},
            {"text": "two tools."},
        ],
        usage=Usage(model_calls=1, prompt_tokens=11, output_tokens=7, total_tokens=18),
        finish_reason="STOP",
        model_version="gemini-test-001",
    )
    with FakeGeminiServer(lambda request: turn) as server:
        parsed = await GeminiModel(api_key="k", base_url=server.url).generate(
            _request([{"role": "user", "parts": [{"text": "q"}]}])
        )

    assert [c.name for c in parsed.calls] == ["a", "b"]
    assert parsed.calls[0].args == {"x": 1} and parsed.calls[1].id == "2"
    assert parsed.text == "Calling two tools."  # thoughts are not the answer
    assert parsed.parts[0] == {"text": "let me think", "thought": True}
    # The fake reports the thought part's words as thoughtsTokenCount, the rest as candidates:
    # output counts both.
    usage = parsed.usage
    assert (usage.model_calls, usage.prompt_tokens, usage.output_tokens, usage.total_tokens) == (
        1, 11, 7, 18)
    assert parsed.finish_reason == "STOP"
    assert parsed.model_version == "gemini-test-001"


def test_the_client_builds_no_tls_context_for_the_live_api_it_never_opens() -> None:
    # The Live API's websocket gets no SSL context of its own (a load of the CA bundle at
    # every cold start); the HTTP client every call goes through still verifies with one.
    api = GeminiModel(api_key="k")._client._api_client
    assert api._websocket_ssl_ctx == {"ssl": True}
    assert isinstance(api._async_httpx_client_args["verify"], ssl.SSLContext)
