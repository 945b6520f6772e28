"""A tool that returns a file: its bytes go to the file store, never to Firestore; the step's
result and the transcript name the stored file; the model reads it as a part of the function
response (through the real google-genai client against the fake Gemini server)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from typing import Any

import pytest

from ackloop import File, tool
from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.config.settings import Settings
from ackloop.docdb.base import DocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import QueryMessage
from ackloop.engine.deps import Deps
from ackloop.files import MemoryFileStore, object_name
from ackloop.model.base import ModelClient, ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools.toolset import ToolSet
from tests.store.conftest import db, prefix  # noqa: F401  (fixtures: memory, then the emulator)


def png(width: int = 64, height: int = 32) -> bytes:
    """A real PNG, made with pillow: noisy enough not to compress to nothing."""
    from PIL import Image

    image = Image.new("RGB", (width, height))
    image.putdata([((x * 7 + y * 13) % 256, (x * y) % 256, (x ^ y) % 256)
                   for y in range(height) for x in range(width)])
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


IMAGE = png()


@tool
def render_chart(title: str = "sales") -> dict[str, Any]:
    """Draw the chart of a series.

    Args:
        title: The chart's title.
    """
    return {"title": title, "chart": File(IMAGE, "image/png", "chart.png")}


def loop_of(model: ModelClient, db: DocumentDB | None = None, prefix: str = "",  # noqa: F811
            files: MemoryFileStore | None = None) -> InProcessLoop:
    publisher = MemoryPublisher()
    deps = Deps(
        settings=Settings(lease_seconds=10.0), publisher=publisher, model=model,
        store=AgentStore(db or MemoryDocumentDB(), prefix),
        agents=AgentRegistry([Agent("default", "Be brief.", ToolSet([render_chart]))]),
        clock=ManualClock(), owner="test-owner", files=files or MemoryFileStore())
    return InProcessLoop(deps, publisher)


def script(request: ModelRequest) -> ModelTurn:
    if len(request.contents) == 1:
        return calls_turn([("render_chart", {"title": "q3"})], request=request)
    return text_turn("drawn", request=request)


async def test_a_tools_file_is_stored_and_the_step_and_transcript_only_name_it() -> None:
    files = MemoryFileStore()
    loop = loop_of(ScriptedModel(script), files=files)
    await loop.submit(QueryMessage(request_id="chart", text="draw q3"))
    await loop.run_until_idle()
    assert loop.answers[0].answer == "drawn"
    run_id = run_id_for_request("chart")
    sha = hashlib.sha256(IMAGE).hexdigest()
    (step,) = [s for s in await loop.deps.store.steps.list_steps(run_id) if s.kind == "tool"]
    assert step.result is not None
    (stored,) = step.result["response"]["files"]
    assert stored == {"uri": f"mem://ackloop-files/{object_name(IMAGE)}", "mime_type": "image/png",
                      "size": len(IMAGE), "sha256": sha, "name": "chart.png"}
    assert step.result["response"]["result"] == {"title": "q3", "chart": {"$ref": "chart.png"}}
    assert await files.get(stored["uri"]) == IMAGE

    transcript = await loop.deps.store.transcript.load_transcript(run_id)
    (answer,) = [p["function_response"] for c in transcript.contents
                 for p in c["parts"] if "function_response" in p]
    assert answer == {
        "name": "render_chart",
        "response": {"result": {"title": "q3", "chart": {"$ref": "chart.png"}}},
        "parts": [{"file_data": {"file_uri": stored["uri"], "mime_type": "image/png",
                                 "display_name": "chart.png"}}],
    }


async def test_a_file_past_the_limits_is_not_stored_and_the_model_hears_why() -> None:
    files = MemoryFileStore()
    loop = loop_of(ScriptedModel(script), files=files)
    loop.deps.settings = Settings(lease_seconds=10.0, files_max_file_bytes=len(IMAGE) - 1)
    await loop.submit(QueryMessage(request_id="too-big", text="draw q3"))
    await loop.run_until_idle()
    (step,) = [s for s in await loop.deps.store.steps.list_steps(run_id_for_request("too-big"))
               if s.kind == "tool"]
    assert step.result is not None and "files" not in step.result["response"]
    error = step.result["response"]["error"]
    assert f"each at most {len(IMAGE) - 1} bytes" in error and f"{len(IMAGE)}" in error
    assert files.objects == {}
    assert loop.answers[0].answer == "drawn"  # the model read the error and went on


def _holds(data: Any, needles: list[bytes]) -> bool:
    text = json.dumps(data, default=lambda v: base64.b64encode(v).decode()
                      if isinstance(v, bytes) else str(v)).encode()
    raw = repr(data).encode()
    return any(needle in text or needle in raw for needle in needles)


async def test_the_files_bytes_are_in_no_firestore_document(db: DocumentDB,  # noqa: F811
                                                            prefix: str) -> None:  # noqa: F811
    """On the memory store every document is looked at; on the emulator, every document of
    the run, its steps, its transcript and its conversation."""
    files = MemoryFileStore()
    loop = loop_of(ScriptedModel(script), db, prefix, files)
    await loop.submit(QueryMessage(request_id="bytes", text="draw q3"))
    await loop.run_until_idle()
    assert loop.answers[0].answer == "drawn"
    run_id = run_id_for_request("bytes")
    # The image's bytes, its base64 (both alphabets) and a slice from its middle.
    needles = [IMAGE[100:160], base64.b64encode(IMAGE)[100:160],
               base64.urlsafe_b64encode(IMAGE)[100:160]]
    if isinstance(db, MemoryDocumentDB):
        documents = [data for data, _ in db._docs.values()]
    else:
        documents = [s.data for collection in (
            f"{prefix}runs", f"{prefix}runs/{run_id}/steps", f"{prefix}runs/{run_id}/deltas",
            f"{prefix}conversations", f"{prefix}conversations/{run_id}/transcript")
            for s in await db.list_all(collection)]
    assert len(documents) >= 4  # the run, two model steps, the tool step, a transcript chunk
    assert not [d for d in documents if _holds(d, needles)]
    assert sum(_holds(d, [b"chart.png"]) for d in documents) >= 2  # the step and transcript
    assert list(files.objects.values()) == [IMAGE]


async def test_a_png_a_tool_returns_reaches_the_model_as_a_function_response_part() -> None:
    """Through google-genai against the fake Gemini server, which checks the parts it gets and
    answers what the image's own bytes say: its format, size, length and digest."""
    from ackloop.model.gemini import GeminiModel
    from ackloop_dev.fakes.gemini_server import FakeGeminiServer, media_report_script

    with FakeGeminiServer(media_report_script("render_chart", {"title": "q3"})) as server:
        loop = loop_of(GeminiModel(api_key="k", base_url=server.url, timeout_seconds=5.0))
        await loop.submit(QueryMessage(request_id="seen", text="draw q3 and describe it"))
        await loop.run_until_idle()
        bodies = [r.body for r in server.requests]
    run = await loop.deps.store.runs.get_run(run_id_for_request("seen"))
    assert run is not None, loop.answers
    assert run.answer == (f"saw chart.png: image/png, PNG 64x32, {len(IMAGE)} bytes, "
                          f"sha256 {hashlib.sha256(IMAGE).hexdigest()}"), run.error
    # What google-genai sent: the part inside the function response, referenced by its name.
    (sent,) = [p["functionResponse"] for c in bodies[1]["contents"] for p in c["parts"]
               if "functionResponse" in p]
    assert sent["response"] == {"result": {"title": "q3", "chart": {"$ref": "chart.png"}}}
    (part,) = sent["parts"]  # google-genai sends the nested part in the SDK's own field names
    (kind,) = part
    assert kind in ("inline_data", "inlineData"), part
    blob = {key.replace("_", "").lower(): value for key, value in part[kind].items()}
    assert blob["mimetype"] == "image/png" and blob["displayname"] == "chart.png"
    assert base64.urlsafe_b64decode(blob["data"].replace("+", "-").replace("/", "_")) == IMAGE


