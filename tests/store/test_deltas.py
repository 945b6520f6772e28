"""The delta store: a model call's text written in bounded batches, best effort, and read back
by id (step, attempt, sequence), on both DocumentDB adapters."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from ackloop.docdb.base import StorageUnavailable, Version, Write
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.store import AgentStore, Retention
from ackloop.store.deltas import (
    DeltaWriter,
    delta_expiry,
    delta_id,
    deltas_collection,
    next_id,
    read_deltas,
)

STEP = "0002-model"


def _writer(store: AgentStore, attempt: int = 1, flush_seconds: float = 0.1,
            expire_at: datetime | None = None) -> DeltaWriter:
    return DeltaWriter(store.db, deltas_collection(store, "run-d"), STEP, attempt,
                       flush_seconds=flush_seconds, expire_at=expire_at)


async def test_pieces_are_written_at_most_once_per_interval_and_read_back_whole(
    store: AgentStore,
) -> None:
    writer = _writer(store, flush_seconds=0.1)
    pieces = [f"piece {i}; " for i in range(200)]
    began = time.monotonic()
    for piece in pieces:
        writer.add(piece)
        await asyncio.sleep(0.005)
    await writer.close()
    seconds = time.monotonic() - began

    read = await read_deltas(store, "run-d", "0", 1000)
    assert "".join(d.text for _, d in read) == "".join(pieces)
    assert [d.seq for _, d in read] == list(range(len(read))) == list(range(writer.writes))
    assert {(d.step, d.attempt) for _, d in read} == {(STEP, 1)}
    # The bound: one write per interval, the first at once, the rest when the call ends.
    assert len(read) <= seconds / 0.1 + 2, f"{len(read)} writes in {seconds:.2f} s"
    assert len(read) < len(pieces) / 5  # batched, not one write per piece
    assert read[0][1].text == pieces[0]  # the first piece did not wait for the interval


async def test_ids_sort_by_step_then_attempt_then_sequence(store: AgentStore) -> None:
    for attempt in (2, 1):
        writer = _writer(store, attempt)
        writer.add(f"attempt {attempt}")
        await writer.close()
    later = DeltaWriter(store.db, deltas_collection(store, "run-d"), "0003-model", 1,
                        flush_seconds=0.1, expire_at=None)
    later.add("next turn")
    await later.close()

    read = await read_deltas(store, "run-d", "0", 10)
    assert [i for i, _ in read] == ["0002-model-001-00000", "0002-model-002-00000",
                                    "0003-model-001-00000"]
    assert next_id(read[0][0]) == delta_id(STEP, 1, 1) == "0002-model-001-00001"
    assert [i for i, _ in await read_deltas(store, "run-d", next_id(read[0][0]), 10)] == [
        "0002-model-002-00000", "0003-model-001-00000"]


class FailingFirst(MemoryDocumentDB):
    """Refuses the first ``failures`` commits, as a Firestore outage would."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def commit(self, writes: Sequence[Write]) -> list[Version]:
        if self.failures:
            self.failures -= 1
            raise StorageUnavailable("firestore is down")
        return await super().commit(writes)


async def test_a_failed_write_fails_nothing_and_its_text_goes_with_the_next() -> None:
    store = AgentStore(FailingFirst(failures=2))
    writer = _writer(store, flush_seconds=0.05)
    writer.add("lost? ")
    await asyncio.sleep(0.02)
    writer.add("no: ")
    await asyncio.sleep(0.2)
    writer.add("kept.")
    await writer.close()  # raises nothing

    read = await read_deltas(store, "run-d", "0", 10)
    assert "".join(d.text for _, d in read) == "lost? no: kept."
    assert [d.seq for _, d in read] == list(range(len(read)))


async def test_an_abandoned_call_stops_writing() -> None:
    store = AgentStore(MemoryDocumentDB())
    writer = _writer(store, flush_seconds=5.0)
    writer.add("first ")
    await asyncio.sleep(0.05)
    writer.add("never written")
    await writer.abandon()
    writer.add("nor this")

    read = await read_deltas(store, "run-d", "0", 10)
    assert [d.text for _, d in read] == ["first "]
    assert writer.shown


async def test_deltas_expire_a_day_after_they_were_written() -> None:
    kept = AgentStore(MemoryDocumentDB(), retention=Retention(30 * 86_400.0, 3600.0))
    now = 1_000_000.0
    expiry = delta_expiry(kept, now)
    assert expiry == datetime.fromtimestamp(now + 86_400.0, UTC)
    writer = _writer(kept, expire_at=expiry)
    writer.add("x")
    await writer.close()
    (snap,) = await kept.db.list_all(deltas_collection(kept, "run-d"))
    assert snap.data["expire_at"] == expiry
    assert delta_expiry(AgentStore(MemoryDocumentDB()), now) is None  # retention 0: kept


async def test_the_end_of_the_call_writes_the_rest_without_waiting_out_the_interval() -> None:
    store = AgentStore(MemoryDocumentDB())
    writer = _writer(store, flush_seconds=5.0)  # longer than close() waits
    writer.add("first, ")
    await asyncio.sleep(0.05)
    writer.add("then the rest.")
    await writer.close()

    read = await read_deltas(store, "run-d", "0", 10)
    assert [d.text for _, d in read] == ["first, ", "then the rest."]


class GatedCommits(MemoryDocumentDB):
    """Holds each commit until ``gate`` is set; ``entered`` is set when one is waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.entered = asyncio.Event(), asyncio.Event()

    async def commit(self, writes: Sequence[Write]) -> list[Version]:
        self.entered.set()
        await self.gate.wait()
        return await super().commit(writes)


async def test_finish_leaves_the_rest_to_the_steps_commit_after_the_write_in_flight() -> None:
    """finish(): the write in flight completes first, and what is left comes back as the
    next delta, unwritten, for the step's commit to write."""
    db = GatedCommits()
    store = AgentStore(db)
    writer = _writer(store, flush_seconds=5.0)
    writer.add("first, ")  # written at once: held in flight
    await asyncio.wait_for(db.entered.wait(), 5.0)
    writer.add("then ")
    writer.add("the rest.")
    finishing = asyncio.create_task(writer.finish())
    await asyncio.sleep(0)
    assert not finishing.done()  # it waits for the write in flight
    db.gate.set()
    last = await asyncio.wait_for(finishing, 5.0)

    assert last is not None and (last.step, last.attempt, last.seq) == (STEP, 1, 1)
    assert last.text == "then the rest."
    read = await read_deltas(store, "run-d", "0", 10)
    assert [d.text for _, d in read] == ["first, "]  # the rest is not written here
    assert writer.writes == 2
    writer.add("after the end")  # ignored
    assert await writer.finish() is None
