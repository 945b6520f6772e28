"""The heartbeat and an in-request retry's next attempt write the same claim: they take turns.

Both writes are fenced on the claim's version. If the next attempt were written while a renewal
was under way, whichever landed second would find the version moved and take the lease for lost:
the step would give up a call it still holds, or a stale renewal would win.
"""

from __future__ import annotations

import asyncio

from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import StepKey
from ackloop.engine.lease import ClaimRef, Heartbeat
from ackloop.store import AgentStore, Claim

LEASE_S = 0.3
"""Real seconds: the heartbeat renews every third of it."""


class HeldRenewals(AgentStore):
    """A store whose lease renewals wait at a gate after reading the claim they fence on."""

    def __init__(self) -> None:
        super().__init__(MemoryDocumentDB())
        self.renewing = asyncio.Event()
        self.gate = asyncio.Event()

    async def renew_lease(self, claim: Claim, *, now: float, lease_seconds: float) -> Claim:
        self.renewing.set()
        await self.gate.wait()
        return await super().renew_lease(claim, now=now, lease_seconds=lease_seconds)


async def test_a_next_attempt_waits_for_a_renewal_under_way_and_neither_loses_the_lease(
) -> None:
    store, clock = HeldRenewals(), ManualClock()
    claim = await store.claim_step("run-1", StepKey.model(0), "gemini", owner="me",
                                   now=clock.now(), lease_seconds=LEASE_S)
    ref = ClaimRef(claim)
    beat = Heartbeat(store, clock, ref, LEASE_S)
    beat.start()
    try:
        await asyncio.wait_for(store.renewing.wait(), 5)
        retry = asyncio.create_task(beat.next_attempt("503 mid-stream"))
        await asyncio.sleep(LEASE_S)
        assert not retry.done(), "the next attempt was written during a renewal"
        store.gate.set()
        after = await asyncio.wait_for(retry, 5)
    finally:
        store.gate.set()
        await beat.stop()

    assert not beat.lost
    assert after.step.attempts == 2
    (stored,) = await store.get_steps("run-1", [str(StepKey.model(0))])
    assert stored is not None and stored.attempts == 2
    assert stored.last_error == "503 mid-stream"
    # The claim the step holds is the one the database holds: its commit would go through.
    renewed = await AgentStore.renew_lease(store, ref.claim, now=clock.now(),
                                           lease_seconds=LEASE_S)
    assert renewed.step.attempts == 2
