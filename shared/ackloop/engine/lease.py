"""Keeping a step's lease alive while its model or tool call runs (the heartbeat)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from ackloop.clock import Clock
from ackloop.errors import LeaseLost, RetryableError
from ackloop.store import AgentStore, Claim

log = logging.getLogger(__name__)


class ClaimRef:
    """The current claim of a step being run: the heartbeat replaces it on every renewal, and
    every later write (commit, release, failure) must use the latest one."""

    def __init__(self, claim: Claim) -> None:
        self.claim = claim


class Heartbeat:
    """Renews ``ref.claim`` every third of the lease until stopped.

    Stopping waits for an in-flight renewal instead of cancelling it, so the version used by the
    commit is the one the database really holds.
    """

    def __init__(self, store: AgentStore, clock: Clock, ref: ClaimRef, lease_seconds: float):
        self.ref = ref
        self.lost = False
        self._store = store
        self._clock = clock
        self._lease = lease_seconds
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self._lease / 3)
            if self._stop.is_set():
                return
            try:
                self.ref.claim = await self._store.renew_lease(
                    self.ref.claim, now=self._clock.now(), lease_seconds=self._lease
                )
            except LeaseLost:
                self.lost = True
                claim = self.ref.claim
                log.warning("lease on %s/%s was taken over", claim.run_id, claim.key)
                return
            except RetryableError as exc:  # keep trying until the lease runs out
                log.warning("heartbeat for %s failed: %s", self.ref.claim.key, exc)

    def start(self) -> None:
        self._task = asyncio.create_task(self._beat())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    def check(self) -> Claim:
        """The current claim; raises :class:`LeaseLost` if another holder took the step."""
        claim = self.ref.claim
        if self.lost:
            raise LeaseLost(f"step {claim.key} of {claim.run_id} lost its lease")
        return claim


@contextlib.asynccontextmanager
async def heartbeat(
    store: AgentStore, clock: Clock, ref: ClaimRef, lease_seconds: float
) -> AsyncIterator[Heartbeat]:
    beat = Heartbeat(store, clock, ref, lease_seconds)
    beat.start()
    try:
        yield beat
    finally:
        await beat.stop()
