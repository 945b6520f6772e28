"""The transcript chunks' decode cache: a warm process decodes each turn of a chunk once, and
what it hands out is always what an uncached decode gives, never shared between callers."""

from __future__ import annotations

import copy
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
from ackloop.domain.frozen import freeze
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


def test_every_reader_gets_the_same_frozen_values_and_a_copy_of_its_own() -> None:
    cache, client = DecodeCache(1 << 20, {TRANSCRIPT}), _client()
    fields = _fields(_chunk(2))
    missed = codec.decode_fields(fields, client, cache)
    hit = codec.decode_fields(fields, client, cache)
    assert hit["turns"]["t000000"] is missed["turns"]["t000000"]  # shared, not copied
    assert hit["turns"] is not missed["turns"]  # the top-level map is the reader's
    turn = hit["turns"]["t000000"]
    for change in (lambda: turn[1]["parts"][0].__setitem__("text", "changed"),
                   lambda: turn.append({"role": "user", "parts": []}),
                   lambda: hit["contents"][0]["parts"].clear(),
                   lambda: turn[0].update(role="model")):
        with pytest.raises(TypeError, match="read-only"):
            change()
    own = copy.deepcopy(turn)
    own[1]["parts"][0]["text"] = "changed by a reader, in its own copy"
    own.append({"role": "user", "parts": []})
    hit["turns"]["t000009"] = own
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


def test_every_plain_value_is_kept_types_included() -> None:
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
        assert found["turns"]["t000001"][0]["at"] == at
    assert len(cache) == 2 and cache.hits == 2


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
    with pytest.raises(TypeError):
        first.turns["t000000"][0]["parts"].clear()  # shared: no reader changes it
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
        with pytest.raises(TypeError):
            snap.data["turns"]["t000000"][0]["parts"].clear()  # shared: no reader changes it
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
    # A document written twice in one commit.
    (snap,) = await db.get_all([path])
    assert snap is not None and cache.known_hits == known + 1  # known from the read before
    await db.commit([
        Write("update", path, {"tail": "run-4/0000-model"}, if_version=snap.version),
        Write("update", path, {"tail": "run-4/0001-model"}, into={"turns": {"t000001": []}})])
    assert (await read())["tail"] == "run-4/0001-model"
    assert cache.known_hits == known + 1


def _write_in_transaction(path: str) -> Any:
    async def body(txn: Any) -> None:
        await txn.get(path)
        txn.write(Write("update", path, {"tail": "run-3/0000-model"},
                        into={"turns": {"t000004": _turn(4)}}))
    return body


V1, V2 = (100, 1), (100, 2)


def _update(data: dict[str, Any], *, fenced_on: tuple[int, int] | None = V1) -> Any:
    """The raw ``Write`` of an update with ``data`` (field paths), fenced on ``fenced_on``."""
    from google.protobuf.timestamp_pb2 import Timestamp

    from ackloop.docdb.firestore_codec import version_of

    option = None
    if fenced_on is not None:
        stamp = Timestamp(seconds=fenced_on[0], nanos=fenced_on[1])
        option = _client().write_option(last_update_time=version_of(stamp))
    return codec.update_pb(PATH, data, option)


BEFORE = {"tail": "run-1/0001-model", "size": 200,
          "turns": {"t000000": _turn(0), "t000001": _turn(1)}}


@pytest.mark.parametrize(("write", "after"), [
    pytest.param(codec.create_pb(PATH, _chunk(1)), _chunk(1), id="a create"),
    pytest.param(codec.set_pb(PATH, {"tail": "x"}), {"tail": "x"}, id="a set"),
    pytest.param(_update({"tail": "run-1/0002-model", "turns.t000002": _turn(2)}),
                 BEFORE | {"tail": "run-1/0002-model",
                           "turns": BEFORE["turns"] | {"t000002": _turn(2)}},
                 id="an append fenced on the version known"),
    pytest.param(_update({"turns.t000000": _turn(0, "again")}),
                 BEFORE | {"turns": BEFORE["turns"] | {"t000000": _turn(0, "again")}},
                 id="an entry written again"),
    pytest.param(_update({"fence": "run-9@1"}), BEFORE | {"fence": "run-9@1"},
                 id="a new field"),
    pytest.param(_update({"size": firestore.DELETE_FIELD}),
                 {k: v for k, v in BEFORE.items() if k != "size"}, id="a field deleted"),
    pytest.param(_update({"tail": "x"}, fenced_on=V2), None, id="fenced on another version"),
    pytest.param(_update({"tail": "x"}, fenced_on=None), None, id="not fenced"),
    pytest.param(_update({"at": firestore.SERVER_TIMESTAMP}), None, id="a server value"),
    pytest.param(_update({"`a.b`": 1}), None, id="a quoted field path"),
    pytest.param(_update({"turns.t000000.role": "user"}), None, id="a path inside an entry"),
])
def test_what_a_write_says_a_document_holds(write: Any, after: dict[str, Any] | None) -> None:
    """After a commit of ``write`` (the document was at ``V1``, holding ``BEFORE``), what the
    process knows it holds at the version the commit returned: exactly that, or nothing."""
    cache, client = DecodeCache(1 << 20, {TRANSCRIPT}), _client()
    cache.remember(PATH, V1, {name: cache.frozen(value) if name != "turns" else
                              cache.entries({k: cache.frozen(freeze(t))
                                             for k, t in value.items()})
                              for name, value in BEFORE.items()})
    cache.wrote(PATH, write, (200, 0))
    assert cache.known(PATH, V1) is None
    known = cache.known(PATH, (200, 0))
    if after is None:
        assert known is None
        return
    assert known is not None
    found = {name: cache.thaw(known, name, lambda pb: codec._canonical(pb, client))
             for name in list(known.fields)}
    assert found == after
    assert list(found.get("turns", {})) == sorted(found.get("turns", {}))  # in key order


async def test_the_in_memory_database_shares_the_chunks_entries_frozen_as_firestore_does(
) -> None:
    """The local engine reads a transcript chunk as a deployed process does (its entries
    shared, frozen): code that would change them fails here too."""
    from ackloop.docdb.memory import SHARED_COLLECTIONS

    assert frozenset({TRANSCRIPT}) == SHARED_COLLECTIONS
    store = AgentStore(MemoryDocumentDB(), "p_")
    path = store.chunk_path("c1", 0)
    await store.db.commit([Write("create", path, _chunk(2))])
    (chunk,) = await store.db.get_all([path])
    assert chunk is not None and chunk.data == _chunk(2)
    chunk.data["turns"]["t000009"] = _turn(9)  # the top-level map is the reader's
    with pytest.raises(TypeError):
        chunk.data["turns"]["t000000"].append({})
    await store.db.commit([Write("create", store.run_path("r1"), {"usage": {"a": 1}})])
    (run,) = await store.db.get_all([store.run_path("r1")])
    assert run is not None
    run.data["usage"]["a"] = 2  # a run's document is read as a copy of the reader's own
    (again,) = await store.db.get_all([store.run_path("r1")])
    assert again is not None and again.data["usage"] == {"a": 1}
