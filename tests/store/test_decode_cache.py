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


def test_values_marshal_cannot_carry_are_decoded_every_time() -> None:
    cache, client = DecodeCache(1 << 20, {TRANSCRIPT}), _client()
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    data = {"turns": {"t000000": [{"blob": b"\x00\x01", "n": 1, "x": 1.0, "ok": True}],
                      "t000001": [{"at": at}]},
            "expire_at": at, "fence": None}
    for _ in range(2):
        found = codec.decode_fields(_fields(data), client, cache)
        assert found == data
        # Exactly the values decoded, types included (bytes stay bytes, 1.0 a float).
        assert {k: type(v) for k, v in found["turns"]["t000000"][0].items()} == {
            "blob": bytes, "n": int, "x": float, "ok": bool}
    assert len(cache) == 1 and cache.hits == 1  # the timestamp's turn is not kept


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
    found = await store.transcript.read_chunk("c1", 0)
    assert found is not None
    first, version = found
    assert first == TranscriptChunk.model_validate(_chunk(2))
    first.turns["t000000"][0]["parts"].clear()  # the caller's own
    await db.commit([Write("update", path, {"tail": "run-1/0003-model"}, if_version=version,
                           into={"turns": {"t000002": _turn(2)}})])
    found = await store.transcript.read_chunk("c1", 0)
    assert found is not None
    second, newer = found
    assert newer != version
    assert second == TranscriptChunk.model_validate(
        _chunk(3) | {"tail": "run-1/0003-model", "size": 200})
    # Known at its version: nothing read before is decoded again, the new turn once.
    assert (cache.known_hits, cache.misses) == (2, 4)
    await db.commit([Write("update", path, {"tail": "run-2/0000-model"}, if_version=newer,
                           into={"turns": {"t000002": _turn(2, "rewritten")}})])
    found = await store.transcript.read_chunk("c1", 0)
    assert found is not None
    assert found[0].turns["t000002"] == _turn(2, "rewritten")
    assert found[0].tail == "run-2/0000-model"


def _plain(value: Any) -> Any:
    """``value`` with every map's keys in order: what compares the order of a decode too."""
    if isinstance(value, dict):
        return [(k, _plain(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@pytest.mark.emulator
async def test_a_document_this_process_wrote_is_known_at_the_version_its_commit_returned(
        emulator_session: Any) -> None:
    """A chunk appended to by this process is read without decoding what it already knows,
    and reads exactly as a process that never saw it reads it (its maps' order included)."""
    cache = DecodeCache(1 << 20, {TRANSCRIPT})
    db = FirestoreDocumentDB.connect(emulator_session.project_id, decode_cache=cache)
    cold = FirestoreDocumentDB.connect(emulator_session.project_id,  # another process
                                       decode_cache=DecodeCache(1 << 20, {TRANSCRIPT}))
    prefix = f"t{uuid.uuid4().hex[:10]}_"
    store, path = AgentStore(db, prefix), AgentStore(db, prefix).chunk_path("c1", 0)
    expiry = datetime.datetime(2027, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    (version,) = await db.commit([Write("create", path, _chunk(1) | {"expire_at": expiry})])
    for n in range(1, 6):
        (version,) = await db.commit([Write(
            "update", path, {"tail": f"run-1/{n:04d}-model", "size": 100 * (n + 1)},
            if_version=version, into={"turns": {f"t{n:06d}": _turn(n)}})])
        (snap,) = await db.get_all([path])
        (truth,) = await cold.get_all([path])
        assert snap is not None and truth is not None
        assert snap.version == truth.version == version
        assert _plain(snap.data) == _plain(truth.data)
        assert snap.data["expire_at"] == expiry  # a timestamp: decoded from the read
        snap.data["turns"]["t000000"][0]["parts"].clear()  # the caller's own
    # Every read found the chunk at the version its commit returned, and each turn and the
    # opening content was decoded once, on the read that followed its write.
    assert cache.known_hits == 5
    assert cache.misses == 1 + 6
    found = await store.transcript.read_chunk("c1", 0)
    assert found is not None and found[0] == TranscriptChunk.model_validate(
        _chunk(6) | {"tail": "run-1/0005-model", "size": 600})


@pytest.mark.emulator
async def test_what_a_process_cannot_know_exactly_is_decoded_from_the_read(
        emulator_session: Any) -> None:
    """A document another process wrote, an update fenced on no version, a write of a
    transaction and a server-side value are decoded from what the read returns."""
    from google.cloud.firestore_v1 import SERVER_TIMESTAMP

    cache = DecodeCache(1 << 20, {TRANSCRIPT})
    db = FirestoreDocumentDB.connect(emulator_session.project_id, decode_cache=cache)
    other = FirestoreDocumentDB.connect(emulator_session.project_id,  # another process
                                        decode_cache=DecodeCache(1 << 20, {TRANSCRIPT}))
    path = AgentStore(db, f"t{uuid.uuid4().hex[:10]}_").chunk_path("c1", 0)

    async def read() -> dict[str, Any]:
        (snap,) = await db.get_all([path])
        (truth,) = await other.get_all([path])
        assert snap is not None and truth is not None and snap.version == truth.version
        assert _plain(snap.data) == _plain(truth.data)
        return snap.data

    (version,) = await db.commit([Write("create", path, _chunk(2))])
    await read()
    known = cache.known_hits
    # Another process appends: this one's knowledge is of an older version.
    (version,) = await other.commit([Write("update", path, {"tail": "run-2/0001-model"},
                                           if_version=version,
                                           into={"turns": {"t000002": _turn(2)}})])
    assert (await read())["tail"] == "run-2/0001-model"
    assert cache.known_hits == known  # decoded (entry by entry), then known again
    # An update with no version fence: what else the document holds is not known.
    await db.commit([Write("update", path, {"tail": "run-2/0002-model"},
                           into={"turns": {"t000003": _turn(3)}})])
    assert len((await read())["turns"]) == 4
    assert cache.known_hits == known
    # A transaction's write, and a value the server sets.
    await db.transact(_write_in_transaction(path))
    assert (await read())["tail"] == "run-3/0000-model"
    await db.commit([Write("set", path, _chunk(1) | {"at": SERVER_TIMESTAMP})])
    data = await read()
    assert isinstance(data["at"], datetime.datetime) and len(data["turns"]) == 1
    assert cache.known_hits == known  # every read above decoded what it found


def _write_in_transaction(path: str) -> Any:
    async def body(txn: Any) -> None:
        await txn.get(path)
        txn.write(Write("update", path, {"tail": "run-3/0000-model"},
                        into={"turns": {"t000004": _turn(4)}}))
    return body
