"""What a model step sends Gemini for the transcript's file parts (ackloop.files.for_request)."""

from __future__ import annotations

import base64

import pytest
from google.genai import types

from ackloop import files
from ackloop.domain.errors import PermanentError
from ackloop.domain.jsondict import JsonDict
from ackloop.files import INLINE_REQUEST_BYTES, MemoryFileStore, for_request, stored_part


def question(*parts: JsonDict, text: str = "what is it?") -> JsonDict:
    return {"role": "user", "parts": [*parts, {"text": text}]}


async def test_a_small_stored_file_is_sent_inline_without_its_name_and_deterministically(
) -> None:
    store = MemoryFileStore()
    part = stored_part(await store.put(b"%PDF-1.4 tiny", "application/pdf", name="a.pdf"))
    contents = [question(part)]
    sent = await for_request(store, contents)
    assert sent == [{"role": "user", "parts": [
        {"inline_data": {"mime_type": "application/pdf",
                         "data": base64.b64encode(b"%PDF-1.4 tiny").decode()}},
        {"text": "what is it?"}]}]
    assert await for_request(store, contents) == sent  # a redelivered step sends the same
    assert contents == [question(part)]  # the transcript's contents are left as they were
    types.Content.model_validate(sent[0])  # a valid google-genai part: no extra keys


async def test_above_the_inline_limit_the_stored_uri_is_sent_and_nothing_is_read() -> None:
    store = MemoryFileStore(inline_bytes=10)
    part = stored_part(await store.put(b"x" * 11, "image/png", name="big.png"))
    store.objects.clear()  # it would fail if it read the file
    sent = await for_request(store, [question(part)])
    assert sent[0]["parts"][0] == {"file_data": {"file_uri": part["file_data"]["file_uri"],
                                                 "mime_type": "image/png"}}


async def test_the_requests_inline_budget_goes_to_the_newest_files_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "INLINE_REQUEST_BYTES", 25)
    store = MemoryFileStore()
    old = stored_part(await store.put(b"o" * 15, "image/png"))
    new = stored_part(await store.put(b"n" * 15, "image/png"))
    sent = await for_request(store, [question(old), {"role": "model", "parts": [
        {"text": "a picture"}]}, question(new)])
    assert "file_data" in sent[0]["parts"][0]  # no room left for the older one
    assert sent[2]["parts"][0]["inline_data"]["data"] == base64.b64encode(b"n" * 15).decode()
    assert INLINE_REQUEST_BYTES == 14 * 1024 * 1024


async def test_a_callers_uri_and_contents_without_files_pass_as_they_are() -> None:
    store = MemoryFileStore()
    given = {"file_data": {"file_uri": "https://example.org/a.png", "mime_type": "image/png"}}
    plain = [question(text="hello")]
    assert await for_request(store, plain) is plain
    assert (await for_request(store, [question(given)]))[0]["parts"][0] == given


async def test_a_file_in_a_function_response_is_inlined_with_its_name() -> None:
    store = MemoryFileStore()
    part = stored_part(await store.put(b"\x89PNG chart", "image/png", name="chart.png"))
    response = {"function_response": {"name": "draw", "response": {"chart": {
        "$ref": "chart.png"}}, "parts": [part]}}
    sent = await for_request(store, [{"role": "user", "parts": [response]}])
    (inner,) = sent[0]["parts"][0]["function_response"]["parts"]
    assert inner == {"inline_data": {"mime_type": "image/png", "display_name": "chart.png",
                                     "data": base64.b64encode(b"\x89PNG chart").decode()}}


async def test_a_file_gone_from_the_store_is_said_in_text_and_a_changed_one_fails() -> None:
    store = MemoryFileStore()
    part = stored_part(await store.put(b"kept bytes", "application/pdf"))
    uri = part["file_data"]["file_uri"]
    store.objects[uri] = b"other bytes"
    with pytest.raises(PermanentError, match="does not match its digest"):
        await for_request(store, [question(part)])
    del store.objects[uri]
    sent = await for_request(store, [question(part)])
    assert sent[0]["parts"][0] == {"text": f"(the file {uri} (application/pdf) is no longer "
                                           "stored)"}


def test_a_stored_files_uri_carries_its_digest_and_size() -> None:
    name = files.object_name(b"abc")
    assert name == ("files/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad-3")
    assert files.stored_size(f"gs://bucket/{name}") == 3
    assert files.stored_size("gs://bucket/files/elsewhere.pdf") is None
