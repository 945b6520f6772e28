"""An event stream reads a long run a page at a time, past its cursor, never the whole run."""

from __future__ import annotations

from typing import Any

from ackloop.api.events import run_events
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.keys import StepKey
from ackloop.domain.records import Outgoing, RunLimits, RunRecord, RunStatus, StepRecord, StepStatus
from ackloop.store import AgentStore


class PageCounting(MemoryDocumentDB):
    def __init__(self) -> None:
        super().__init__()
        self.pages: list[int] = []

    async def list_range(self, collection: str, start_id: str, end_id: str,
                         limit: int | None = None) -> Any:
        paged = () if limit is None else (limit,)
        found = await super().list_range(collection, start_id, end_id, *paged)
        self.pages.append(len(found))
        return found


async def test_a_stream_of_a_601_step_run_reads_it_in_pages() -> None:
    db = PageCounting()
    store = AgentStore(db)
    run_id = "run-long"
    await db.create(store.run_path(run_id), RunRecord(
        run_id=run_id, request_id="r", request_hash="h", conversation_id=run_id, agent="a",
        text="t", model="m", created_at=0.0, status=RunStatus.COMPLETED,
        limits=RunLimits(max_steps=1000, max_seconds=60, max_tool_calls=1000)).to_doc())
    keys = []
    for turn in range(301):
        keys.append(StepKey.model(turn))
        if turn < 300:
            keys.append(StepKey.tool(turn, 0))
    for key in keys:
        target = str(StepKey.tool(key.turn, 0))
        outbox = ([Outgoing(topic="tool_steps", data={}, target_step=target)]
                  if key.kind == "model" and key.turn < 300 else [])
        step = StepRecord(key=str(key), kind=key.kind, name="model" if key.kind == "model"
                          else "lookup", turn=key.turn, index=key.index,
                          status=StepStatus.COMPLETED, outbox=outbox)
        await db.create(store.step_path(run_id, str(key)), step.to_doc())

    events = [e async for e in run_events(store, run_id, None, poll_seconds=0.01,
                                          max_seconds=10)]
    assert [e.cursor for e in events if e is not None] == [*map(str, keys), "end"]
    assert max(db.pages) <= 20  # the default page size
    assert sum(db.pages) == len(keys)  # each step read once

    db.pages.clear()
    resumed = [e async for e in run_events(store, run_id, "0250-tool-000", poll_seconds=0.01,
                                           max_seconds=10)]
    assert resumed[0] is not None and resumed[0].cursor == "0251-model"
    assert sum(db.pages) <= len(keys) - 500  # only from the cursor's turn on
