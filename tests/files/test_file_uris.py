"""A caller's file URI reaches Gemini only under a prefix the deployment lists
(ACKLOOP_FILES_ALLOWED_URIS), never into the deployment's own files bucket: anything else is
422 file_uri_not_allowed saying what is allowed, and poison with that reason on the topic."""

from __future__ import annotations

from typing import Any

import pytest

from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import QueryMessage
from ackloop.files import MemoryFileStore
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from tests.engine.fakes import api_of
from tests.files.test_query_files import loop_of

LISTED = Settings(lease_seconds=10.0, files_allowed_uris=(
    "gs://media, https://cdn.example.com/pub/, gs://ackloop-files, https://storage.googleapis.com"))


def uri(file_uri: str) -> dict[str, Any]:
    return {"file_data": {"file_uri": file_uri, "mime_type": "image/png"}}


async def post(settings: Settings, file_uri: str) -> tuple[int, dict[str, Any]]:
    loop = loop_of(ScriptedModel(lambda r: text_turn("ok", request=r)), settings=settings)
    async with api_of(loop, settings) as api:
        got = await api.post("/runs", json={"text": "what is it?", "files": [uri(file_uri)]})
    return got.status_code, got.json()


async def test_by_default_no_caller_uri_is_passed_on() -> None:
    for given in ("gs://their-bucket/a.png", "https://storage.googleapis.com/b/a.png",
                  "https://example.com/a.png"):
        status, body = await post(Settings(lease_seconds=10.0), given)
        assert status == 422, body
        assert body["code"] == "file_uri_not_allowed"
        assert "ACKLOOP_FILES_ALLOWED_URIS lists none" in body["error"], body


@pytest.mark.parametrize("given", [
    "gs://media/cats/a.png", "gs://MEDIA/a.png", "https://cdn.example.com/pub/a.png",
    "https://CDN.example.com/pub/x/y.png?v=2"])
async def test_a_uri_under_a_listed_prefix_starts_the_run(given: str) -> None:
    status, body = await post(LISTED, given)
    assert status == 202, body


@pytest.mark.parametrize(("given", "says"), [
    ("gs://media-private/a.png", "allowed: gs://media/, https://cdn.example.com/pub/"),
    ("gs://other/media/a.png", "not under a prefix"),
    ("https://cdn.example.com/public/a.png", "not under a prefix"),
    ("https://cdn.example.com/pub/../secret/a.png", "not under a prefix"),
    ("https://cdn.example.com/pub/%2e%2e/secret/a.png", "not under a prefix"),
    ("https://cdn.example.com@evil.example/pub/a.png", "not under a prefix"),
    ("gs://ackloop-files/files/" + "a" * 64 + "-4", "own files bucket"),
    ("https://storage.googleapis.com/ackloop-files/files/x", "own files bucket"),
    ("https://storage.googleapis.com/ackloop%2Dfiles/files/x", "own files bucket"),
])
async def test_any_other_uri_is_refused_saying_what_is_allowed(given: str, says: str) -> None:
    status, body = await post(LISTED, given)
    assert status == 422, body
    assert body["code"] == "file_uri_not_allowed" and says in body["error"], body


async def test_a_refused_uri_on_the_topic_is_poison_with_its_reason() -> None:
    loop = loop_of(ScriptedModel(lambda r: text_turn("ok", request=r)), settings=LISTED)
    await loop.submit(QueryMessage.model_validate(
        {"request_id": "sneaky", "text": "q", "files": [uri("gs://secrets/key.png")]}))
    await loop.run_until_idle()
    outcome = loop.deliveries("query")[-1].outcome
    assert outcome.acknowledged and outcome.body["reason"] == "file_uri_not_allowed", outcome
    assert await loop.deps.store.get_run(run_id_for_request("sneaky")) is None
    poison = await loop.deps.store.letters.list_poison()
    assert [p["reason"] for p in poison] == ["file_uri_not_allowed"]
    assert isinstance(loop.deps.files, MemoryFileStore) and loop.deps.files.objects == {}


def test_a_malformed_allowed_prefix_stops_the_start_up() -> None:
    for bad in ("media", "ftp://host/x", "https://", "gs://a b"):
        with pytest.raises(ValueError, match="ACKLOOP_FILES_ALLOWED_URIS"):
            Settings(files_allowed_uris=bad)
