"""A DocumentDB decorator that holds chosen reads until several have happened.

Two claims of one step that both read it before either writes are the race the lease's version
precondition exists for. In one event loop they never overlap on their own (the in-memory reads
do not yield), so a test arms this decorator on the step's path: the next ``parties`` reads of
that document all return the same version, and only then go on to write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ackloop.docdb.base import DocumentDB, Snapshot, Transaction, Version, Write
from ackloop.domain.jsondict import JsonDict

T = TypeVar("T")

# Long enough for the Firestore emulator; short enough that a missing party fails the test.
MEET_TIMEOUT = 10.0


class RendezvousDB:
    """Delegates every call to ``inner``; :meth:`arm` makes the next reads of a path meet."""

    def __init__(self, inner: DocumentDB) -> None:
        self.inner = inner
        self._path: str | None = None
        self._barrier: asyncio.Barrier | None = None
        self._joined = 0

    def arm(self, path: str, parties: int = 2) -> None:
        """The next ``parties`` reads of ``path`` wait for each other after reading (once)."""
        self._path, self._barrier, self._joined = path, asyncio.Barrier(parties), 0

    async def readers_waiting(self, count: int) -> None:
        """Return once ``count`` reads of the armed path are held at the rendezvous."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MEET_TIMEOUT
        while self._barrier is None or self._barrier.n_waiting < count:
            if loop.time() > deadline:
                raise TimeoutError(f"{count} reader(s) never reached the rendezvous")
            await asyncio.sleep(0.001)

    async def get_all(self, paths: Sequence[str]) -> list[Snapshot | None]:
        found = await self.inner.get_all(paths)
        barrier = self._barrier
        # One-shot: once ``parties`` reads have joined, later reads go straight through.
        if barrier is not None and self._path in paths and self._joined < barrier.parties:
            self._joined += 1
            await asyncio.wait_for(barrier.wait(), timeout=MEET_TIMEOUT)
        return found

    async def create(self, path: str, data: JsonDict) -> Version:
        return await self.inner.create(path, data)

    async def commit(self, writes: Sequence[Write]) -> list[Version]:
        return await self.inner.commit(writes)

    async def list_range(
        self, collection: str, start_id: str, end_id: str, limit: int | None = None
    ) -> list[Snapshot]:
        return await self.inner.list_range(collection, start_id, end_id, limit)

    async def list_where(
        self, collection: str, field_name: str, value: Any, order_by: str, limit: int = 100
    ) -> list[Snapshot]:
        return await self.inner.list_where(collection, field_name, value, order_by, limit)

    async def list_all(self, collection: str, limit: int = 1000) -> list[Snapshot]:
        return await self.inner.list_all(collection, limit)

    async def transact(self, fn: Callable[[Transaction], Awaitable[T]]) -> T:
        return await self.inner.transact(fn)
