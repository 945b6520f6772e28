"""A DocumentDB decorator that counts what each step costs: round trips, documents, transactions.

Benchmarks read these counters from the adapters instead of estimating them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from ackloop.docdb.base import DocumentDB, JsonDict, Snapshot, Transaction, Version, Write

T = TypeVar("T")


@dataclass
class DocumentCounters:
    round_trips: int = 0
    docs_read: int = 0
    docs_written: int = 0
    transactions: int = 0
    bytes_read: int = 0
    """JSON size of the documents read: how the cost of a read grows with what it returns."""

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class CountingDocumentDB:
    def __init__(self, inner: DocumentDB) -> None:
        self.inner = inner
        self.counters = DocumentCounters()

    async def get_all(self, paths: Sequence[str]) -> list[Snapshot | None]:
        self.counters.round_trips += 1
        found = await self.inner.get_all(paths)
        self.counters.docs_read += max(1, sum(1 for s in found if s is not None))
        self.counters.bytes_read += sum(_size(s) for s in found if s is not None)
        return found

    async def create(self, path: str, data: JsonDict) -> Version:
        self.counters.round_trips += 1
        self.counters.docs_written += 1
        return await self.inner.create(path, data)

    async def commit(self, writes: Sequence[Write]) -> list[Version]:
        self.counters.round_trips += 1
        self.counters.docs_written += len(writes)
        return await self.inner.commit(writes)

    async def _listed(self, found: list[Snapshot]) -> list[Snapshot]:
        self.counters.round_trips += 1
        # Firestore bills a query that matches nothing as one read.
        self.counters.docs_read += max(1, len(found))
        self.counters.bytes_read += sum(_size(s) for s in found)
        return found

    async def list_range(
        self, collection: str, start_id: str, end_id: str, limit: int | None = None
    ) -> list[Snapshot]:
        return await self._listed(await self.inner.list_range(collection, start_id, end_id, limit))

    async def list_where(
        self, collection: str, field_name: str, value: Any, order_by: str, limit: int = 100
    ) -> list[Snapshot]:
        found = await self.inner.list_where(collection, field_name, value, order_by, limit)
        return await self._listed(found)

    async def list_newest(
        self, collection: str, equal: Mapping[str, Any], order_by: str, limit: int = 100
    ) -> list[Snapshot]:
        return await self._listed(await self.inner.list_newest(collection, equal, order_by, limit))

    async def list_all(self, collection: str, limit: int = 1000) -> list[Snapshot]:
        return await self._listed(await self.inner.list_all(collection, limit))

    async def transact(self, fn: Callable[[Transaction], Awaitable[T]]) -> T:
        self.counters.transactions += 1
        counters = self.counters

        async def counted(txn: Transaction) -> T:
            return await fn(_CountingTransaction(txn, counters))

        return await self.inner.transact(counted)


class _CountingTransaction:
    def __init__(self, inner: Transaction, counters: DocumentCounters) -> None:
        self._inner = inner
        self._counters = counters

    async def get(self, path: str) -> Snapshot | None:
        self._counters.round_trips += 1
        self._counters.docs_read += 1
        found = await self._inner.get(path)
        if found is not None:
            self._counters.bytes_read += _size(found)
        return found

    def write(self, write: Write) -> None:
        self._counters.docs_written += 1
        self._inner.write(write)


def _size(snapshot: Snapshot) -> int:
    return len(json.dumps(snapshot.data, separators=(",", ":"), default=str))
