"""The transcript chunks' decode cache: a warm process decodes each turn of a chunk once, and
what it hands out is always what an uncached decode gives, never shared between callers."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore

from ackloop.config.settings import Settings
from ackloop.docdb import firestore_codec as codec
from ackloop.docdb.base import Write
from ackloop.docdb.decode_cache import ENTRY_OVERHEAD, DecodeCache
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.records import TranscriptChunk
from ackloop.store import AgentStore
from ackloop.store.chunk_cache import TRANSCRIPT, chunk_decode_cache

PATH = "projects/p/databases/(default)/documents/conversations/c1/transcript/00000"


def _turn(n: int, text: str = "") -> list[dict[str, Any]]:
    return [{"role": "user", "parts": [{"function_response": {
                "name": "lookup", "id": f"call-{n}", "response": {"value": n}}}]},
            {"role": "model", "parts": [{"text": text or f"turn {n} " + "x" * 40,
                                         "thought_signature": "c2ln"}]}]


def _chunk(turns: int, **fields: Any) -> dict[str, Any]:
    return {"index": 0, "tail": f"run-1/{turns:04d}-model", "size": 100 * turns,
            "contents": [{"role": "user", "parts": [{"text": "hello"}]}],
            "turns": {f"t{n:06d}": _turn(n) for n in range(turns)}} | fields


def _fields(data: dict[str, Any]) -> Any:
    return codec.set_pb(PATH, data).update.fields


def _client() -> firestore.AsyncClient:
    return firestore.AsyncClient(project="p", credentials=AnonymousCredentials())


def test_a_cached_decode_is_the_uncached_one_and_decodes_each_turn_once() -> None:
    cache, client = DecodeCache(1 << 20, {TRANSCRIPT}), _client()
    first = codec.decode_fields(_fields(_chunk(3)), client, cache)
    assert first == codec.decode_fields(_fields(_chunk(3)), client) == _chunk(3)
    assert (cache.hits, cache.misses) == (0, 4)  # three turns and the one content
    grown = codec.decode_fields(_fields(_chunk(4)), client, cache)
    assert grown == _chunk(4)
    assert (cache.hits, cache.misses) == (4, 5)  # only the new turn was decoded
    assert TranscriptChunk.model_validate(grown).entries == TranscriptChunk.model_validate(
        _chunk(4)).entries


def test_a_turn_changed_under_the_same_key_is_decoded_afresh() -> None:
    cache, client = DecodeCache(1 << 20, {TRANSCRIPT}), _client()
    codec.decode_fields(_fields(_chunk(2)), client, cache)
    changed = _chunk(2)
    changed["turns"]["t000001"] = _turn(1, "written again after the chunk expired")
    assert codec.decode_fields(_fields(changed), client, cache) == changed
    assert cache.misses == 4  # 3 at first, then the changed turn


def test_what_a_caller_does_to_its_values_reaches_neither_the_cache_nor_another_caller() -> None:
    cache, client = DecodeCache(1 << 20, {TRANSCRIPT}), _client()
    fields = _fields(_chunk(2))
    missed = codec.decode_fields(fields, client, cache)
    hit = codec.decode_fields(fields, client, cache)
    assert hit["turns"]["t000000"] is not missed["turns"]["t000000"]
    for value in (missed, hit):
        value["turns"]["t000000"][1]["parts"][0]["text"] = "changed by a caller"
        value["turns"]["t000000"].append({"role": "user", "parts": []})
        value["contents"][0]["parts"].clear()
    again = codec.decode_fields(fields, client, cache)
    assert again == _chunk(2)
    assert cache.hits == 6


def test_the_cache_stays_within_its_bytes_least_recently_used_out_first() -> None:
    client = _client()
    one = DecodeCache(1 << 20, {TRANSCRIPT})
    codec.decode_fields(_fields({"turns": {"t000019": _turn(19)}}), client, one)
    entry = one.size  # one turn's key, text and overhead (turns 10 to 19 are alike)
    cache = DecodeCache(entry * 3, {TRANSCRIPT})
    for n in range(20):
        codec.decode_fields(_fields({"turns": {f"t{n:06d}": _turn(n)}}), client, cache)
        assert cache.size <= cache.max_bytes
    assert len(cache) == 3
    # The newest stay: turn 19 is a hit, turn 0 (evicted long ago) a miss.
    misses = cache.misses
    codec.decode_fields(_fields({"turns": {"t000019": _turn(19)}}), client, cache)
    assert cache.misses == misses
    codec.decode_fields(_fields({"turns": {"t000000": _turn(0)}}), client, cache)
    assert cache.misses == misses + 1 and len(cache) == 3
    # An entry larger than the whole cache is decoded, not kept.
    tiny = DecodeCache(ENTRY_OVERHEAD + 10, {TRANSCRIPT})
    assert codec.decode_fields(_fields(_chunk(2)), client, tiny) == _chunk(2)
    assert len(tiny) == 0 and tiny.size == 0


def test_values_that_are_not_plain_json_are_decoded_every_time() -> None:
    cache, client = DecodeCache(1 << 20, {TRANSCRIPT}), _client()
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    data = {"turns": {"t000000": [{"blob": b"\x00\x01"}], "t000001": [{"at": at}]},
            "expire_at": at, "fence": None}
    for _ in range(2):
        assert codec.decode_fields(_fields(data), client, cache) == data
    assert len(cache) == 0 and cache.hits == 0


def test_only_the_transcript_chunks_are_admitted() -> None:
    cache = chunk_decode_cache(Settings().decode_cache_bytes)
    assert cache is not None and cache.max_bytes == 16 * 1024 * 1024
    store = AgentStore(MemoryDocumentDB(), "p_")
    assert cache.admits(store.chunk_path("c1", 3))
    assert not cache.admits(store.run_path("r1"))
    assert not cache.admits(store.step_path("r1", "0001-model"))
    assert not cache.admits(store.conversation_path("c1"))
    assert chunk_decode_cache(0) is None


@pytest.mark.emulator
async def test_a_chunk_changed_at_a_new_version_is_read_fresh(emulator_session: Any) -> None:
    cache = DecodeCache(1 << 20, {TRANSCRIPT})
    db = FirestoreDocumentDB.connect(emulator_session.project_id, decode_cache=cache)
    store = AgentStore(db, f"t{uuid.uuid4().hex[:10]}_")
    path = store.chunk_path("c1", 0)
    await db.commit([Write("create", path, _chunk(2))])
    found = await store.read_chunk("c1", 0)
    assert found is not None
    first, version = found
    assert first == TranscriptChunk.model_validate(_chunk(2))
    first.turns["t000000"][0]["parts"].clear()  # the caller's own
    await db.commit([Write("update", path, {"tail": "run-1/0003-model"}, if_version=version,
                           into={"turns": {"t000002": _turn(2)}})])
    found = await store.read_chunk("c1", 0)
    assert found is not None
    second, newer = found
    assert newer != version
    assert second == TranscriptChunk.model_validate(
        _chunk(3) | {"tail": "run-1/0003-model", "size": 200})
    assert cache.hits == 3  # the content and the two turns read before
    await db.commit([Write("update", path, {"tail": "run-2/0000-model"}, if_version=newer,
                           into={"turns": {"t000002": _turn(2, "rewritten")}})])
    found = await store.read_chunk("c1", 0)
    assert found is not None
    assert found[0].turns["t000002"] == _turn(2, "rewritten")
    assert found[0].tail == "run-2/0000-model"
