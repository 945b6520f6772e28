"""The document-database port.

Paths are slash-separated Firestore paths (``runs/run-1/steps/0000-model``). A document's
``version`` is opaque: Firestore's update time, or a counter in memory. A write may require the
document to still be at a version it read: that precondition is the fencing token of a lease.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from ackloop.domain.errors import PermanentError, RetryableError
from ackloop.domain.jsondict import JsonDict

T = TypeVar("T")
Version = Any


class AlreadyExists(Exception):
    """``create`` found the document already there."""


class PreconditionFailed(Exception):
    """A write's ``if_version`` no longer matches: someone else wrote the document."""


MAX_DOCUMENT_BYTES = 1_048_576
"""Firestore's document size limit."""
MAX_WRITES_PER_COMMIT = 500
"""Firestore's limit on the writes of one batch or transaction."""


class InvalidWrite(PermanentError):
    """The database refused a write as it is (too large a document, too many writes):
    sending it again cannot help."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="invalid_write")


class StorageUnavailable(RetryableError):
    """The database did not answer or gave up on contention; the step should be redelivered."""


@dataclass(frozen=True)
class Snapshot:
    path: str
    data: JsonDict
    version: Version
    size: int | None = field(default=None, compare=False)
    """The document's size as the database sent it (Firestore: the encoded response that
    carried it, the document and a few bytes of read time), when the
    adapter knows it without more work; counters measure the others as JSON."""

    @property
    def id(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Write:
    """One write of an atomic batch.

    ``create`` fails if the document exists; ``set`` replaces it; ``update`` merges top-level
    fields into an existing document. ``if_version`` (update only) is a precondition.
    ``into`` (update only): keys set inside map fields, ``{field: {key: value}}``, the map's
    other keys left as they are: what adds an entry to a map sends only that entry.
    """

    op: Literal["create", "set", "update"]
    path: str
    data: JsonDict = field(default_factory=dict)
    if_version: Version | None = None
    into: dict[str, JsonDict] = field(default_factory=dict)


class Transaction(Protocol):
    async def get(self, path: str) -> Snapshot | None: ...

    def write(self, write: Write) -> None: ...


class DocumentDB(Protocol):
    async def get_all(self, paths: Sequence[str]) -> list[Snapshot | None]:
        """Read several documents in one round trip, in the order asked."""
        ...

    async def create(self, path: str, data: JsonDict) -> Version:
        """Create a document; raise :class:`AlreadyExists` if it is there."""
        ...

    async def commit(self, writes: Sequence[Write]) -> list[Version]:
        """Apply all writes atomically, or none of them.

        Raises :class:`PreconditionFailed` or :class:`AlreadyExists`.
        """
        ...

    async def list_range(
        self, collection: str, start_id: str, end_id: str, limit: int | None = None
    ) -> list[Snapshot]:
        """Documents of ``collection`` whose id is in ``[start_id, end_id]``, by id (the first
        ``limit`` of them when given)."""
        ...

    async def list_where(
        self, collection: str, field_name: str, value: Any, order_by: str, limit: int = 100
    ) -> list[Snapshot]:
        """Documents of ``collection`` with ``field_name == value``, ordered by ``order_by``."""
        ...

    async def list_newest(
        self, collection: str, equal: Mapping[str, Any], order_by: str, limit: int = 100,
        below: Any = None,
    ) -> list[Snapshot]:
        """Documents of ``collection`` whose fields equal every item of ``equal`` (none: all of
        them), the highest ``order_by`` first; only those whose ``order_by`` is under ``below``
        when it is given (the next page after a document with that value)."""
        ...

    async def list_all(self, collection: str, limit: int = 1000) -> list[Snapshot]:
        """Documents of ``collection`` by id."""
        ...

    async def transact(self, fn: Callable[[Transaction], Awaitable[T]]) -> T:
        """Run ``fn`` in a serialisable read-write transaction (retried on contention)."""
        ...
