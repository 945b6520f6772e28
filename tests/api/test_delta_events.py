"""Delta events on a run's event stream: only the deltas of steps past the cursor, each once,
in step, attempt and sequence order, and never a cursor of their own."""

from __future__ import annotations

import asyncio

from ackloop.api.events import run_events, sse
from ackloop.api.models import DeltaEvent, Event
from ackloop.docdb.base import Write
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.keys import StepKey
from ackloop.domain.records import Outgoing, RunLimits, RunRecord, RunStatus, StepRecord, StepStatus
from ackloop.store import AgentStore
from ackloop.store.deltas import DeltaWriter, deltas_collection

RUN = "run-deltas"


async def _store() -> AgentStore:
    store = AgentStore(MemoryDocumentDB())
    await store.db.create(store.run_path(RUN), RunRecord(
        run_id=RUN, request_id="r", request_hash="h", conversation_id=RUN, agent="a",
        text="t", model="m", created_at=0.0, status=RunStatus.RUNNING,
        limits=RunLimits(max_steps=10, max_seconds=60, max_tool_calls=10)).to_doc())
    for key, status in (("0000-model", StepStatus.COMPLETED),
                        ("0000-tool-000", StepStatus.COMPLETED),
                        ("0001-model", StepStatus.RUNNING)):
        step = StepKey.parse(key)
        outbox = ([Outgoing(topic="tool_steps", data={}, target_step="0000-tool-000")]
                  if key == "0000-model" else [])
        await store.db.create(store.step_path(RUN, key), StepRecord(
            key=key, kind=step.kind, name="model" if step.kind == "model" else "lookup",
            turn=step.turn, index=step.index, status=status, outbox=outbox).to_doc())
    for step, attempt, texts in (("0000-model", 1, ["Let me look."]),
                                 ("0001-model", 1, ["Hel", "lo wo"]),
                                 ("0001-model", 2, ["Hello, world."])):
        writer = DeltaWriter(store.db, deltas_collection(store, RUN), step, attempt,
                             flush_seconds=0.05, expire_at=None)
        for text in texts:
            writer.add(text)
            await asyncio.sleep(0.06)
        await writer.close()
    return store


async def _events(store: AgentStore, after: str | None) -> list[Event]:
    return [e async for e in run_events(store, RUN, after, poll_seconds=0.01, max_seconds=0.2)
            if e is not None]


async def test_deltas_of_the_step_in_flight_follow_the_steps_sent_each_once() -> None:
    store = await _store()
    events = await _events(store, None)

    assert [type(e).__name__ for e in events] == ["StepEvent"] * 2 + ["DeltaEvent"] * 3
    deltas = [e for e in events if isinstance(e, DeltaEvent)]
    # The completed step's deltas are not sent (its event says it all); the running step's
    # come in attempt order, sent once however many polls there were.
    assert [(d.step, d.attempt, d.seq, d.text) for d in deltas] == [
        ("0001-model", 1, 0, "Hel"), ("0001-model", 1, 1, "lo wo"),
        ("0001-model", 2, 0, "Hello, world.")]
    frame = sse(deltas[0])
    assert frame.startswith("event: delta\ndata: {") and "\nid:" not in frame
    assert '"type":"delta"' in frame and '"attempt":1' in frame


async def test_a_resumed_stream_sends_the_running_steps_deltas_again() -> None:
    store = await _store()
    resumed = await _events(store, "0000-tool-000")
    assert [(type(e).__name__, getattr(e, "text", None)) for e in resumed] == [
        ("DeltaEvent", "Hel"), ("DeltaEvent", "lo wo"), ("DeltaEvent", "Hello, world.")]


async def test_a_step_that_completes_ends_its_deltas_and_the_next_steps_follow() -> None:
    store = await _store()
    seen: list[Event] = []

    async def follow() -> None:
        async for event in run_events(store, RUN, None, poll_seconds=0.01, max_seconds=1.0):
            if event is not None:
                seen.append(event)

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.2)
    await store.db.commit([Write("update", store.step_path(RUN, "0001-model"),
                                 {"status": "completed"})])
    for step, attempt, text in (("0001-model", 1, "a zombie's late text"),
                                ("0002-model", 1, "The next turn.")):
        writer = DeltaWriter(store.db, deltas_collection(store, RUN), step, attempt,
                             flush_seconds=0.05, expire_at=None)
        writer.add(text)
        await writer.close()
    await task

    said = [getattr(e, "text", None) or getattr(e, "cursor", None) for e in seen]
    assert said == ["0000-model", "0000-tool-000", "Hel", "lo wo", "Hello, world.",
                    "0001-model", "The next turn."]
