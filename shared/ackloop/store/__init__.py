"""The agent store: runs, step leases and the transcript, on top of any DocumentDB.

All the durable-loop bookkeeping lives here once; the Firestore and in-memory adapters only move
documents. The store stands in rooms, one module per aggregate, each a class over the same
:class:`~ackloop.docdb.base.DocumentDB`, collection paths and retention (:class:`StoreBase`, the
ground they all stand on; no room is built on another):

- :mod:`~ackloop.store.runs`: runs and conversations (create, admit, read, end, cancel);
- :mod:`~ackloop.store.steps`: claims, leases, releases, the step commit, a run's steps;
- :mod:`~ackloop.store.transcript`: the transcript's chunks, appends and compactions;
- :mod:`~ackloop.store.waits`: waiting steps, decisions, received events, the sweeper's clock;
- :mod:`~ackloop.store.letters`: poison, dead letters and their redrive;
- :mod:`~ackloop.store.evals`: eval reports (``ackloop eval``), a head and pages of cases;
- :mod:`~ackloop.store.schedules`: schedules, their next firing and recent firings;
- :mod:`~ackloop.store.base`: the ground: paths, retention and the values they all pass;
- :mod:`~ackloop.store.decision`: what a step's commit is made of, and the engine's part in it.

:class:`AgentStore` is the narrow port the engine holds: the rooms as attributes
(``store.runs.get_run(...)``, ``store.steps.commit_step(...)``, ``store.transcript``,
``store.waits``, ``store.letters``, ``store.evals``, ``store.schedules``) and the ground's
paths. A commit that
crosses rooms (a step's commit that appends to the transcript and ends the run) is written by
the room that owns it, with the write builders of the others' modules.

The store is a pure writer: it builds no message, prices nothing and masks nothing; the engine
hands it all of that (:data:`Composer`), and it writes it with its preconditions.
"""

from __future__ import annotations

from ackloop.docdb.base import DocumentDB
from ackloop.docdb.counting import DocumentCounters, delivery_counters
from ackloop.domain.errors import DecisionRefused
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
from ackloop.store.decision import (
    Basis,
    Committed,
    Composed,
    Composer,
    Decision,
    RunRead,
    StepPlan,
)
from ackloop.store.evals import EvalHead, Evals
from ackloop.store.letters import DEAD_LETTER_PAGE, Letters
from ackloop.store.quota import Quotas
from ackloop.store.runs import CREATE_RUN_ATTEMPTS, MAX_QUEUED_RUNS, EndWrites, Runs
from ackloop.store.schedules import ScheduleChanged, Schedules, StoredSchedule
from ackloop.store.steps import Steps
from ackloop.store.transcript import (
    CHUNK_BYTES,
    VIEW_PAGE,
    ModelStepInputs,
    Transcripts,
    pointer_range,
)
from ackloop.store.waits import MAX_RECEIVED_EVENTS, Waits, payload_digest

__all__ = ["CHUNK_BYTES", "CREATE_RUN_ATTEMPTS", "DAY_SECONDS", "DEAD_LETTER_PAGE", "EXPIRE_AT",
           "LAST_DOCUMENT_ID", "MAX_QUEUED_RUNS", "MAX_RECEIVED_EVENTS", "VIEW_PAGE",
           "AgentStore", "Basis", "Claim", "ClaimState", "Committed", "Composed", "Composer",
           "Decision",
           "DecisionRefused", "DocumentCounters", "EndWrites", "EvalHead", "Evals", "Letters",
           "ModelStepInputs",
           "Retention", "RunEnd", "RunRead", "Runs", "ScheduleChanged", "Schedules", "StepPlan",
           "Steps", "StoreBase", "StoredSchedule", "Transcript", "Transcripts", "Waits",
           "delivery_counters", "payload_digest", "pointer_range"]


class AgentStore(StoreBase):
    """The store's port: its rooms over one database, each an attribute (:attr:`runs`,
    :attr:`steps`, :attr:`transcript`, :attr:`waits`, :attr:`letters`, :attr:`evals`,
    :attr:`schedules`, :attr:`quotas`), and the ground's paths and counters. Callers name the
    room they use; a wrapper (the fault points of the tests) replaces one room, never the
    port."""

    def __init__(self, db: DocumentDB, collection_prefix: str = "",
                 retention: Retention | None = None) -> None:
        super().__init__(db, collection_prefix, retention)
        self.runs = Runs(db, collection_prefix, retention)
        self.steps = Steps(db, collection_prefix, retention)
        self.transcript = Transcripts(db, collection_prefix, retention)
        self.waits = Waits(db, collection_prefix, retention)
        self.letters = Letters(db, collection_prefix, retention)
        self.evals = Evals(db, collection_prefix, retention)
        self.schedules = Schedules(db, collection_prefix, retention)
        self.quotas = Quotas(db, collection_prefix, retention)
