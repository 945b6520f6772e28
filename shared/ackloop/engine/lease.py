"""Keeping a step's lease alive while its model or tool call runs (the heartbeat)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from ackloop.clock import Clock
from ackloop.docdb.base import Snapshot
from ackloop.errors import LeaseLost, RetryableError, UnknownRun
from ackloop.keys import StepKey
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


async def claim_with_run(
    store: AgentStore, clock: Clock, *, run_id: str, key: StepKey, name: str, owner: str,
    lease_seconds: float,
) -> tuple[Snapshot, Claim]:
    """Read the run and claim the step in one round trip; :class:`UnknownRun` if no run."""
    run_snapshot, claim = await asyncio.gather(
        store.get_run_snapshot(run_id),
        store.claim_step(run_id, key, name, owner=owner, now=clock.now(),
                         lease_seconds=lease_seconds),
    )
    if run_snapshot is None:
        raise UnknownRun(run_id)
    return run_snapshot, claim


@contextlib.asynccontextmanager
async def released_on_retry(store: AgentStore, clock: Clock, ref: ClaimRef) -> AsyncIterator[None]:
    """On a retryable failure, give the lease back (honouring a retry-after) and re-raise, so
    the redelivery can take the step at once instead of waiting for the lease to expire."""
    try:
        yield
    except RetryableError as exc:
        await store.release_step(
            ref.claim,
            error=f"{type(exc).__name__}: {exc}",
            not_before=clock.now() + exc.retry_after if exc.retry_after else 0.0,
        )
        raise
