"""A DocumentDB decorator that counts what each step costs: round trips, documents, transactions.

Benchmarks read these counters from the adapters instead of estimating them. Besides the
process's counters, every operation is also counted in the counters of the delivery it serves
(:func:`delivery_counters`, a context variable: concurrent deliveries of one process, each in
its own task, never mix), which is how a step knows the reads and writes it paid for.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from ackloop.docdb.base import DocumentDB, Snapshot, Transaction, Version, Write
from ackloop.domain.jsondict import JsonDict

T = TypeVar("T")


@dataclass
class DocumentCounters:
    round_trips: int = 0
    docs_read: int = 0
    docs_written: int = 0
    transactions: int = 0
    bytes_read: int = 0
    """Size of the documents read (as the database sent them when the adapter knows it, else
    as JSON): how the cost of a read grows with what it returns."""

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


_delivery: ContextVar[DocumentCounters | None] = ContextVar("ackloop_delivery_counters",
                                                            default=None)


@contextlib.contextmanager
def delivery_counters() -> Iterator[DocumentCounters]:
    """Count what the code inside does through any :class:`CountingDocumentDB` (tasks it
    starts included) in fresh counters, also kept in the process's."""
    counters = DocumentCounters()
    token = _delivery.set(counters)
    try:
        yield counters
    finally:
        _delivery.reset(token)


def current_delivery_counters() -> DocumentCounters | None:
    """The counters of the delivery being served, if one is being counted."""
    return _delivery.get()


class CountingDocumentDB:
    def __init__(self, inner: DocumentDB) -> None:
        self.inner = inner
        self.counters = DocumentCounters()

    def _count(self, **deltas: int) -> None:
        """Count in the process's counters and in those of the delivery being served."""
        for counters in (self.counters, _delivery.get()):
            if counters is not None:
                for name, delta in deltas.items():
                    setattr(counters, name, getattr(counters, name) + delta)

    async def get_all(self, paths: Sequence[str]) -> list[Snapshot | None]:
        found = await self.inner.get_all(paths)
        self._count(round_trips=1, docs_read=max(1, sum(1 for s in found if s is not None)),
                    bytes_read=sum(_size(s) for s in found if s is not None))
        return found

    async def create(self, path: str, data: JsonDict) -> Version:
        self._count(round_trips=1, docs_written=1)
        return await self.inner.create(path, data)

    async def commit(self, writes: Sequence[Write]) -> list[Version]:
        self._count(round_trips=1, docs_written=len(writes))
        return await self.inner.commit(writes)

    async def _listed(self, found: list[Snapshot]) -> list[Snapshot]:
        # Firestore bills a query that matches nothing as one read.
        self._count(round_trips=1, docs_read=max(1, len(found)),
                    bytes_read=sum(_size(s) for s in found))
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
        self, collection: str, equal: Mapping[str, Any], order_by: str, limit: int = 100,
        below: Any = None,
    ) -> list[Snapshot]:
        return await self._listed(await self.inner.list_newest(collection, equal, order_by, limit,
                                                               below))

    async def list_all(self, collection: str, limit: int = 1000) -> list[Snapshot]:
        return await self._listed(await self.inner.list_all(collection, limit))

    async def transact(self, fn: Callable[[Transaction], Awaitable[T]]) -> T:
        self._count(transactions=1)

        async def counted(txn: Transaction) -> T:
            return await fn(_CountingTransaction(txn, self._count))

        return await self.inner.transact(counted)


class _CountingTransaction:
    def __init__(self, inner: Transaction, count: Callable[..., None]) -> None:
        self._inner = inner
        self._count = count

    async def get(self, path: str) -> Snapshot | None:
        self._count(round_trips=1, docs_read=1)
        found = await self._inner.get(path)
        if found is not None:
            self._count(bytes_read=_size(found))
        return found

    def write(self, write: Write) -> None:
        self._count(docs_written=1)
        self._inner.write(write)


def _size(snapshot: Snapshot) -> int:
    if snapshot.size is not None:
        return snapshot.size
    return len(json.dumps(snapshot.data, separators=(",", ":"), default=str))
