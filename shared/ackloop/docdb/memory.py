"""An in-memory DocumentDB with Firestore's semantics, for unit tests and the contract suite:
its preconditions, its batch limit, and its document limits measured as Firestore measures them
(:mod:`ackloop.domain.document_sizes`)."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from ackloop.docdb.base import (
    MAX_DOCUMENT_BYTES,
    MAX_WRITES_PER_COMMIT,
    AlreadyExists,
    InvalidWrite,
    PreconditionFailed,
    Snapshot,
    Version,
    Write,
)
from ackloop.domain.document_sizes import document_size, unstorable
from ackloop.domain.frozen import freeze
from ackloop.domain.jsondict import JsonDict

T = TypeVar("T")


def _shared(value: Any) -> Any:
    """A top-level field as the decode cache hands it out: a new map or array of frozen
    entries, or a frozen value."""
    if type(value) is dict:
        return {k: freeze(v) for k, v in value.items()}
    if type(value) is list:
        return [freeze(v) for v in value]
    return freeze(value)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0]


SHARED_COLLECTIONS = frozenset({"transcript"})
"""The collections whose documents a deployed process decodes through its decode cache at the
shipped defaults (:data:`ackloop.store.chunk_cache.TRANSCRIPT`): what it reads of them it
shares, frozen (:mod:`ackloop.docdb.decode_cache`)."""


class MemoryDocumentDB:
    """Documents in a dict. Reads and writes deep-copy, as a remote store would; the entries
    of a top-level map or array of a document in ``shared`` are read frozen, as the Firestore
    adapter shares them with its decode cache (so a test of code that would change them fails
    here as it would there)."""

    def __init__(self, shared: frozenset[str] = SHARED_COLLECTIONS) -> None:
        self.shared = shared
        self._docs: dict[str, tuple[JsonDict, int]] = {}
        self._versions = itertools.count(1)
        self._lock = asyncio.Lock()
        self.written: Counter[str] = Counter()
        """Writes applied, by document path: what tests and benches count of a hot
        document (a parent's run written per child, say)."""

    def _snapshot(self, path: str) -> Snapshot | None:
        entry = self._docs.get(path)
        if entry is None:
            return None
        parts = path.rsplit("/", 2)
        if len(parts) == 3 and parts[1] in self.shared:
            return Snapshot(path, {k: _shared(v) for k, v in entry[0].items()}, entry[1])
        return Snapshot(path, copy.deepcopy(entry[0]), entry[1])

    async def get_all(self, paths: Sequence[str]) -> list[Snapshot | None]:
        return [self._snapshot(p) for p in paths]

    async def create(self, path: str, data: JsonDict) -> Version:
        async with self._lock:
            return self._apply([Write("create", path, data)])[0]

    async def commit(self, writes: Sequence[Write]) -> list[Version]:
        async with self._lock:
            return self._apply(writes)

    def _apply(self, writes: Sequence[Write]) -> list[Version]:
        # Firestore's limits, so that what passes here cannot fail there.
        if len(writes) > MAX_WRITES_PER_COMMIT:
            raise InvalidWrite(f"{len(writes)} writes in one commit (at most "
                               f"{MAX_WRITES_PER_COMMIT})")
        # Check every precondition first: the batch is all or nothing.
        for w in writes:
            current = self._docs.get(w.path)
            if w.op == "create" and current is not None:
                raise AlreadyExists(w.path)
            if w.op == "update":
                if current is None:
                    raise PreconditionFailed(f"{w.path} does not exist")
                if w.if_version is not None and current[1] != w.if_version:
                    raise PreconditionFailed(f"{w.path} changed since it was read")
        for w in writes:
            merged = (_merged(self._docs[w.path][0], w) if w.op == "update" else w.data)
            if (size := document_size(w.path, merged)) > MAX_DOCUMENT_BYTES:
                raise InvalidWrite(f"{w.path}: document of {size} bytes exceeds "
                                   f"{MAX_DOCUMENT_BYTES}")
            if (why := unstorable(merged)) is not None:
                raise InvalidWrite(f"{w.path}: {why}")
        versions: list[Version] = []
        for w in writes:
            version = next(self._versions)
            if w.op == "update":
                self._docs[w.path] = (copy.deepcopy(_merged(self._docs[w.path][0], w)), version)
            else:
                self._docs[w.path] = (copy.deepcopy(w.data), version)
            versions.append(version)
            self.written[w.path] += 1
        return versions

    def _children(self, collection: str) -> list[Snapshot]:
        found = [
            Snapshot(p, copy.deepcopy(d), v)
            for p, (d, v) in self._docs.items()
            if _parent(p) == collection
        ]
        return sorted(found, key=lambda s: s.id)

    async def list_range(
        self, collection: str, start_id: str, end_id: str, limit: int | None = None
    ) -> list[Snapshot]:
        found = [s for s in self._children(collection) if start_id <= s.id <= end_id]
        return found if limit is None else found[:limit]

    async def list_where(
        self, collection: str, field_name: str, value: Any, order_by: str, limit: int = 100
    ) -> list[Snapshot]:
        hits = [s for s in self._children(collection) if s.data.get(field_name) == value]
        # A null (or missing) value sorts first, as Firestore orders null before values.
        return sorted(hits, key=lambda s: (s.data.get(order_by) is not None,
                                           s.data.get(order_by) or 0))[:limit]

    async def list_newest(
        self, collection: str, equal: Mapping[str, Any], order_by: str, limit: int = 100,
        below: Any = None,
    ) -> list[Snapshot]:
        hits = [s for s in self._children(collection)
                if all(name in s.data and s.data[name] == value for name, value in equal.items())]
        # Firestore leaves out a document without the ordered field; the highest value first.
        hits = [s for s in hits if order_by in s.data
                and (below is None or s.data[order_by] < below)]
        return sorted(hits, key=lambda s: s.data[order_by], reverse=True)[:limit]

    async def list_all(self, collection: str, limit: int = 1000) -> list[Snapshot]:
        return self._children(collection)[:limit]

    async def transact(self, fn: Callable[[MemoryTransaction], Awaitable[T]]) -> T:
        async with self._lock:
            txn = MemoryTransaction(self)
            result = await fn(txn)
            self._apply(txn.writes)
            return result

    def reset(self) -> None:
        self._docs.clear()


class MemoryTransaction:
    def __init__(self, db: MemoryDocumentDB) -> None:
        self._db = db
        self.writes: list[Write] = []

    async def get(self, path: str) -> Snapshot | None:
        return self._db._snapshot(path)

    def write(self, write: Write) -> None:
        self.writes.append(write)


def _merged(document: JsonDict, w: Write) -> JsonDict:
    """``document`` as ``w`` (an update) leaves it: its fields replaced, its ``into`` entries
    set inside their maps."""
    merged = {**document, **w.data}
    for name, entries in w.into.items():
        current = merged.get(name)
        merged[name] = {**(current if isinstance(current, dict) else {}), **entries}
    return merged
