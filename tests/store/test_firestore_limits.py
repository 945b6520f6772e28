"""Firestore's limits and errors, as the DocumentDB adapters present them (H8, H10).

The in-memory store refuses what Firestore refuses (a document over 1 MiB), so a run that
passes on memory cannot fail on Firestore; a turn whose tool results total several MiB still
fits, on both. Firestore's Aborted (contention) is retryable, never "already exists".
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import grpc
import pytest
from google.api_core import exceptions as gexc

from ackloop.docdb.base import (
    MAX_DOCUMENT_BYTES,
    MAX_WRITES_PER_COMMIT,
    AlreadyExists,
    DocumentDB,
    InvalidWrite,
    StorageUnavailable,
    Write,
)
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.document_sizes import MAX_DEPTH, depth, value_size
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import QueryMessage
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import AgentStore
from ackloop.transcript.conversation import TURN_RESULTS_BYTES
from tests.engine.fakes import CountingToolbox, make_loop
from tests.support.grpc_standin import StandIn

# -- the 1 MiB document limit, on memory and on the emulator --------------------------------------

# Two string fields of half the total each (one property may hold at most 1,048,487 bytes).
# The margins keep clear of the exact overheads, which Firestore and memory count differently.
FITS, TOO_LARGE = MAX_DOCUMENT_BYTES - 8_000, MAX_DOCUMENT_BYTES + 12_000


def halves(total: int) -> dict[str, str]:
    return {"a": "a" * (total // 2), "b": "b" * (total // 2)}


async def test_a_document_under_1_mib_is_stored_and_one_over_it_is_refused(
    db: DocumentDB, prefix: str
) -> None:
    await db.create(f"{prefix}c/fits", halves(FITS))
    with pytest.raises(InvalidWrite):
        await db.create(f"{prefix}c/too-large", halves(TOO_LARGE))
    fits, too_large = await db.get_all([f"{prefix}c/fits", f"{prefix}c/too-large"])
    assert fits is not None and fits.data == halves(FITS) and too_large is None


async def test_an_update_that_grows_a_document_over_1_mib_writes_nothing_of_its_batch(
    db: DocumentDB, prefix: str
) -> None:
    """The merged document counts (not the update alone), and the batch is all or nothing."""
    path, other = f"{prefix}c/growing", f"{prefix}c/other"
    version = await db.create(path, {"a": "a" * (FITS // 2)})
    with pytest.raises(InvalidWrite):
        await db.commit([Write("set", other, {"n": 1}),
                         Write("update", path, {"b": "b" * (TOO_LARGE // 2)},
                               if_version=version)])
    growing, untouched = await db.get_all([path, other])
    assert growing is not None and set(growing.data) == {"a"} and growing.version == version
    assert untouched is None


async def test_the_memory_store_refuses_a_commit_of_more_writes_than_firestore_allows() -> None:
    """Memory refuses more than MAX_WRITES_PER_COMMIT writes in one commit, and writes none of
    them. (The Firestore emulator accepts 501: the memory store is the stricter of the two,
    which keeps "passes on memory" implying "passes on Firestore".)"""
    db = MemoryDocumentDB()
    writes = [Write("create", f"c/{i:04d}", {"i": i}) for i in range(MAX_WRITES_PER_COMMIT + 1)]
    with pytest.raises(InvalidWrite):
        await db.commit(writes)
    assert await db.list_all("c") == []
    assert len(await db.commit(writes[:MAX_WRITES_PER_COMMIT])) == MAX_WRITES_PER_COMMIT


# -- a fan-out whose results total several MiB (H8) ------------------------------------------------

CALLS = 6
RESULT_CHARS = 700_000  # each fits its own step document; together 4.2 MB


def json_size(data: Any) -> int:
    return len(json.dumps(data, ensure_ascii=False).encode())


async def test_a_fan_out_whose_results_total_several_mib_completes_and_every_document_fits(
    db: DocumentDB, prefix: str
) -> None:
    model = ScriptedModel.from_turns([
        calls_turn([("big", {"key": str(i)}) for i in range(CALLS)]),
        text_turn("summarised"),
    ])
    tools = CountingToolbox({"big": "x" * RESULT_CHARS})
    loop = make_loop(model, tools)
    loop.deps.store = store = AgentStore(db, prefix)
    await loop.submit(QueryMessage(request_id=f"{prefix}fan-out", text="go"))
    await loop.run_until_idle()

    run = await store.runs.get_run(run_id_for_request(f"{prefix}fan-out"))
    assert run is not None and run.status is RunStatus.COMPLETED, run
    assert run.answer == "summarised" and tools.executed["big"] == CALLS
    # The ledger keeps every result whole; the model read them cut to fit one turn.
    steps = await db.list_all(store.steps_collection(run.run_id))
    whole = [s.data["result"]["response"]["result"] for s in steps if s.data["kind"] == "tool"]
    assert [len(r) for r in whole] == [RESULT_CHARS] * CALLS
    turn_results = model.requests[1].contents[-1]
    responses = [p["function_response"]["response"] for p in turn_results["parts"]]
    assert len(responses) == CALLS and all("truncated" in r for r in responses)
    assert json_size(responses) <= TURN_RESULTS_BYTES
    # Every document written fits Firestore's limit.
    chunks = await db.list_all(store.transcript_collection(run.conversation_id))
    sizes = [json_size(s.data) for s in [*steps, *chunks]]
    assert chunks and max(sizes) < MAX_DOCUMENT_BYTES, sizes


# -- Aborted is contention (H10) -----------------------------------------------------------------


def contended_db(standin: StandIn, status: grpc.StatusCode) -> FirestoreDocumentDB:
    """A Firestore adapter whose every commit (the library's create, the adapter's commit) is
    answered with ``status``, by a gRPC stand-in for Firestore."""
    standin.answer("Commit", status)
    return FirestoreDocumentDB.connect("p")


@pytest.mark.parametrize("operation", ["create", "commit"])
async def test_firestore_aborted_is_retryable_contention_not_already_exists(
    standin: StandIn, operation: str,
) -> None:
    db = contended_db(standin, grpc.StatusCode.ABORTED)
    assert isinstance(gexc.Aborted("x"), gexc.Conflict)  # why the order of the mapping matters
    with pytest.raises(StorageUnavailable) as raised:
        if operation == "create":
            await db.create("c/doc", {"n": 1})
        else:
            version = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
            await db.commit([Write("update", "c/doc", {"n": 1}, if_version=version)])
    assert not isinstance(raised.value, AlreadyExists)
    assert "Aborted" in str(raised.value)


async def test_firestore_already_exists_still_reads_as_already_exists(standin: StandIn) -> None:
    db = contended_db(standin, grpc.StatusCode.ALREADY_EXISTS)
    with pytest.raises(AlreadyExists):
        await db.create("c/d", {})
    with pytest.raises(AlreadyExists):
        await db.commit([Write("create", "c/d", {})])


async def test_a_poison_record_refused_by_contention_is_retried_not_dropped(
    standin: StandIn,
) -> None:
    """``record_poison`` ignores AlreadyExists (the record is there already); under contention
    it must not take the write for done: the delivery is redelivered instead."""
    store = AgentStore(contended_db(standin, grpc.StatusCode.ABORTED))
    with pytest.raises(StorageUnavailable):
        await store.letters.record_poison("m-1", {"reason": "poison_message"})


# -- Firestore's own measure: numbers are 8 bytes, nesting stops at 20 ---------------------------


def nested(levels: int) -> dict[str, Any]:
    """A document whose field ``n`` nests maps ``levels`` deep."""
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"n": value}
    return {"n": value}


async def test_numbers_are_sized_as_firestore_stores_them_not_as_their_json(
    db: DocumentDB, prefix: str
) -> None:
    """140,000 zeros are 280 kB of JSON and 1.12 MB in Firestore: refused, on memory as on the
    emulator; 120,000 (960 kB) are stored."""
    assert len(json.dumps({"n": [0] * 140_000}, separators=(",", ":"))) < MAX_DOCUMENT_BYTES // 3
    assert value_size({"n": [0] * 140_000}) > MAX_DOCUMENT_BYTES
    with pytest.raises(InvalidWrite):
        await db.create(f"{prefix}c/zeros", {"n": [0] * 140_000})
    await db.create(f"{prefix}c/fewer", {"n": [0] * 120_000})
    zeros, fewer = await db.get_all([f"{prefix}c/zeros", f"{prefix}c/fewer"])
    assert zeros is None and fewer is not None and len(fewer.data["n"]) == 120_000


async def test_maps_nested_deeper_than_twenty_levels_are_refused(
    db: DocumentDB, prefix: str
) -> None:
    assert depth(nested(MAX_DEPTH)["n"]) == MAX_DEPTH
    await db.create(f"{prefix}c/twenty", nested(MAX_DEPTH))
    with pytest.raises(InvalidWrite):
        await db.create(f"{prefix}c/deeper", nested(MAX_DEPTH + 1))
    with pytest.raises(InvalidWrite):  # arrays count as levels too
        await db.create(f"{prefix}c/mixed", {"n": [nested(MAX_DEPTH - 1)]})
    twenty, deeper, mixed = await db.get_all(
        [f"{prefix}c/twenty", f"{prefix}c/deeper", f"{prefix}c/mixed"])
    assert twenty is not None and twenty.data == nested(MAX_DEPTH)
    assert deeper is None and mixed is None


async def test_an_array_directly_in_an_array_is_refused(db: DocumentDB, prefix: str) -> None:
    for n, value in enumerate(({"a": [[1]]}, {"a": [1, [2]]})):
        with pytest.raises(InvalidWrite):
            await db.create(f"{prefix}c/arrays-{n}", value)
    await db.create(f"{prefix}c/maps-between", {"a": [{"b": [1]}]})
