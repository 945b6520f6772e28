"""The fake Gemini server's input limit and implicit caching, as google-genai sees them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from ackloop.domain.errors import ModelPermanentError
from ackloop.domain.jsondict import JsonDict
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.gemini import GeminiModel
from ackloop.model.turns import estimate_usage, text_turn
from ackloop_dev.fakes.gemini_server import FakeGeminiServer, server_from_args

MODEL = "gemini-test"
SYSTEM = "You are a careful reader."


def _noted(request: ModelRequest) -> ModelTurn:
    return text_turn("Noted.", request=request)


def _user(words: int, first: str = "w") -> JsonDict:
    """A user content of ``words`` distinct words, the first one ``first``."""
    text = " ".join([first, *(f"w{i}" for i in range(1, words))])
    return {"role": "user", "parts": [{"text": text}]}


def _client(server: FakeGeminiServer) -> genai.Client:
    return genai.Client(api_key="test-key", http_options=types.HttpOptions(
        base_url=server.url, retry_options=types.HttpRetryOptions(attempts=1)))


def _ask(client: genai.Client, contents: list[JsonDict],
         model: str = MODEL) -> types.GenerateContentResponse:
    return client.models.generate_content(
        model=model, contents=[types.Content.model_validate(c) for c in contents],
        config=types.GenerateContentConfig(system_instruction=SYSTEM))


def _usage(response: types.GenerateContentResponse) -> types.GenerateContentResponseUsageMetadata:
    assert response.usage_metadata is not None
    return response.usage_metadata


@pytest.fixture
def server() -> Iterator[FakeGeminiServer]:
    with FakeGeminiServer(_noted) as fake:
        yield fake


# --- the input limit --------------------------------------------------------------------------


def test_over_the_input_limit_is_geminis_400() -> None:
    contents = [_user(50)]
    with FakeGeminiServer(_noted) as probe:
        tokens = _usage(_ask(_client(probe), contents)).prompt_token_count
    assert tokens is not None and tokens > 50

    with FakeGeminiServer(_noted, max_input_tokens=tokens - 1) as server:
        with pytest.raises(genai_errors.ClientError) as raised:
            _ask(_client(server), contents)
        client = _client(server)
        with pytest.raises(genai_errors.ClientError) as streamed:
            list(client.models.generate_content_stream(
                model=MODEL, contents=[types.Content.model_validate(c) for c in contents],
                config=types.GenerateContentConfig(system_instruction=SYSTEM)))
        with pytest.raises(ModelPermanentError) as adapter:
            asyncio.run(GeminiModel(api_key="k", base_url=server.url).generate(ModelRequest(
                model=MODEL, system_instruction=SYSTEM, contents=contents)))
        raw = httpx.post(f"{server.url}/v1beta/models/{MODEL}:generateContent",
                         json={"systemInstruction": {"parts": [{"text": SYSTEM}]},
                               "contents": contents})
        stats = server.stats()
        logged = server.requests

    message = (f"The input token count ({tokens}) exceeds the maximum number of tokens allowed "
               f"({tokens - 1}).")
    assert raised.value.code == 400 and raised.value.status == "INVALID_ARGUMENT"
    assert raised.value.message == message
    assert streamed.value.code == 400 and streamed.value.message == message
    assert adapter.value.reason == "model_input_too_long" and message in str(adapter.value)
    assert raw.status_code == 400
    assert raw.json() == {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
    assert stats["requests"] == 4 and stats["answered"] == 0
    assert stats["faults_served"] == {"input-limit": 4}
    assert len(logged) == 4 and [r.prompt_tokens for r in logged] == [tokens] * 4
    assert logged[0].body["contents"][0]["parts"][0]["text"].startswith("w")


def test_at_or_just_under_the_limit_is_answered() -> None:
    contents = [_user(50)]
    with FakeGeminiServer(_noted) as probe:
        tokens = _usage(_ask(_client(probe), contents)).prompt_token_count
    assert tokens is not None

    for limit in (tokens, tokens + 1):
        with FakeGeminiServer(_noted, max_input_tokens=limit) as server:
            response = _ask(_client(server), contents)
            assert response.text == "Noted."
            assert _usage(response).prompt_token_count == tokens
            assert server.stats()["answered"] == 1


def test_a_limit_set_at_run_time_applies_to_the_next_request(server: FakeGeminiServer) -> None:
    client = _client(server)
    contents = [_user(50)]
    tokens = _usage(_ask(client, contents)).prompt_token_count
    assert tokens is not None

    lowered = httpx.post(f"{server.url}/_admin/limits", json={"max_input_tokens": tokens - 1})
    with pytest.raises(genai_errors.ClientError) as raised:
        _ask(client, contents)
    raised_again = httpx.post(f"{server.url}/_admin/limits", json={"max_input_tokens": tokens})
    answered = _ask(client, contents)
    lifted = httpx.post(f"{server.url}/_admin/limits", json={"max_input_tokens": None})
    long = _ask(client, [_user(500)])
    shown = httpx.get(f"{server.url}/_admin/limits").json()
    bad = [httpx.post(f"{server.url}/_admin/limits", json=body).status_code
           for body in ({"max_input_tokens": 0}, {"max_input_tokens": "10"},
                        {"cache_min_tokens": -1}, {"cache_min_tokens": True})]

    assert lowered.json() == {"max_input_tokens": tokens - 1, "cache_min_tokens": 1024}
    assert raised.value.code == 400 and f"({tokens - 1})" in (raised.value.message or "")
    assert raised_again.json()["max_input_tokens"] == tokens
    assert answered.text == "Noted."
    assert lifted.json()["max_input_tokens"] is None and long.text == "Noted."
    assert shown == {"max_input_tokens": None, "cache_min_tokens": 1024}
    assert bad == [400, 400, 400, 400]
    assert server.stats()["faults_served"] == {"input-limit": 1}


def test_a_scheduled_fault_comes_before_the_limit() -> None:
    with FakeGeminiServer(_noted, faults="503", max_input_tokens=5) as server:
        with pytest.raises(genai_errors.ServerError):
            _ask(_client(server), [_user(50)])
        with pytest.raises(genai_errors.ClientError):
            _ask(_client(server), [_user(50)])
        assert server.stats()["faults_served"] == {"503": 1, "input-limit": 1}


def test_the_command_line_sets_the_limit_and_the_cache_minimum() -> None:
    server = server_from_args(["--max-input-tokens", "2000", "--cache-min-tokens", "4096"])
    default = server_from_args([])
    try:
        assert server.limits() == {"max_input_tokens": 2000, "cache_min_tokens": 4096}
        assert default.limits() == {"max_input_tokens": None, "cache_min_tokens": 1024}
    finally:
        server.stop()
        default.stop()


# --- implicit caching -------------------------------------------------------------------------


def test_a_repeated_long_prefix_is_reported_cached(server: FakeGeminiServer) -> None:
    client = _client(server)
    question = _user(1100)
    first = _ask(client, [question])
    reply = {"role": "model", "parts": [{"text": first.text}]}
    second = _ask(client, [question, reply, _user(20, first="and")])
    streamed = list(client.models.generate_content_stream(
        model=MODEL, contents=[types.Content.model_validate(question)],
        config=types.GenerateContentConfig(system_instruction=SYSTEM)))

    prefix = _usage(first).prompt_token_count
    assert prefix is not None and prefix >= 1024
    assert _usage(first).cached_content_token_count is None
    assert _usage(second).cached_content_token_count == prefix
    assert (_usage(second).prompt_token_count or 0) > prefix  # the prompt includes the cached part
    # The server's count of the prefix is estimate_usage's over system, that content and tools.
    assert prefix == estimate_usage(ModelRequest(
        model=MODEL, system_instruction=SYSTEM, contents=[question]), []).prompt_tokens
    # The whole of a request seen before, streamed: its usage is on the last chunk.
    assert _usage(streamed[-1]).cached_content_token_count == prefix


def test_a_prefix_below_the_minimum_is_not_cached(server: FakeGeminiServer) -> None:
    client = _client(server)
    question = _user(900)
    first = _ask(client, [question])
    second = _ask(client, [question, {"role": "model", "parts": [{"text": "Noted."}]},
                           _user(500, first="and")])

    assert (_usage(first).prompt_token_count or 0) < 1024
    assert (_usage(second).prompt_token_count or 0) > 1024  # the request is long, its prefix not
    assert _usage(first).cached_content_token_count is None
    assert _usage(second).cached_content_token_count is None


def test_the_minimum_is_configurable() -> None:
    with FakeGeminiServer(_noted, cache_min_tokens=10) as server:
        client = _client(server)
        first = _ask(client, [_user(20)])
        second = _ask(client, [_user(20)])
        httpx.post(f"{server.url}/_admin/limits", json={"cache_min_tokens": 4096})
        third = _ask(client, [_user(20)])

    assert _usage(first).cached_content_token_count is None
    assert _usage(second).cached_content_token_count == _usage(first).prompt_token_count
    assert _usage(third).cached_content_token_count is None


def test_a_different_first_content_is_not_cached(server: FakeGeminiServer) -> None:
    client = _client(server)
    _ask(client, [_user(1100)])
    changed = _ask(client, [_user(1100, first="x"), {"role": "model", "parts": [{"text": "Ok."}]},
                            _user(20)])
    other_system = client.models.generate_content(
        model=MODEL, contents=[types.Content.model_validate(_user(1100))],
        config=types.GenerateContentConfig(system_instruction="Another system instruction."))
    other_model = _ask(client, [_user(1100)], model="gemini-other")

    assert _usage(changed).cached_content_token_count is None
    assert _usage(other_system).cached_content_token_count is None
    assert _usage(other_model).cached_content_token_count is None


def test_reset_forgets_the_prefixes(server: FakeGeminiServer) -> None:
    client = _client(server)
    _ask(client, [_user(1100)])
    httpx.post(f"{server.url}/_admin/reset", json={})
    again = _ask(client, [_user(1100)])
    assert _usage(again).cached_content_token_count is None


def test_prefixes_beyond_the_entries_kept_are_forgotten() -> None:
    # Each request's prefixes: the system instruction alone (the same for all), and with its
    # content. Three kept: the third request's pushes out the first one's content.
    with FakeGeminiServer(_noted, cache_entries=3) as server:
        client = _client(server)
        _ask(client, [_user(1100)])
        _ask(client, [_user(1100, first="a")])
        _ask(client, [_user(1100, first="b")])
        forgotten = _ask(client, [_user(1100)])
        remembered = _ask(client, [_user(1100)])

    assert _usage(forgotten).cached_content_token_count is None
    assert _usage(remembered).cached_content_token_count == _usage(remembered).prompt_token_count


def test_thought_parts_are_counted_apart() -> None:
    thought = {"text": "Let me think about this for a while.", "thought": True}

    def thinking(request: ModelRequest) -> ModelTurn:
        parts = [thought, {"text": "Done."}]
        return ModelTurn(parts=parts, text="Done.", usage=estimate_usage(request, parts),
                         finish_reason="STOP")

    with FakeGeminiServer(thinking) as server:
        usage = _usage(_ask(_client(server), [_user(5)]))
    with FakeGeminiServer(_noted) as server:
        plain = _usage(_ask(_client(server), [_user(5)]))

    assert usage.thoughts_token_count == estimate_usage(None, [thought]).output_tokens
    assert usage.candidates_token_count == estimate_usage(None, [{"text": "Done."}]).output_tokens
    assert usage.total_token_count == ((usage.prompt_token_count or 0)
                                       + usage.candidates_token_count
                                       + usage.thoughts_token_count)
    assert plain.thoughts_token_count is None
