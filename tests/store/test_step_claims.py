"""Claims that race for a step, and run ends written from a stale read: the version fences.

Each test drives an exact interleaving (two readers of one version, a write between a read and
its commit) on memory and on the Firestore emulator.
"""

from __future__ import annotations

import asyncio

import pytest

from ackloop.docdb.base import DocumentDB
from ackloop.domain.errors import StaleRead, StepBusy
from ackloop.domain.keys import StepKey
from ackloop.domain.records import RunLimits, RunRecord, RunStatus, StepStatus, StopReason
from ackloop.domain.wire import Usage
from ackloop.engine.step_commit import record
from ackloop.store import AgentStore, Basis, Claim, Decision, RunEnd
from tests.support.commits import complete, free
from tests.support.rendezvous import RendezvousDB

KEY = StepKey.tool(0, 0)
LEASE = 10.0


def racing_store(db: DocumentDB, prefix: str) -> tuple[AgentStore, RendezvousDB]:
    racing = RendezvousDB(db)
    return AgentStore(racing, prefix), racing


async def test_two_claims_of_an_expired_lease_race_and_exactly_one_takes_it_over(
    db: DocumentDB, prefix: str
) -> None:
    """Both deliveries read the expired step at the same version; only one takeover commits."""
    store, racing = racing_store(db, prefix)
    await store.steps.claim_step("r", KEY, "lookup", owner="dead", now=100, lease_seconds=LEASE)
    racing.arm(store.step_path("r", str(KEY)))

    results = await asyncio.gather(
        store.steps.claim_step("r", KEY, "lookup", owner="a", now=111, lease_seconds=LEASE),
        store.steps.claim_step("r", KEY, "lookup", owner="b", now=111, lease_seconds=LEASE),
        return_exceptions=True,
    )

    won = [r for r in results if isinstance(r, Claim)]
    busy = [r for r in results if isinstance(r, StepBusy)]
    assert len(won) == 1 and len(busy) == 1, f"both claims returned: {results}"
    assert won[0].state == "taken_over" and won[0].step.fence == 2
    (stored,) = await store.steps.get_steps("r", [str(KEY)])
    assert stored is not None and stored.owner == won[0].step.owner
    assert stored.fence == 2 and stored.attempts == 2


async def test_a_claim_that_read_before_the_holder_renewed_does_not_take_the_step(
    db: DocumentDB, prefix: str
) -> None:
    """A late heartbeat between a claimer's read and its takeover keeps the lease its holder's."""
    store, racing = racing_store(db, prefix)
    holder = await store.steps.claim_step("r", KEY, "lookup", owner="a", now=100,
                                          lease_seconds=LEASE)
    path = store.step_path("r", str(KEY))
    racing.arm(path)
    # The claimer reads the expired lease and waits at the rendezvous...
    claimer = asyncio.create_task(
        store.steps.claim_step("r", KEY, "lookup", owner="b", now=111, lease_seconds=LEASE))
    await racing.readers_waiting(1)
    # ...the holder's heartbeat lands, and the test's own read lets the claimer go on.
    renewed = await store.steps.renew_lease(holder, now=111, lease_seconds=LEASE)
    await racing.get_all([path])

    with pytest.raises(StepBusy):
        await claimer
    await complete(store, renewed, now=112, result={"by": "a"})
    (stored,) = await store.steps.get_steps("r", [str(KEY)])
    assert stored is not None and stored.owner == "a" and stored.fence == 1
    assert stored.result == {"by": "a"}


def run_record(run_id: str = "run-1") -> RunRecord:
    return RunRecord(
        run_id=run_id, request_id=f"req-{run_id}", request_hash="h", conversation_id=run_id,
        agent="default", text="hi", model="m", created_at=100.0,
        limits=RunLimits(max_steps=5, max_seconds=60, max_tool_calls=5),
    )


async def test_a_run_end_written_from_a_stale_read_of_the_run_commits_nothing(
    db: DocumentDB, prefix: str
) -> None:
    """The writes that end a run are fenced on the run version read: a failure recorded
    meanwhile (a dead letter) is not overwritten by a late answer."""
    store = AgentStore(db, prefix)
    await store.runs.create_run(run_record())
    read = await store.runs.read_run("run-1")
    assert read is not None
    claim = await store.steps.claim_step("run-1", StepKey.model(0), "model", owner="a", now=101,
                                         lease_seconds=LEASE)
    assert await store.runs.fail_run("run-1", "dead_lettered: gave up", now=105)

    end = RunEnd(status=RunStatus.COMPLETED, stop_reason=StopReason.ANSWERED,
                 usage=Usage(model_calls=1), answer="too late")
    with pytest.raises(StaleRead):
        await record(store, claim, Basis(read), Decision(result={}, end=end), now=106,
                                price=free)
    (step,) = await store.steps.get_steps("run-1", [claim.key])
    assert step is not None and step.status is StepStatus.RUNNING
    run = await store.runs.get_run("run-1")
    assert run is not None and run.status is RunStatus.FAILED
    assert run.error == "dead_lettered: gave up" and run.answer is None