@pytest.mark.parametrize("parts, error", [
    ([{"inlineData": {"mimeType": "image/png", "data": "AAAA"},
       "fileData": {"fileUri": "gs://b/o", "mimeType": "image/png"}}], "exactly one"),
    ([{"fileData": {"fileUri": "mem://ackloop-files/files/ab", "mimeType": "image/png"}}],
     "not one Gemini can read"),
    ([{"inlineData": {"mimeType": "application/zip", "data": "AAAA"}}], "not supported"),
    ([{"inlineData": {"mimeType": "image/png", "data": "AAAA", "displayName": "a.png"}},
      {"inlineData": {"mimeType": "image/png", "data": "AAAA", "displayName": "a.png"}}],
     "used twice"),
])
def test_the_fake_server_refuses_a_malformed_function_response_part(
        parts: list[dict[str, Any]], error: str) -> None:
    import httpx

    from ackloop_dev.fakes.gemini_server import FakeGeminiServer

    body = {"contents": [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {
            "name": "f", "response": {"result": "x"}, "parts": parts}}]}]}
    with FakeGeminiServer(lambda r: text_turn("ok", request=r)) as server:
        answer = httpx.post(f"{server.url}/v1beta/models/m:generateContent", json=body)
        dangling = httpx.post(f"{server.url}/v1beta/models/m:generateContent", json={
            "contents": [{"role": "user", "parts": [{"functionResponse": {
                "name": "f", "response": {"r": {"$ref": "nope.png"}},
                "parts": [{"inlineData": {"mimeType": "image/png", "data": "AAAA",
                                          "displayName": "a.png"}}]}}]}]})
    assert answer.status_code == 400 and error in answer.text, answer.text
    assert dangling.status_code == 400 and "names no part" in dangling.text
