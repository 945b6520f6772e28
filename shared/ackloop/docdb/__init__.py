"""A small document-database port with two adapters: Firestore and in-memory.

The agent store (:mod:`ackloop.store`) holds the durable-loop logic once, on top of this port;
the in-memory adapter behaves like Firestore (copies on read and write, versions, preconditions,
serialised transactions) so the same contract tests run against both.
"""

from ackloop.docdb.base import (
    AlreadyExists,
    DocumentDB,
    PreconditionFailed,
    Snapshot,
    StorageUnavailable,
    Transaction,
    Write,
)

__all__ = [
    "AlreadyExists",
    "DocumentDB",
    "PreconditionFailed",
    "Snapshot",
    "StorageUnavailable",
    "Transaction",
    "Write",
]
