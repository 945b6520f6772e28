"""Committing a step through the store's one domain call, for the store's own tests."""

from __future__ import annotations

from collections.abc import Sequence

from ackloop.domain.cost import Cost
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import Outgoing, RunLimits, RunRecord
from ackloop.engine.step_commit import record
from ackloop.store import AgentStore, Basis, Claim, Committed, Decision, RunRead


def free(writes: int, outbox: Sequence[Outgoing]) -> Cost:
    """A pricer for tests that do not look at costs."""
    return Cost()


async def run_read(store: AgentStore, run_id: str, conversation: str = "c") -> RunRead:
    """The run ``run_id`` as read, created first if it does not exist."""
    read = await store.runs.read_run(run_id)
    if read is None:
        await store.runs.create_run(RunRecord(
            run_id=run_id, request_id=f"req-{run_id}", request_hash="h",
            conversation_id=conversation, agent="default", text="hi", model="m",
            created_at=100.0, limits=RunLimits(max_steps=5, max_seconds=60, max_tool_calls=5)))
        read = await store.runs.read_run(run_id)
    assert read is not None
    return read


async def complete(store: AgentStore, claim: Claim, *, now: float,
                   result: JsonDict | None = None) -> Committed:
    """Complete ``claim`` with ``result`` (a tool step's kind of commit: no transcript)."""
    basis = Basis(await run_read(store, claim.run_id))
    return await record(store, claim, basis, Decision(result=result), now=now, price=free)
