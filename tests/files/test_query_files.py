"""Files in a query: stored out of Firestore when the run is created, named by the run and the
transcript, sent to Gemini inline (through the real google-genai client, against the fake
server that reads them), refused with the reason when they break a limit."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.config.settings import Settings
from ackloop.docdb.base import DocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunRecord
from ackloop.domain.wire import QueryMessage
from ackloop.engine.deps import Deps
from ackloop.files import FileStore, MemoryFileStore, object_name
from ackloop.model.base import ModelClient, ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools.toolset import ToolSet
from tests.engine.fakes import api_of
from tests.files.samples import pdf, png
from tests.store.conftest import db, prefix  # noqa: F401  (fixtures: memory and emulator)

INVOICE = pdf(["Invoice 4711", "Total: 99.50 EUR"])
PHOTO = png(37, 23)


def loop_of(model: ModelClient, *, settings: Settings | None = None,
            database: DocumentDB | None = None, prefix: str = "",  # noqa: F811
            files: FileStore | None = None) -> InProcessLoop:
    publisher = MemoryPublisher()
    deps = Deps(
        settings=settings or Settings(lease_seconds=10.0), publisher=publisher, model=model,
        store=AgentStore(database or MemoryDocumentDB(), prefix),
        agents=AgentRegistry([Agent("default", "Answer about the files.", ToolSet([]))]),
        clock=ManualClock(), owner="test-owner", files=files or MemoryFileStore())
    return InProcessLoop(deps, publisher)


def inline(data: bytes, mime_type: str, name: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"mime_type": mime_type, "data": base64.b64encode(data).decode()}
    if name:
        body["display_name"] = name
    return {"inline_data": body}


def b64(text: str) -> bytes:
    """Base64 in either alphabet (google-genai writes bytes URL-safe; Gemini reads both)."""
    return base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_"))


def never(request: ModelRequest) -> ModelTurn:
    return text_turn("the script answered, not the files", request=request)


async def ask_gemini(files: list[dict[str, Any]], question: str, request_id: str,
                     settings: Settings | None = None
                     ) -> tuple[RunRecord, list[dict[str, Any]], InProcessLoop]:
    """Ask through GeminiModel (google-genai) against the fake server; the run and the bodies
    the server received."""
    from ackloop.model.gemini import GeminiModel
    from ackloop_dev.fakes.gemini_server import FakeGeminiServer

    with FakeGeminiServer(never) as server:
        loop = loop_of(GeminiModel(api_key="k", base_url=server.url, timeout_seconds=5.0),
                       settings=settings)
        await loop.submit(QueryMessage.model_validate(
            {"request_id": request_id, "text": question, "files": files}))
        await loop.run_until_idle()
        bodies = [r.body for r in server.requests]
    run = await loop.deps.store.runs.get_run(run_id_for_request(request_id))
    assert run is not None, loop.deliveries("query")[-1].outcome
    return run, bodies, loop


# -- the model reads the files -------------------------------------------------------------


async def test_a_pdf_question_is_answered_from_the_pdfs_own_bytes() -> None:
    run, bodies, loop = await ask_gemini([inline(INVOICE, "application/pdf", "invoice.pdf")],
                                         "How many pages, and what is the total?", "pdf-q")
    assert run.status.value == "completed", run.error
    assert run.answer is not None
    assert "a PDF of 2 pages" in run.answer and "Total: 99.50 EUR" in run.answer, run.answer
    # google-genai sent the bytes inline, the file first, the question after, no display name.
    (body,) = bodies
    (question,) = body["contents"]
    sent, text = question["parts"]
    assert text == {"text": "How many pages, and what is the total?"}
    # (google-genai writes a blob's own fields in its snake_case names)
    blob = {key.replace("_", "").lower(): v for key, v in sent["inlineData"].items()}
    assert set(sent) == {"inlineData"} and set(blob) == {"mimetype", "data"}
    assert blob["mimetype"] == "application/pdf"
    assert b64(blob["data"]) == INVOICE
    # The run and the transcript name the stored file; the store holds its bytes.
    uri = f"mem://ackloop-files/{object_name(INVOICE)}"
    assert run.files == [{"file_data": {"file_uri": uri, "mime_type": "application/pdf",
                                        "display_name": "invoice.pdf"}}]
    transcript = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    assert transcript.contents[0] == {"role": "user", "parts": [
        *run.files, {"text": "How many pages, and what is the total?"}]}
    assert await loop.deps.files.get(uri) == INVOICE


async def test_an_image_question_is_answered_from_the_images_own_bytes() -> None:
    run, bodies, _ = await ask_gemini([inline(PHOTO, "image/png")], "What size is it?", "png-q")
    assert run.answer is not None and "a PNG image of 37x23 pixels" in run.answer, run.answer
    assert f"{len(PHOTO)} bytes inline" in run.answer
    (body,) = bodies
    assert b64(body["contents"][0]["parts"][0]["inlineData"]["data"]) == PHOTO


async def test_a_callers_uri_reaches_gemini_as_given_and_is_kept_as_given() -> None:
    given = {"file_data": {"file_uri": "gs://their-bucket/scans/a.pdf",
                           "mime_type": "application/pdf"}}
    allowing = Settings(lease_seconds=10.0, files_allowed_uris="gs://their-bucket/scans")
    run, bodies, _ = await ask_gemini([given], "Read it", "uri-q", allowing)
    assert run.files == [given]
    (body,) = bodies
    (kind, sent), = body["contents"][0]["parts"][0].items()
    assert kind == "fileData" and {k.replace("_", "").lower(): v for k, v in sent.items()} == {
        "fileuri": "gs://their-bucket/scans/a.pdf", "mimetype": "application/pdf"}
    assert run.answer is not None and "at gs://their-bucket/scans/a.pdf: not read" in run.answer


async def test_a_follow_up_sends_the_earlier_file_again_from_the_store() -> None:
    from ackloop.model.gemini import GeminiModel
    from ackloop_dev.fakes.gemini_server import FakeGeminiServer

    with FakeGeminiServer(never) as server:
        loop = loop_of(GeminiModel(api_key="k", base_url=server.url, timeout_seconds=5.0))
        await loop.submit(QueryMessage.model_validate(
            {"request_id": "first", "text": "Pages?", "files": [inline(INVOICE,
                                                                       "application/pdf")]}))
        await loop.run_until_idle()
        first = await loop.deps.store.runs.get_run(run_id_for_request("first"))
        assert first is not None
        await loop.submit(QueryMessage(request_id="second", text="And now?",
                                       conversation_id=first.conversation_id))
        await loop.run_until_idle()
        bodies = [r.body for r in server.requests]
    second = await loop.deps.store.runs.get_run(run_id_for_request("second"))
    assert second is not None and second.answer == "the script answered, not the files"
    assert b64(bodies[1]["contents"][0]["parts"][0]["inlineData"]["data"]) == INVOICE


# -- no bytes in Firestore -------------------------------------------------------------------


def _holds(document: Any, needles: list[bytes]) -> bool:
    text = json.dumps(document, default=str).encode()
    return any(needle in text for needle in needles)


async def test_no_firestore_document_holds_the_files_bytes(db: DocumentDB,  # noqa: F811
                                                           prefix: str) -> None:  # noqa: F811
    """On the memory store every document is looked at; on the emulator, the run's, its steps',
    its transcript's and its conversation's."""
    files = MemoryFileStore()
    loop = loop_of(ScriptedModel(lambda r: text_turn("read it", request=r)), database=db,
                   prefix=prefix, files=files)
    await loop.submit(QueryMessage.model_validate({
        "request_id": "bytes", "text": "Read both",
        "files": [inline(INVOICE, "application/pdf", "invoice.pdf"), inline(PHOTO, "image/png")]}))
    await loop.run_until_idle()
    run_id = run_id_for_request("bytes")
    needles = [blob[n:n + 48] for data in (INVOICE, PHOTO) for blob in (
        data, base64.b64encode(data), base64.urlsafe_b64encode(data)) for n in (40, 200)]
    if isinstance(db, MemoryDocumentDB):
        documents = [data for data, _ in db._docs.values()]
    else:
        documents = [s.data for collection in (
            f"{prefix}runs", f"{prefix}runs/{run_id}/steps", f"{prefix}conversations",
            f"{prefix}conversations/{run_id}/transcript") for s in await db.list_all(collection)]
    assert len(documents) >= 3  # the run, its model step, a transcript chunk
    assert not [d for d in documents if _holds(d, needles)]
    named = [d for d in documents if _holds(d, [object_name(INVOICE).encode()])]
    assert len(named) >= 2  # the run and the transcript name it
    assert sorted(files.objects.values()) == sorted([INVOICE, PHOTO])


# -- refusals --------------------------------------------------------------------------------

SMALL = Settings(lease_seconds=10.0, api_auth="none", files_max_file_bytes=4096,
                 files_max_query_bytes=6000, files_max_count=2)


@pytest.mark.parametrize("files, status, code, says", [
    ([inline(b"x" * 5000, "application/pdf")], 413, "file_too_large",
     "at most 0.0 MiB (4096 bytes) inline"),
    ([inline(b"x" * 3000, "image/png"), inline(b"y" * 3500, "image/png")], 413,
     "file_too_large", "more than 0.0 MiB (6000 bytes) together"),
    ([inline(b"x", "image/png")] * 3, 413, "file_too_large", "at most 2: send fewer files"),
    ([inline(b"hello", "text/plain")], 415, "file_type_not_accepted",
     "mime_type 'text/plain' is not accepted; accepted: application/pdf"),
    ([{"file_data": {"file_uri": "gs://b/x.zip", "mime_type": "application/zip"}}], 415,
     "file_type_not_accepted", "'application/zip' is not accepted"),
    ([{"inline_data": {"mime_type": "image/png", "data": "not base64!!"}}], 422,
     "invalid_file", "files[0].inline_data.data is not valid base64"),
    ([{"file_data": {"file_uri": "ftp://host/a.pdf", "mime_type": "application/pdf"}}], 422,
     "invalid_file", "is not a gs:// or https:// URI"),
    ([{"file_data": {"file_uri": "http://host/a.pdf", "mime_type": "application/pdf"}}], 422,
     "invalid_file", "is not a gs:// or https:// URI"),
    ([{"file_data": {"file_uri": "mem://ackloop-files/files/x", "mime_type": "image/png"}}],
     422, "file_uri_not_allowed", "names this deployment's own file store"),
])
async def test_the_api_refuses_a_file_with_the_status_and_what_to_fix(
        files: list[dict[str, Any]], status: int, code: str, says: str) -> None:
    loop = loop_of(ScriptedModel(never), settings=SMALL)
    async with api_of(loop, SMALL) as api:
        answer = await api.post("/runs", json={"text": "what is it?", "files": files})
        runtime = await api.post("/api/reasoning_engine", json={
            "class_method": "query", "input": {"message": "what is it?", "files": files,
                                               "wait_seconds": 0}})
    for got in (answer, runtime):
        assert got.status_code == status, got.text
        assert got.json()["code"] == code and says in got.json()["error"], got.json()
    assert loop.deps.files.objects == {}  # type: ignore[attr-defined]  # nothing stored


async def test_a_file_part_of_neither_kind_is_malformed_422() -> None:
    loop = loop_of(ScriptedModel(never), settings=SMALL)
    async with api_of(loop, SMALL) as api:
        answer = await api.post("/runs", json={"text": "q", "files": [{}]})
        both = await api.post("/runs", json={"text": "q", "files": [{
            **inline(b"x", "image/png"),
            "file_data": {"file_uri": "gs://b/o", "mime_type": "image/png"}}]})
    for got in (answer, both):
        assert got.status_code == 422, got.text
        assert "exactly one of inline_data" in got.json()["error"]


async def test_a_body_over_the_files_routes_limit_is_413_saying_what_to_do() -> None:
    loop = loop_of(ScriptedModel(never), settings=SMALL)
    async with api_of(loop, SMALL) as api:
        huge = await api.post("/runs", json={"text": "q", "files": [
            inline(b"x" * 400_000, "application/pdf")]})
        small_route = await api.post("/runs/x/cancel", content=b"x" * 300_000)
    assert huge.status_code == 413
    assert "send fewer or smaller files" in huge.json()["error"], huge.json()
    assert small_route.status_code == 413
    assert "files" not in small_route.json()["error"]


async def test_a_file_within_limits_starts_the_run_and_the_api_shows_only_its_name() -> None:
    loop = loop_of(ScriptedModel(lambda r: text_turn("ok", request=r)), settings=SMALL)
    async with api_of(loop, SMALL) as api:
        created = await api.post("/runs", json={"text": "what is it?", "files": [
            inline(PHOTO[:0] + b"\x89PNG" + b"\0" * 100, "image/png", "tiny.png")]})
        assert created.status_code == 202, created.text
        await loop.run_until_idle()
        shown = (await api.get(f"/runs/{created.json()['run_id']}")).json()
    (part,) = shown["files"]
    assert part["file_data"]["mime_type"] == "image/png"
    assert part["file_data"]["display_name"] == "tiny.png"
    assert part["file_data"]["file_uri"].startswith("mem://ackloop-files/files/")
    assert shown["answer"] == "ok"


async def test_a_query_on_the_topic_with_a_bad_file_is_poison_with_its_reason() -> None:
    loop = loop_of(ScriptedModel(never), settings=SMALL)
    for request_id, files, reason in (
            ("bad-type", [inline(b"hello", "text/plain")], "file_type_not_accepted"),
            ("too-big", [inline(b"x" * 5000, "application/pdf")], "file_too_large"),
            ("bad-b64", [{"inline_data": {"mime_type": "image/png", "data": "@@@"}}],
             "invalid_file")):
        await loop.submit(QueryMessage.model_validate(
            {"request_id": request_id, "text": "q", "files": files}))
        await loop.run_until_idle()
        outcome = loop.deliveries("query")[-1].outcome
        assert outcome.acknowledged and outcome.body["reason"] == reason, outcome
        assert await loop.deps.store.runs.get_run(run_id_for_request(request_id)) is None
    assert len(loop.deliveries("query")) == 3  # each delivered once: never redelivered
    poison = await loop.deps.store.letters.list_poison()
    assert sorted(p["reason"] for p in poison) == sorted(
        ["file_type_not_accepted", "file_too_large", "invalid_file"])
    assert all("files[0]" in p["error"] for p in poison), poison
    assert loop.deps.files.objects == {}  # type: ignore[attr-defined]


async def test_the_same_query_twice_starts_one_run_and_another_file_is_a_mismatch() -> None:
    loop = loop_of(ScriptedModel(lambda r: text_turn("ok", request=r)))
    query = {"request_id": "same", "text": "q", "files": [inline(PHOTO, "image/png")]}
    for _ in range(2):
        await loop.submit(QueryMessage.model_validate(query))
        await loop.run_until_idle()
    assert [d.outcome.body.get("created") for d in loop.deliveries("query")] == [True, False]
    await loop.submit(QueryMessage.model_validate(
        {**query, "files": [inline(INVOICE, "application/pdf")]}))
    await loop.run_until_idle()
    assert loop.deliveries("query")[-1].outcome.body["reason"] == "idempotency_mismatch"


def test_a_query_without_files_keeps_its_message_and_its_fingerprint() -> None:
    from ackloop.engine.ingest import request_hash

    query = QueryMessage(request_id="r", text="q")
    assert "files" not in query.model_dump()
    assert request_hash(query) == request_hash(query, []) == hashlib.sha256(
        query.model_dump_json(include={"text", "conversation_id", "agent", "options"},
                              exclude={"options": {"approval_timeout_seconds"}}).encode()
    ).hexdigest()[:32]
