"""The agent store: runs, step leases and the transcript, on top of any DocumentDB.

All the durable-loop bookkeeping lives here once; the Firestore and in-memory adapters only move
documents. The store stands in rooms, one module per aggregate, each a class over the same
:class:`~ackloop.docdb.base.DocumentDB`, collection paths and retention (:class:`StoreBase`):

- :mod:`~ackloop.store.runs`: runs and conversations (create, admit, read, end, cancel);
- :mod:`~ackloop.store.steps`: claims, leases, releases, the step commit, a run's steps;
- :mod:`~ackloop.store.transcript`: the transcript's chunks, appends and compactions;
- :mod:`~ackloop.store.waits`: waiting steps, decisions, received events, the sweeper's clock;
- :mod:`~ackloop.store.letters`: poison, dead letters and their redrive;
- :mod:`~ackloop.store.base`: the paths, the retention and the values they all pass;
- :mod:`~ackloop.store.commit`: what a step's commit is made of.

:class:`AgentStore` holds every room: the letters as :attr:`AgentStore.letters` (callers use
``store.letters.record_dead_letter(...)``), the others, for now, as its bases, so their callers
are unchanged until they move to their room in the same way.
"""

from __future__ import annotations

from ackloop.docdb.base import DocumentDB
from ackloop.docdb.counting import DocumentCounters, delivery_counters
from ackloop.store.base import (
    DAY_SECONDS,
    EXPIRE_AT,
    LAST_DOCUMENT_ID,
    Claim,
    ClaimState,
    Retention,
    RunEnd,
    StoreBase,
    Transcript,
)
from ackloop.store.commit import Basis, Committed, Decision, Pricer, RunRead
from ackloop.store.letters import DEAD_LETTER_PAGE, Letters
from ackloop.store.runs import CREATE_RUN_ATTEMPTS, MAX_QUEUED_RUNS, EndWrites, Runs
from ackloop.store.steps import Steps
from ackloop.store.transcript import (
    CHUNK_BYTES,
    VIEW_PAGE,
    ModelStepInputs,
    Transcripts,
    pointer_range,
)
from ackloop.store.waits import MAX_RECEIVED_EVENTS, DecisionRefused, Waits, payload_digest

__all__ = ["CHUNK_BYTES", "CREATE_RUN_ATTEMPTS", "DAY_SECONDS", "DEAD_LETTER_PAGE", "EXPIRE_AT",
           "LAST_DOCUMENT_ID", "MAX_QUEUED_RUNS", "MAX_RECEIVED_EVENTS", "VIEW_PAGE",
           "AgentStore", "Basis", "Claim", "ClaimState", "Committed", "Decision",
           "DecisionRefused", "DocumentCounters", "EndWrites", "Letters", "ModelStepInputs",
           "Pricer", "Retention", "RunEnd", "RunRead", "Runs", "Steps", "StoreBase",
           "Transcript", "Transcripts", "Waits", "delivery_counters", "payload_digest",
           "pointer_range"]


class AgentStore(Steps, Waits):
    """Every room of the store over one database: runs and conversations (:class:`Runs`),
    steps (:class:`Steps`), the transcript (:class:`Transcripts`) and waits (:class:`Waits`),
    which it still is; poison and dead letters (:class:`Letters`) are :attr:`letters`, the
    room its callers use."""

    def __init__(self, db: DocumentDB, collection_prefix: str = "",
                 retention: Retention | None = None) -> None:
        super().__init__(db, collection_prefix, retention)
        self.letters = Letters(db, collection_prefix, retention)
