"""A query that is refused stores none of its files: every check that can refuse it (its
ceilings, its conversation, the conversation's owner, its idempotency key) runs before any file
is put in the file store, over HTTP and on the topic alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from ackloop.api.app import create_app
from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import QueryMessage
from ackloop.engine.deps import Deps
from ackloop.files import MemoryFileStore
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from ackloop.testing.inprocess import InProcessLoop
from tests.api.tokens_support import Issuer
from tests.engine.fakes import api_of
from tests.files.samples import png
from tests.files.test_query_files import INVOICE, PHOTO, inline, loop_of

CEILINGS = Settings(lease_seconds=10.0, max_steps_ceiling=5)
PHOTO_FILE = inline(PHOTO, "image/png", "photo.png")
OTHER = png(11, 7)
AUDIENCE = "https://ackloop-api.example.run.app"


def answering() -> ScriptedModel:
    return ScriptedModel(lambda r: text_turn("ok", request=r))


def stored(loop: InProcessLoop) -> dict[str, bytes]:
    files = loop.deps.files
    assert isinstance(files, MemoryFileStore)
    return files.objects


async def test_an_unknown_conversation_stores_nothing() -> None:
    loop = loop_of(answering())
    unknown = run_id_for_request("never-sent")
    async with api_of(loop) as api:
        got = await api.post("/runs", json={"text": "q", "conversation_id": unknown,
                                            "files": [PHOTO_FILE]})
    assert got.status_code == 404, got.text
    assert got.json()["code"] == "conversation_not_found"
    await loop.submit(QueryMessage.model_validate({
        "request_id": "follow-up", "text": "q", "conversation_id": unknown,
        "files": [PHOTO_FILE]}))
    with pytest.raises(RuntimeError, match="still busy"):  # redelivered, waiting for the run
        await loop.run_until_idle(max_deliveries=3)
    assert [d.outcome.acknowledged for d in loop.deliveries("query")] == [False] * 3
    assert stored(loop) == {}


async def test_a_query_over_a_ceiling_stores_nothing() -> None:
    loop = loop_of(answering(), settings=CEILINGS)
    async with api_of(loop, CEILINGS) as api:
        got = await api.post("/runs", json={"text": "q", "options": {"max_steps": 50},
                                            "files": [PHOTO_FILE]})
    assert got.status_code == 422, got.text
    assert got.json()["code"] == "over_ceiling"
    await loop.submit(QueryMessage.model_validate({
        "request_id": "greedy", "text": "q", "options": {"max_steps": 50},
        "files": [PHOTO_FILE]}))
    await loop.run_until_idle()
    assert loop.deliveries("query")[-1].outcome.body["reason"] == "over_ceiling"
    assert stored(loop) == {}


async def test_an_idempotency_mismatch_stores_nothing_of_the_second_body() -> None:
    loop = loop_of(answering())
    async with api_of(loop) as api:
        first = await api.post("/runs", json={"text": "q", "files": [PHOTO_FILE]},
                               headers={"Idempotency-Key": "same-key"})
        assert first.status_code == 202, first.text
        after_first = dict(stored(loop))
        second = await api.post("/runs", json={"text": "q", "files": [
            inline(INVOICE, "application/pdf")]}, headers={"Idempotency-Key": "same-key"})
    assert second.status_code == 409, second.text
    assert second.json()["code"] == "idempotency_mismatch"
    assert len(after_first) == 1 and stored(loop) == after_first
    for files in ([inline(INVOICE, "application/pdf")], [inline(OTHER, "image/png")]):
        await loop.submit(QueryMessage.model_validate(
            {"request_id": "topic-key", "text": "q", "files": files}))
        await loop.run_until_idle()
    assert [d.outcome.body.get("reason") for d in loop.deliveries("query")] == [
        None, "idempotency_mismatch"]
    assert sorted(stored(loop).values()) == sorted([PHOTO, INVOICE])  # not OTHER


@asynccontextmanager
async def two_callers(loop: InProcessLoop) -> AsyncIterator[tuple[httpx.AsyncClient,
                                                                   httpx.AsyncClient]]:
    issuer = Issuer()
    settings = Settings(api_auth="google_id_token", api_id_token_audience=AUDIENCE)

    async def deps() -> Deps:
        return loop.deps

    app = create_app(settings, deps=deps, id_token_verifier=issuer.verifier())
    transport = httpx.ASGITransport(app=app)

    def client(subject: str) -> httpx.AsyncClient:
        token = issuer.token(AUDIENCE, sub=subject, email=f"{subject}@example.com")
        return httpx.AsyncClient(transport=transport, base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"})

    async with client("alice") as alice, client("mallory") as mallory:
        yield alice, mallory


async def test_another_callers_conversation_stores_nothing() -> None:
    loop = loop_of(answering())
    async with two_callers(loop) as (alice, mallory):
        first = await alice.post("/runs", json={"text": "q", "conversation_id": "alices"})
        assert first.status_code == 202, first.text
        await loop.run_until_idle()
        planted = await mallory.post("/runs", json={"text": "q", "conversation_id": "alices",
                                                    "files": [PHOTO_FILE]})
        assert planted.status_code == 404, planted.text
        assert planted.json()["code"] == "conversation_not_found"
        assert stored(loop) == {}
        follow_up = await alice.post("/runs", json={
            "text": "and this?", "conversation_id": "alices", "files": [PHOTO_FILE]})
    assert follow_up.status_code == 202, follow_up.text  # the owner's files are stored
    assert list(stored(loop).values()) == [PHOTO]
