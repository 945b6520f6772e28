"""The agent store: runs, step leases and the transcript, on top of any DocumentDB.

All the durable-loop bookkeeping lives here once; the Firestore and in-memory adapters only move
documents. The invariants it keeps:

- a step document is created by the first delivery that claims it; its ``fence`` and the
  document version make the lease exclusive, and a holder whose lease was taken over cannot
  commit (:class:`~ackloop.errors.LeaseLost`);
- a step's completion, its transcript entries, its outbox and, for the last step, the run's
  final state are one atomic batch whose precondition is the holder's version of the step.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar

from ackloop import outgoing
from ackloop.context import summary_content
from ackloop.cost import Cost
from ackloop.docdb.base import (
    AlreadyExists,
    DocumentDB,
    PreconditionFailed,
    Snapshot,
    StorageUnavailable,
    Transaction,
    Version,
    Write,
)
from ackloop.docdb.counting import DocumentCounters, delivery_counters
from ackloop.docdb.sizes import value_size
from ackloop.errors import (
    ConversationBusy,
    ConversationNotStarted,
    IdempotencyMismatch,
    LeaseLost,
    PermanentError,
    StaleRead,
    StepBusy,
    StepConflict,
    StepTaken,
)
from ackloop.jsondict import JsonDict
from ackloop.keys import StepKey, is_run_id, message_doc_id
from ackloop.records import (
    DEADLINE,
    ConversationRecord,
    ReceivedEvent,
    RunRecord,
    RunStatus,
    StepDecision,
    StepRecord,
    StepStatus,
    StopReason,
    TranscriptChunk,
    Waiting,
)
from ackloop.store.commit import Basis, Committed, Decision, Pricer, RunRead
from ackloop.tools.masking import mask_secrets
from ackloop.wire import Usage

__all__ = ["AgentStore", "Basis", "Claim", "Committed", "Decision", "DecisionRefused",
           "DocumentCounters", "ModelStepInputs", "Pricer", "Retention", "RunEnd", "RunRead",
           "Transcript", "delivery_counters"]

if TYPE_CHECKING:
    from ackloop.deltas import ClaimWith, DeltaRecord, DeltasReady, DeltaWriter
    from ackloop.settings import Settings

# A chunk grows by one entry a turn, each append sending only its turn; past this size the next
# turn starts a new chunk, well below Firestore's 1 MiB document cap.
CHUNK_BYTES = 256 * 1024
# Optimistic retries of :meth:`AgentStore.create_run` when its documents change meanwhile.
CREATE_RUN_ATTEMPTS = 5
# Runs that may wait behind a conversation's active run (the queue lives on one document).
MAX_QUEUED_RUNS = 100
# Dead letters read per query when listing them, and an id above every document id.
DEAD_LETTER_PAGE = 500
LAST_DOCUMENT_ID = "\U0010ffff"

ClaimState = Literal["new", "taken_over", "completed", "waiting", "unclaimed"]
"""``waiting``: the step waits for a decision; nothing is claimed and nothing runs.
``unclaimed``: run without a claim; its document is created by the commit that records it
(:meth:`AgentStore.unclaimed`)."""

log = logging.getLogger(__name__)

VIEW_PAGE = 2
"""Transcript chunks a model step lists at a time, newest first, to find the last compaction
(:meth:`AgentStore.load_transcript_view`)."""

DAY_SECONDS = 86_400.0
EXPIRE_AT = "expire_at"
"""The field Firestore's TTL policies delete by (infra/firestore.tf): a timestamp."""


@dataclass(frozen=True)
class Retention:
    """How long documents are kept: every document gets an ``expire_at`` timestamp.

    * a run: ``seconds`` after it ended (set by the commit that ends it; none while it lives);
    * a step: when it is claimed, :meth:`live` (``seconds`` + ``run_seconds`` + a day), so it
      outlives its run's end by ``seconds`` without being written again when the run ends;
    * a transcript chunk: :meth:`live` from each append; the chunks an append does not rewrite
      are moved forward in that same commit when they are a day or more behind, so a
      conversation in use keeps all of its history, at most one extra write per chunk a day;
    * a conversation: on every write, :meth:`conversation` (a day past its chunks, so a
      transcript is deleted before the record that says whose it is); a conversation whose
      first run is its only run has no record (its run says whose it is), so it can be
      continued until that run expires, and its chunks go at most a day and the longest run
      after that;
    * an event's payload (``runs/{run_id}/events/{name}``): :meth:`live` from its arrival;
    * poison and dead letters: ``seconds`` after they were recorded.
    """

    seconds: float
    run_seconds: float
    """The longest a run lives after its first step: the deployment's max_seconds ceiling."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Retention | None:
        """The deployment's retention, or None when it keeps everything (retention_days 0)."""
        if settings.retention_days <= 0:
            return None
        return cls(settings.retention_days * DAY_SECONDS, settings.max_seconds_ceiling)

    def after(self, now: float) -> datetime:
        return _timestamp(now + self.seconds)

    def live(self, now: float) -> datetime:
        return _timestamp(now + self.seconds + self.run_seconds + DAY_SECONDS)

    def conversation(self, now: float) -> datetime:
        return _timestamp(now + self.seconds + self.run_seconds + 2 * DAY_SECONDS)


def _timestamp(seconds: float) -> datetime:
    """A Firestore timestamp (the client stores an aware datetime as one), as TTL needs."""
    return datetime.fromtimestamp(seconds, UTC)


@dataclass(frozen=True)
class RunEnd:
    """How a run ends: what the run document and the answer message will say."""

    status: RunStatus
    stop_reason: StopReason
    usage: Usage
    answer: str | None = None
    output: Any = None
    error: str | None = None
    cost: Cost | None = None
    """The run's total cost (its ingest and steps), written on the run and added to its
    conversation's."""
    agent: str | None = None
    """The agent whose turn ended the run, when a hand-off made it another than the run's:
    the conversation's later runs continue with it (``handed_to``)."""

    def __post_init__(self) -> None:
        # Every error a run ends with is stored and published: never with a credential in it.
        if self.error is not None:
            object.__setattr__(self, "error", mask_secrets(self.error))


@dataclass(frozen=True)
class EndWrites:
    """The writes that end a run, and the queued run of its conversation they start (if any)."""

    writes: list[Write]
    next_run_id: str | None


@dataclass(frozen=True)
class Claim:
    """The result of claiming a step: ours to run (new or taken over), or already completed."""

    run_id: str
    step: StepRecord
    version: Version | None
    """None while ``unclaimed``: no document exists yet."""
    state: ClaimState

    @property
    def key(self) -> str:
        return self.step.key


class DecisionRefused(Exception):
    """A decision that cannot be recorded: the HTTP status, a reason code and what to fix."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def _same_decision(a: StepDecision, b: StepDecision) -> bool:
    return (a.decision, a.args, a.comment, a.payload) == (b.decision, b.args, b.comment,
                                                          b.payload)


OPTIMISTIC_ATTEMPTS = 20
"""Reads a conditional read-modify-write may take before it gives up (the documents kept
changing): each refused commit means another writer's commit went through."""
T = TypeVar("T")
MAX_RECEIVED_EVENTS = 64
"""Distinct event names a run may receive: they live on the run document (1 MiB at most)."""


@dataclass(frozen=True)
class ModelStepInputs:
    """What a model step reads before its call (:meth:`AgentStore.model_step_inputs`)."""

    run: RunRead | None
    previous: list[StepRecord]
    """The previous turn's model step and those of its tool steps that exist."""
    own: StepRecord | None
    """The step's own document, if it exists."""
    transcript: Transcript | None
    """The transcript as the previous step left it (None: someone appended since, or a chunk
    is missing: list it)."""


@dataclass(frozen=True)
class Transcript:
    conversation_id: str
    chunks: list[TranscriptChunk]
    last_version: Version | None = None
    """Version of the last chunk as read: an append to it is fenced on it."""
    expires: tuple[Any, ...] = field(default=())
    """Each chunk's ``expire_at`` as read (None where it had none)."""

    @property
    def contents(self) -> list[JsonDict]:
        """The whole history as read (every turn once; a compaction's copies left out)."""
        return [c for chunk in self.chunks for c in chunk.entries]

    @property
    def start(self) -> int:
        """Position in :attr:`chunks` of the last compaction's chunk (0 if none was read): a
        model is sent the transcript from there on."""
        return next((i for i in range(len(self.chunks) - 1, -1, -1)
                     if self.chunks[i].summary is not None), 0)

    @property
    def view(self) -> list[JsonDict]:
        """What a model is sent: from the last compaction on (its summary, the turns it kept,
        the turns since), or the whole history where there was none."""
        return [c for chunk in self.chunks[self.start:] for c in chunk.view]

    @property
    def view_bytes(self) -> int:
        """The size of :attr:`view` as the chunks recorded it (no encoding)."""
        return sum(c.size for c in self.chunks[self.start:])

    @property
    def tail(self) -> str | None:
        return self.chunks[-1].tail if self.chunks else None


def _fresh_step(key: StepKey, name: str, *, owner: str, now: float, message_id: str,
                lease_expires_at: float) -> StepRecord:
    return StepRecord(key=str(key), kind=key.kind, name=name, turn=key.turn, index=key.index,
                      owner=owner, lease_expires_at=lease_expires_at, message_id=message_id,
                      created_at=now, started_at=now)


def _pointer(transcript: Transcript, writes: Sequence[Write]) -> JsonDict:
    """Where ``transcript`` stands once ``writes`` (its append) commit: the next step reads
    exactly these chunks, with the run, in one round trip (:meth:`AgentStore.run_and_transcript`)
    instead of querying the collection."""
    indexes = [int(w.path.rsplit("/", 1)[1]) for w in writes]
    indexes += [c.index for c in transcript.chunks]
    pointer: JsonDict = {"conversation_id": transcript.conversation_id,
                         "chunks": max(indexes, default=-1) + 1}
    first = transcript.chunks[transcript.start].index if transcript.chunks else 0
    if first:  # after a compaction: the next step reads from its chunk on
        pointer["start"] = first
    return pointer


def pointer_range(pointer: JsonDict) -> range:
    """The chunk indexes a step's transcript pointer names (from the last compaction on)."""
    return range(int(pointer.get("start") or 0), int(pointer["chunks"]))


def payload_digest(payload: JsonDict) -> str:
    """SHA-256 of ``payload``'s canonical JSON (sorted keys, compact)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _size(value: Any) -> int:
    """What ``value`` adds to a transcript chunk: its compact JSON or its size in Firestore,
    whichever is more (:mod:`ackloop.docdb.sizes`)."""
    return max(len(json.dumps(value, separators=(",", ":"))), value_size(value))


def _costed(run: RunRecord, costed: Callable[[RunRecord, int], Cost] | None,
            writes: int) -> RunRecord:
    """``run`` with what creating it spent, as its commit of ``writes`` documents is made."""
    if costed is None:
        return run
    cost = costed(run, writes)
    return run.model_copy(update={"ingest_cost": cost, "cost": cost})


def _sole_run_conversation(run: RunRecord) -> ConversationRecord:
    """The conversation of which ``run`` (the run whose id it bears) is the only run, as it
    stands while it has no document: ``run`` active until it ends, then its usage and cost as
    the conversation's."""
    ended = run.status.terminal
    return ConversationRecord(
        conversation_id=run.conversation_id, active_run_id=None if ended else run.run_id,
        run_count=1, owner=run.owner, agent=run.handed_to,
        updated_at=(run.finished_at or run.created_at) if ended else run.created_at,
        usage=run.usage if ended else Usage(), cost=run.cost if ended else None)


def _conversation_of(conversation_id: str, conv_snap: Snapshot | None,
                     first_snap: Snapshot | None) -> ConversationRecord | None:
    """The conversation as its document says, else as its first run (``runs/{conversation_id}``,
    read as ``first_snap``) implies it while it is the conversation's only run; None when
    neither exists (a run of another conversation under that id does not count)."""
    if conv_snap is not None:
        return ConversationRecord.model_validate(conv_snap.data)
    if first_snap is None:
        return None
    first = RunRecord.model_validate(first_snap.data)
    if first.conversation_id != conversation_id:
        return None
    return _sole_run_conversation(first)


def _refusal(run: RunRecord, stored: RunRecord | None, conv: ConversationRecord | None
             ) -> RunRecord | None:
    """What creating ``run`` meets, as read: the run already created for the same request
    (``stored``, returned), or a refusal raised: :class:`IdempotencyMismatch` (its id with
    another body), :class:`ConversationNotStarted` (a follow-up of a run that does not exist
    yet), ``conversation_not_found`` (another caller's conversation), or
    ``conversation_queue_full``. None: the run may be created."""
    if stored is not None:
        if stored.request_hash != run.request_hash:
            raise IdempotencyMismatch(
                f"request id {run.request_id!r} was already used with a different body")
        return stored
    if conv is None:
        if run.conversation_id != run.run_id and is_run_id(run.conversation_id):
            raise ConversationNotStarted(
                f"conversation {run.conversation_id!r}: its run does not exist (yet)",
                retry_after=10.0)
        return None
    if conv.owner != run.owner:
        # Another caller's conversation: it does not exist for this one (no history planted,
        # nothing written, and its id is not confirmed either).
        raise PermanentError(f"no conversation {run.conversation_id!r}",
                             reason="conversation_not_found")
    if conv.active_run_id not in (None, run.run_id) and len(conv.queue) >= MAX_QUEUED_RUNS:
        raise PermanentError(f"conversation {run.conversation_id!r} already has "
                             f"{len(conv.queue)} runs waiting", reason="conversation_queue_full")
    return None


def _recorded_at(record: JsonDict) -> float:
    """When a poison or dead-letter record was received (its ``received_at``), else now."""
    received = record.get("received_at")
    if isinstance(received, (int, float)) and not isinstance(received, bool):
        return float(received)
    return time.time()


class AgentStore:
    def __init__(self, db: DocumentDB, collection_prefix: str = "",
                 retention: Retention | None = None) -> None:
        """``retention``: when documents expire (see :class:`Retention`); None keeps them."""
        self.db = db
        self.retention = retention
        self._runs = f"{collection_prefix}runs"
        self._conversations = f"{collection_prefix}conversations"
        self._poison = f"{collection_prefix}poison"
        self._dead_letters = f"{collection_prefix}dead_letters"

    @property
    def counters(self) -> DocumentCounters | None:
        """What this process's store has read and written, when its database counts it."""
        counters = getattr(self.db, "counters", None)
        return counters if isinstance(counters, DocumentCounters) else None

    def delta_writer(self, run_id: str, step: str, attempt: int, *, flush_seconds: float,
                     now: float, ready: DeltasReady | None = None,
                     claim: ClaimWith | None = None) -> DeltaWriter:
        """Where the text of a streamed model call of ``step`` goes while the call runs
        (``ready``, ``claim``: for a step not claimed yet, see
        :class:`~ackloop.deltas.DeltaWriter`)."""
        from ackloop.deltas import DeltaWriter, delta_expiry, deltas_collection

        return DeltaWriter(self.db, deltas_collection(self, run_id), step, attempt,
                           flush_seconds=flush_seconds, expire_at=delta_expiry(self, now),
                           ready=ready, claim=claim)

    # -- retention ---------------------------------------------------------------------------

    def _expiry(self, now: float) -> JsonDict:
        """``expire_at`` of a record kept ``retention`` after ``now`` (a run's end, poison)."""
        return {EXPIRE_AT: self.retention.after(now)} if self.retention else {}

    def _live_expiry(self, now: float) -> JsonDict:
        """``expire_at`` of a step or a transcript chunk written at ``now``."""
        return {EXPIRE_AT: self.retention.live(now)} if self.retention else {}

    def _conversation_expiry(self, now: float) -> JsonDict:
        return {EXPIRE_AT: self.retention.conversation(now)} if self.retention else {}

    # -- paths ---------------------------------------------------------------------------

    def run_path(self, run_id: str) -> str:
        return f"{self._runs}/{run_id}"

    def steps_collection(self, run_id: str) -> str:
        return f"{self._runs}/{run_id}/steps"

    def step_path(self, run_id: str, key: str) -> str:
        return f"{self.steps_collection(run_id)}/{key}"

    def event_path(self, run_id: str, name: str) -> str:
        return f"{self.run_path(run_id)}/events/{name}"

    def conversation_path(self, conversation_id: str) -> str:
        return f"{self._conversations}/{conversation_id}"

    def transcript_collection(self, conversation_id: str) -> str:
        return f"{self.conversation_path(conversation_id)}/transcript"

    # -- runs ----------------------------------------------------------------------------

    async def create_run(
        self, run: RunRecord, costed: Callable[[RunRecord, int], Cost] | None = None, *,
        continue_agent: bool = False,
    ) -> tuple[RunRecord, bool]:
        """Create ``run`` unless its id exists; return the stored run and whether it is new.

        ``costed(run, writes)``: what creating ``run`` (running or queued) spent, priced as its
        commit of ``writes`` documents is made; written as its ``ingest_cost`` and first
        ``cost``.

        Raises :class:`IdempotencyMismatch` when the id exists with a different request body.
        While another run of the conversation is active the new run is stored ``queued`` and
        appended to the conversation's queue; the commit that ends the active run starts it.

        A run that starts a conversation of its own (the default: the conversation id is the
        run id) is one commit of one document and no read: a conversation has no document
        while its first run is its only run (:meth:`get_conversation`), and that run's end
        leaves it so (:meth:`_end_writes`). Its precondition (the run does not exist) sends a
        redelivered query to the reads below, which find the run.

        A run that continues a conversation reads, in one round trip, the run, the
        conversation's document and the conversation's first run (``runs/{conversation_id}``):
        where the document is missing, that run stands for it (its owner, its usage and cost
        once ended, and whether it is still active), and the follow-up creates the document.
        If the first run is still active, the new run queues behind it, and the same commit
        marks the first run (``conversation_document``), fenced on the version read: the first
        run's end, fenced on its own read of the run, is then refused and reads the document
        it must hand on, or it ended first and the mark is refused, and this reads again. A
        conversation named by a run id whose run does not exist yet (its query has not arrived)
        raises :class:`ConversationNotStarted`: the follow-up is redelivered until the run
        exists, since that run's creation reads nothing and could not see a conversation made
        before it.

        No transaction: the run and the conversation are written in one atomic commit whose
        preconditions (the run does not exist; the conversation is still at the version read,
        or still does not exist) make a concurrent writer fail it, and then the documents are
        read again.
        """
        run_path = self.run_path(run.run_id)
        conv_path = self.conversation_path(run.conversation_id)
        fresh = run
        own = run.conversation_id == run.run_id
        if own and is_run_id(run.run_id):
            run = _costed(run.model_copy(update={"started_at": run.created_at,
                                                 "progress_at": run.created_at,
                                                 "new_conversation": True}), costed, 1)
            try:
                await self.db.commit([Write("create", run_path, run.to_doc())])
                return run, True
            except AlreadyExists:
                pass  # a redelivered query: read what is there
        paths = [run_path, conv_path] if own else [run_path, conv_path,
                                                   self.run_path(run.conversation_id)]
        for _ in range(CREATE_RUN_ATTEMPTS):
            run = fresh
            run_snap, conv_snap, *first = await self.db.get_all(paths)
            found = _conversation_of(run.conversation_id, conv_snap, first[0] if first else None)
            stored = RunRecord.model_validate(run_snap.data) if run_snap is not None else None
            if (existing := _refusal(run, stored, found)) is not None:
                return existing, False
            conv = found or ConversationRecord(conversation_id=run.conversation_id,
                                               owner=run.owner)
            if continue_agent and conv.agent and conv.agent != run.agent:
                # A hand-off gave the conversation to another agent: a run that names none
                # is that agent's.
                run = run.model_copy(update={"agent": conv.agent})
            if conv.active_run_id not in (None, run.run_id):
                # Busy: the run waits, recorded and in order, instead of its query being nacked
                # until the active run ends. That run's final commit starts it.
                run = run.model_copy(update={"status": RunStatus.QUEUED, "progress_at": None})
                conv = conv.model_copy(update={
                    "queue": [*conv.queue, run.run_id],
                    "run_count": conv.run_count + 1,
                    "updated_at": run.created_at,
                })
            else:
                run = run.model_copy(update={"started_at": run.created_at,
                                             "progress_at": run.created_at})
                conv = conv.model_copy(
                    update={
                        "active_run_id": run.run_id,
                        "run_count": conv.run_count + 1,
                        "updated_at": run.created_at,
                    }
                )
            conv_doc = conv.to_doc() | self._conversation_expiry(run.created_at)
            # Where the document is missing, it is created: that fails if another follow-up
            # joined meanwhile, and this reads again. A first run still active learns that its
            # conversation now has a document (it fails if that run ended meanwhile).
            writes = [Write("update", conv_path, conv_doc, if_version=conv_snap.version)
                      if conv_snap else Write("create", conv_path, conv_doc)]
            first_snap = first[0] if first else None
            if (conv_snap is None and first_snap is not None
                    and conv.active_run_id == first_snap.data.get("run_id")):
                writes.append(Write("update", first_snap.path, {"conversation_document": True},
                                    if_version=first_snap.version))
            try:
                run = _costed(run, costed, 1 + len(writes))  # priced before it is written
                await self.db.commit([Write("create", run_path, run.to_doc()), *writes])
                return run, True
            except (AlreadyExists, PreconditionFailed):
                continue  # written concurrently: read again
        raise StorageUnavailable(
            f"run {run.run_id}: conversation {run.conversation_id!r} kept changing", retry_after=1.0
        )

    async def admit(self, run: RunRecord) -> RunRecord | None:
        """Whether :meth:`create_run` would refuse ``run``, read in one round trip and writing
        nothing: it raises as :meth:`create_run` does, or returns the run already created for
        the same request, or None. What a query stores before its run (its files) is stored
        only once this passed; a writer racing it can still make :meth:`create_run` refuse."""
        own = run.conversation_id == run.run_id
        run_snap, conv_snap, *first = await self.db.get_all(
            [self.run_path(run.run_id), self.conversation_path(run.conversation_id)]
            + ([] if own else [self.run_path(run.conversation_id)]))
        first = first or [run_snap]
        stored = RunRecord.model_validate(run_snap.data) if run_snap is not None else None
        return _refusal(run, stored, _conversation_of(run.conversation_id, conv_snap, first[0]))

    async def get_run(self, run_id: str) -> RunRecord | None:
        (snap,) = await self.db.get_all([self.run_path(run_id)])
        return RunRecord.model_validate(snap.data) if snap else None

    async def get_runs(self, run_ids: Sequence[str]) -> list[RunRecord | None]:
        """The runs ``run_ids`` (None for one that does not exist), in one batch read."""
        if not run_ids:
            return []
        snaps = await self.db.get_all([self.run_path(r) for r in run_ids])
        return [RunRecord.model_validate(s.data) if s else None for s in snaps]

    async def read_run(self, run_id: str) -> RunRead | None:
        """The run with the version a commit fenced on this read is made against."""
        (snap,) = await self.db.get_all([self.run_path(run_id)])
        return RunRead.of(snap)

    async def runs_in_status(
        self, status: RunStatus, order_by: str, limit: int = 200
    ) -> list[RunRecord]:
        """Runs in ``status``, oldest ``order_by`` first (the sweeper's query)."""
        snaps = await self.db.list_where(self._runs, "status", status.value, order_by, limit)
        return [RunRecord.model_validate(s.data) for s in snaps]

    async def list_runs(self, conversation_id: str, limit: int = 100) -> list[RunRecord]:
        snaps = await self.db.list_where(
            self._runs, "conversation_id", conversation_id, "created_at", limit
        )
        return [RunRecord.model_validate(s.data) for s in snaps]

    async def recent_runs(
        self, limit: int = 20, *, status: RunStatus | None = None, agent: str | None = None,
        conversation_id: str | None = None, owner: str | None = None,
        before: float | None = None,
    ) -> list[RunRecord]:
        """The newest runs first (``ackloop runs list``, the API's ``GET /runs``), only those
        matching every filter given, created before ``before`` (the next page). Each filter has
        a composite index with ``created_at`` descending (infra/firestore.tf); Firestore merges
        them when several are given."""
        equal = {name: value for name, value in (
            ("status", status.value if status else None), ("agent", agent),
            ("conversation_id", conversation_id), ("owner", owner)) if value is not None}
        snaps = await self.db.list_newest(self._runs, equal, "created_at", limit, before)
        return [RunRecord.model_validate(s.data) for s in snaps]

    async def get_conversation_snapshot(self, conversation_id: str) -> Snapshot | None:
        """The conversation's document as stored (None while its first run is its only run:
        :meth:`get_conversation` says what the conversation is then)."""
        (snap,) = await self.db.get_all([self.conversation_path(conversation_id)])
        return snap

    async def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        """The conversation: its document, or, while it has none, what its first run (the run
        whose id it bears) makes it: that run's owner, that run active until it ends, one run,
        that run's usage and cost. None when there is neither. One round trip."""
        conv, first = await self.db.get_all([self.conversation_path(conversation_id),
                                             self.run_path(conversation_id)])
        return _conversation_of(conversation_id, conv, first)

    @staticmethod
    def _end_plan(run: RunRecord, conv_snapshot: Snapshot | None) -> tuple[str | None, int]:
        """The queued run a run's end starts, and how many documents the end writes."""
        if conv_snapshot is None:
            return None, 1
        conv = ConversationRecord.model_validate(conv_snapshot.data)
        if conv.active_run_id == run.run_id:
            next_run_id = conv.queue[0] if conv.queue else None
            return next_run_id, 2 if next_run_id is None else 3
        return None, 2 if run.run_id in conv.queue else 1

    def _end_writes(
        self, run_snapshot: Snapshot, conv_snapshot: Snapshot | None, end: RunEnd, now: float
    ) -> EndWrites:
        """Writes that end a run, each fenced on the version its caller read.

        The run is fenced on its version, the conversation too: the same commit hands the
        conversation to the first queued run (which becomes ``running``), so a follow-up that
        arrived during the run starts exactly when it ends, and never twice. A run that is its
        conversation's only run (``conv_snapshot`` None: the conversation has no document, or,
        for a run that started it and was not marked ``conversation_document``, the caller did
        not read it) writes only itself: the conversation goes on having no document. A
        follow-up that joined after the caller read the run marked the run, so the run's
        version fence refuses the commit.
        """
        run = RunRecord.model_validate(run_snapshot.data)
        update = {
            "status": end.status.value,
            "stop_reason": end.stop_reason.value,
            "answer": end.answer,
            "output": end.output,
            "error": end.error,
            "finished_at": now,
            "progress_at": now,
            "usage": end.usage.model_dump(mode="json"),
            "steps_total": (own := end.usage.own()).model_calls + own.tool_calls,  # its own
        } | self._expiry(now)
        if end.cost is not None:
            update["cost"] = end.cost.model_dump(mode="json")
        if end.agent is not None:
            update["handed_to"] = end.agent
        writes = [Write("update", run_snapshot.path, update, if_version=run_snapshot.version)]
        if conv_snapshot is None:
            return EndWrites(writes, None)
        conv = ConversationRecord.model_validate(conv_snapshot.data)
        next_run_id: str | None = None
        if conv.active_run_id == run.run_id:
            next_run_id = conv.queue[0] if conv.queue else None
            conv_update: JsonDict = {"active_run_id": next_run_id, "queue": conv.queue[1:],
                                     "updated_at": now}
        elif run.run_id in conv.queue:  # a queued run that ends before it started
            conv_update = {"queue": [r for r in conv.queue if r != run.run_id], "updated_at": now}
        else:
            return EndWrites(writes, None)
        if end.agent is not None:  # a hand-off: the conversation goes on with that agent
            conv_update["agent"] = end.agent
        conv_update |= self._conversation_expiry(now) | {
            "usage": conv.usage.plus(end.usage).model_dump(mode="json"),
            "cost": Cost.total([conv.cost, end.cost]).model_dump(mode="json")}
        writes.append(Write("update", conv_snapshot.path, conv_update,
                            if_version=conv_snapshot.version))
        if next_run_id is not None:
            writes.append(Write("update", self.run_path(next_run_id), {
                "status": RunStatus.RUNNING.value, "started_at": now, "progress_at": now}))
        return EndWrites(writes, next_run_id)

    async def end_run_now(
        self, run_id: str, end: RunEnd, now: float, *, only_active: bool = False
    ) -> tuple[RunRecord, str | None] | None:
        """End a run that no step can end (a dead letter, a conflict, the sweeper, a cancel of
        a queued run). Returns the ended run and the queued run it started, or None if the run
        does not exist or has already ended. ``only_active``: leave a queued run alone.

        A running run's end also writes its conversation's last transcript chunk (its
        ``fence``), or creates an empty first chunk if there is none: a model step of the run
        still in flight appends fenced on that chunk (a model step does not write the run
        document), so it fails instead of adding a turn after the run ended.
        """
        (found,) = await self.db.get_all([self.run_path(run_id)])
        if found is None:
            return None
        status = RunStatus(found.data.get("status", RunStatus.RUNNING))
        if status.terminal:
            return None
        # Where the fence's probe starts: only a running run has a model step to fence out (one
        # that starts running meanwhile is probed from the first chunk).
        first = (await self._newest_chunk(str(found.data.get("conversation_id") or ""))
                 if status is RunStatus.RUNNING else 0)

        async def body(txn: Transaction) -> tuple[RunRecord, str | None] | None:
            snap = await txn.get(self.run_path(run_id))
            if snap is None:
                return None
            run = RunRecord.model_validate(snap.data)
            if run.status.terminal or (only_active and run.status is RunStatus.QUEUED):
                return None
            conv = await txn.get(self.conversation_path(run.conversation_id))
            fence = (await self._transcript_fence(txn, run, first, now)
                     if run.status is RunStatus.RUNNING else None)
            ending = self._end_writes(snap, conv, end, now)
            for write in ending.writes:
                txn.write(replace(write, if_version=None))  # the transaction guards them
            if fence is not None:
                txn.write(fence)
            ended = run.model_copy(update={"status": end.status, "stop_reason": end.stop_reason,
                                           "error": end.error, "finished_at": now,
                                           "usage": end.usage, "cost": end.cost or run.cost})
            return ended, ending.next_run_id

        return await self.db.transact(body)

    async def _newest_chunk(self, conversation_id: str) -> int:
        """The index of the conversation's last transcript chunk (0 if it has none)."""
        if not conversation_id:
            return 0
        newest = await self.db.list_newest(self.transcript_collection(conversation_id), {},
                                           "index", limit=1)
        return int(newest[0].data.get("index", 0)) if newest else 0

    async def _transcript_fence(
        self, txn: Transaction, run: RunRecord, first: int, now: float
    ) -> Write:
        """The write of :meth:`end_run_now` that fails a late append of ``run``: its
        conversation's last chunk from index ``first`` on (read in ``txn``), or a new empty
        chunk where there is none."""
        conversation_id = run.conversation_id
        mark = {"fence": f"{run.run_id}@{now}"}
        index, last = first, None
        while await txn.get(self.chunk_path(conversation_id, index)) is not None:
            last, index = index, index + 1
        if last is not None:
            return Write("update", self.chunk_path(conversation_id, last), mark)
        empty = TranscriptChunk(index=first).to_doc() | mark | self._live_expiry(now)
        return Write("create", self.chunk_path(conversation_id, first), empty)

    async def fail_run(self, run_id: str, error: str, now: float) -> bool:
        """Mark a running run failed (used where no step can commit). True if it changed."""
        end = RunEnd(RunStatus.FAILED, StopReason.FAILED, Usage(), error=error)
        return await self.end_run_now(run_id, end, now) is not None

    async def promote_queued(self, run_id: str, now: float) -> bool:
        """Start a queued run whose conversation is free (its start was lost). True if so."""

        async def body(txn: Transaction) -> bool:
            snap = await txn.get(self.run_path(run_id))
            if snap is None or snap.data.get("status") != RunStatus.QUEUED.value:
                return False
            run = RunRecord.model_validate(snap.data)
            conv_path = self.conversation_path(run.conversation_id)
            conv_snap = await txn.get(conv_path)
            conv = (ConversationRecord.model_validate(conv_snap.data) if conv_snap
                    else ConversationRecord(conversation_id=run.conversation_id,
                                            owner=run.owner))
            if conv.active_run_id is not None:
                active = await txn.get(self.run_path(conv.active_run_id))
                if active is not None and not RunRecord.model_validate(active.data).status.terminal:
                    return False
            if conv.queue and conv.queue[0] != run_id:
                return False  # an older queued run goes first
            txn.write(Write("set", conv_path, conv.model_copy(update={
                "active_run_id": run_id, "queue": conv.queue[1:], "updated_at": now}).to_doc()
                | self._conversation_expiry(now)))
            txn.write(Write("update", snap.path, {"status": RunStatus.RUNNING.value,
                                                  "started_at": now, "progress_at": now}))
            return True

        return await self.db.transact(body)

    async def request_cancel(self, run_id: str) -> RunRecord | None:
        """Ask a run to stop at its next step. For a running run, the same transaction writes
        the transcript's fence (:meth:`end_run_now`): a model step in flight then fails its
        append, reads the run again and ends it cancelled instead of sending its tool calls."""
        read = await self.read_run(run_id)
        if read is None:
            return None
        run = read.record
        if run.status.terminal or run.cancel_requested:
            return run
        first = await self._newest_chunk(run.conversation_id)

        async def body(txn: Transaction) -> RunRecord | None:
            snap = await txn.get(self.run_path(run_id))
            if snap is None:
                return None
            current = RunRecord.model_validate(snap.data)
            if current.status.terminal or current.cancel_requested:
                return current
            fence = (await self._transcript_fence(txn, current, first, time.time())
                     if current.status is RunStatus.RUNNING else None)
            txn.write(Write("update", snap.path, {"cancel_requested": True}))
            if fence is not None:
                txn.write(fence)
            return current.model_copy(update={"cancel_requested": True})

        return await self.db.transact(body)

    # -- steps ---------------------------------------------------------------------------

    async def claim_step(
        self,
        run_id: str,
        key: StepKey,
        name: str,
        *,
        owner: str,
        now: float,
        lease_seconds: float,
        message_id: str = "",
    ) -> Claim:
        """Claim the step at ``key`` for ``owner``; see the module docstring for the rules.

        Raises :class:`StepConflict` if another step is recorded at ``key``, and
        :class:`StepBusy` while another holder's lease is live.
        """
        path = self.step_path(run_id, str(key))
        fresh = _fresh_step(key, name, owner=owner, now=now, message_id=message_id,
                            lease_expires_at=now + lease_seconds)
        try:
            version = await self.db.create(path, fresh.to_doc() | self._live_expiry(now))
            return Claim(run_id, fresh, version, "new")
        except AlreadyExists:
            pass
        (snap,) = await self.db.get_all([path])
        if snap is None:  # deleted between the two calls: only a reset test does that
            raise StepBusy(f"step {key} vanished while being claimed", retry_after=1.0)
        step = StepRecord.model_validate(snap.data)
        if step.kind != key.kind or step.name != name:
            raise StepConflict(
                f"run {run_id} step {key}: delivery is for {key.kind} {name!r} but "
                f"{step.kind} {step.name!r} is recorded there"
            )
        if step.status is StepStatus.COMPLETED:
            return Claim(run_id, step, snap.version, "completed")
        if step.status is StepStatus.WAITING:
            if step.decision is None:
                return Claim(run_id, step, snap.version, "waiting")
            return await self._resume(run_id, step, snap.version, owner=owner, now=now,
                                      lease_seconds=lease_seconds, message_id=message_id)
        wait = max(step.lease_expires_at, step.not_before) - now
        if wait > 0:
            raise StepBusy(f"step {key} is leased by {step.owner}", retry_after=wait, holder=step)
        taken = step.model_copy(
            update={
                "fence": step.fence + 1,
                "attempts": step.attempts + 1,
                "owner": owner,
                "lease_expires_at": now + lease_seconds,
                "message_id": message_id,
                "started_at": now,
            }
        )
        fields = {k: getattr(taken, k) for k in ("fence", "attempts", "owner", "message_id")}
        fields |= {"lease_expires_at": taken.lease_expires_at, "started_at": now}
        fields |= self._live_expiry(now)
        try:
            (version,) = await self.db.commit(
                [Write("update", path, fields, if_version=snap.version)]
            )
        except PreconditionFailed as exc:
            raise StepBusy(f"step {key} was claimed concurrently", retry_after=0.0,
                           holder=step) from exc
        return Claim(run_id, taken, version, "taken_over")

    @staticmethod
    def unclaimed(run_id: str, key: StepKey, name: str, *, owner: str, now: float,
                  message_id: str = "", attempt: int = 1) -> Claim:
        """Run the step at ``key`` without claiming it: nothing is written before its result.
        Its commit then creates the step document, so of two deliveries that ran it at once
        one records it (the other finds it taken: :class:`StepTaken`). For a step whose
        document the caller's read found absent, and whose call is cheap and safe to repeat
        (see :mod:`ackloop.engine.claims`)."""
        step = _fresh_step(key, name, owner=owner, now=now, message_id=message_id,
                           lease_expires_at=0.0).model_copy(update={"attempts": attempt})
        return Claim(run_id, step, None, "unclaimed")

    async def claim_unclaimed(self, claim: Claim, *, now: float, lease_seconds: float,
                              first_delta: DeltaRecord | None = None) -> Claim:
        """Claim a step that has run unclaimed so far (a streamed model call, at its first
        text): create its document as ``claim`` describes it (its attempt, its message id;
        ``unclaimed``, since its call started without a claim), holding a lease of
        ``lease_seconds``, in one commit with ``first_delta`` (the call's first words). Only a
        create: a document already there means another delivery claimed or recorded the step
        meanwhile, and this one has lost it (:class:`LeaseLost`, nothing written)."""
        if claim.version is not None:
            raise ValueError(f"step {claim.key} is already claimed")
        step = claim.step.model_copy(update={"lease_expires_at": now + lease_seconds,
                                             "unclaimed": True})
        writes = [Write("create", self.step_path(claim.run_id, claim.key),
                        step.to_doc() | self._live_expiry(now))]
        if first_delta is not None:
            from ackloop.deltas import delta_expiry, delta_write, deltas_collection

            writes.append(delta_write(deltas_collection(self, claim.run_id), first_delta,
                                      delta_expiry(self, now)))
        try:
            version, *_ = await self.db.commit(writes)
        except AlreadyExists as exc:
            raise LeaseLost(f"step {claim.key} of {claim.run_id} was claimed or recorded by "
                            "another delivery") from exc
        return Claim(claim.run_id, step, version, "new")

    async def _resume(self, run_id: str, step: StepRecord, version: Version, *, owner: str,
                      now: float, lease_seconds: float, message_id: str) -> Claim:
        """Claim a decided waiting step to carry its decision out. Not an attempt: the step
        never ran, so its attempts stay as they are."""
        resumed = step.model_copy(update={
            "status": StepStatus.RUNNING, "fence": step.fence + 1, "owner": owner,
            "lease_expires_at": now + lease_seconds, "message_id": message_id,
            "started_at": now})
        fields = {"status": StepStatus.RUNNING.value, "fence": resumed.fence, "owner": owner,
                  "lease_expires_at": resumed.lease_expires_at, "message_id": message_id,
                  "started_at": now} | self._live_expiry(now)
        try:
            (new_version,) = await self.db.commit(
                [Write("update", self.step_path(run_id, step.key), fields, if_version=version)])
        except PreconditionFailed as exc:
            raise StepBusy(f"step {step.key} was claimed concurrently", retry_after=0.0,
                           holder=step) from exc
        return Claim(run_id, resumed, new_version, "new")

    async def wait_step(self, claim: Claim, waiting: Waiting, read: RunRead,
                        sweep_at: float, cost: Cost | None = None) -> None:
        """Record the step as waiting (lease given back) in one batch with the run's
        ``progress_at`` moved to ``sweep_at`` (when the sweeper should find the run idle: at
        the deadline) unless another call of the turn set an earlier one: the sweeper then
        leaves the run alone until a decision or the deadline.

        Raises :class:`LeaseLost` or :class:`StaleRead` (nothing written)."""
        record, run = read.record, read.snapshot
        turn = claim.step.turn
        if record.wait_turn == turn and record.progress_at is not None:
            # Another call of the turn waits (or was decided): the sweeper looks at the
            # earliest time any of them asked for, which may already have come (a deadline
            # nearer than sweep_stale_seconds); it then reschedules to the earliest deadline.
            sweep_at = min(sweep_at, record.progress_at)
        step_write = Write("update", self.step_path(claim.run_id, claim.key), {
            "status": StepStatus.WAITING.value, "waiting": waiting.to_doc(),
            "lease_expires_at": 0.0,
            "wait_cost": cost.model_dump(mode="json") if cost is not None else None,
            } | self._live_expiry(waiting.deadline),
            if_version=claim.version)
        run_write = Write("update", run.path, {"progress_at": sweep_at, "wait_turn": turn},
                          if_version=run.version)
        try:
            await self.db.commit([step_write, run_write])
        except (PreconditionFailed, AlreadyExists) as exc:
            await self._raise_conflict(claim, exc)

    async def decide_step(self, run_id: str, key: str, decision: StepDecision,
                          kind: Literal["approval", "event"] | None = None
                          ) -> tuple[StepRecord, bool]:
        """Record ``decision`` on a waiting step (one waiting for ``kind``, when given), with
        the run's clock (its ``progress_at`` and the time it waited), in one commit
        conditional on both as read (read again if either changed: see
        :meth:`receive_event`).
        Returns the step and whether this call decided it; the same decision again returns
        the recorded one.

        A decision made after the step's deadline is not recorded: the step is rejected as at
        its deadline (``by`` ``deadline``), which is what the returned step carries.

        Raises :class:`DecisionRefused` for a step that is missing, not waiting (for
        ``kind``), or decided otherwise."""

        def body(snaps: list[Snapshot | None]
                 ) -> tuple[list[Write], tuple[StepRecord, bool]]:
            run_snap, snap = snaps
            if run_snap is None or snap is None:
                raise DecisionRefused(404, "not_found", f"run {run_id} has no step {key}")
            step = StepRecord.model_validate(snap.data)
            run = RunRecord.model_validate(run_snap.data)
            if step.decision is not None:
                if _same_decision(step.decision, decision):
                    return [], (step, False)
                raise DecisionRefused(409, "already_decided", (
                    f"step {key} was already decided: {step.decision.decision} by "
                    f"{step.decision.by}"))
            if step.status is not StepStatus.WAITING or step.waiting is None:
                raise DecisionRefused(409, "not_waiting",
                                      f"step {key} is {step.status}: it waits for no decision")
            if kind is not None and step.waiting.kind != kind:
                what = (f"the event {step.waiting.event!r} (POST /runs/{run_id}/events/"
                        f"{step.waiting.event})" if step.waiting.event else "an approval")
                raise DecisionRefused(409, "not_waiting", f"step {key} waits for {what}")
            if run.status.terminal:
                raise DecisionRefused(409, "run_ended", f"run {run_id} is {run.status}")
            made = decision
            if made.by != DEADLINE and made.at > step.waiting.deadline:
                # Too late: the step is rejected as at its deadline, as the sweeper would have
                # (the caller sees that decision instead of theirs).
                made = StepDecision(decision="reject", by=DEADLINE, at=step.waiting.deadline)
            waited = made.at - max(step.waiting.since, run.wait_ended_at)
            # A child's wait is the run's own time (its clock runs): not counted as waited.
            ended_at = run.wait_ended_at if step.waiting.clock_runs else made.at
            waited = 0.0 if step.waiting.clock_runs else waited
            # A late decision is made as at its deadline, which may be before an overlapping
            # wait's decision already counted: the time counted so far never moves back.
            return [Write("update", snap.path, {"decision": made.to_doc()},
                          if_version=snap.version),
                    Write("update", run_snap.path, {
                        "progress_at": made.at, "wait_ended_at": max(run.wait_ended_at, ended_at),
                        "waited_seconds": run.waited_seconds + max(0.0, waited)},
                        if_version=run_snap.version)], (step.model_copy(
                            update={"decision": made}), True)

        return await self._read_then_commit(
            [self.run_path(run_id), self.step_path(run_id, key)], body,
            f"run {run_id} step {key}: decision")

    async def receive_event(self, run_id: str, name: str, event: ReceivedEvent,
                            owner: str | None = None) -> tuple[ReceivedEvent, bool, RunRecord]:
        """Keep ``event`` on the run under ``name``, in one commit that rewrites the run
        document (which makes a concurrent waiting commit fail and read it again: see
        :func:`ackloop.engine.approval.wait_for_decision`). Returns the event kept, whether
        this call kept it (the same event again, same payload and id, returns the kept one),
        and the run as read.

        Optimistic, not a transaction: the commit is conditional on the run document as read,
        and a commit refused because the run changed reads again. Two senders at once (the
        ends of a run's parallel child runs, or a child's end beside a call recording its
        wait) each read and write the run: in transactions, whose reads lock, each would wait
        for the other's lock until one times out.

        ``owner``: the sender acts as this caller, and a run of another owner is missing for
        them (None: the sender may reach every run, as the CLI with the database's rights).

        Raises :class:`DecisionRefused` for a missing (or another owner's) or ended run, a name
        already received with another payload or id, or a run that has received too many
        names."""

        digest = payload_digest(event.payload)

        def body(snaps: list[Snapshot | None]) -> tuple[list[Write],
                                                        tuple[ReceivedEvent, bool, RunRecord]]:
            (snap,) = snaps
            if snap is None:
                raise DecisionRefused(404, "not_found", f"run {run_id} not found")
            run = RunRecord.model_validate(snap.data)
            if owner is not None and run.owner != owner:
                raise DecisionRefused(404, "not_found", f"run {run_id} not found")
            kept = run.received.get(name)
            if kept is not None:
                same = (kept.digest == digest if kept.digest is not None
                        else kept.payload == event.payload)
                if same and kept.id == event.id:
                    return [], (kept.model_copy(update={"payload": event.payload,
                                                        "digest": None}), False, run)
                raise DecisionRefused(409, "already_received", (
                    f"run {run_id} already received an event {name!r} (from {kept.by}) with "
                    "another payload or id: each name is received once per run"))
            if run.status.terminal:
                raise DecisionRefused(409, "run_ended", f"run {run_id} is {run.status}")
            if len(run.received) >= MAX_RECEIVED_EVENTS:
                raise DecisionRefused(409, "too_many_events", (
                    f"run {run_id} has received {len(run.received)} events, the most a run "
                    "keeps"))
            # The payload goes to a document of its own; the run keeps who sent what, when.
            mark = event.model_copy(update={"payload": {}, "digest": digest})
            return [Write("update", snap.path, {"progress_at": event.at},
                          into={"received": {name: mark.to_doc()}}, if_version=snap.version),
                    Write("set", self.event_path(run_id, name),
                          event.to_doc() | self._live_expiry(event.at))], (event, True, run)

        return await self._read_then_commit([self.run_path(run_id)], body,
                                            f"run {run_id}: event {name!r}")

    async def _read_then_commit(
        self, paths: list[str],
        body: Callable[[list[Snapshot | None]], tuple[list[Write], T]], what: str,
    ) -> T:
        """Read ``paths`` (one batch read), let ``body`` decide the writes (each update
        conditional on the version it read) and the result, and commit them; read again and
        decide again when the commit is refused because a document changed meanwhile.

        The optimistic form of a read-modify-write transaction, for documents that several
        senders write at once: a refused commit costs a read, never a lock wait. Raises
        :class:`StorageUnavailable` (retried by redelivery) if they kept changing."""
        for _ in range(OPTIMISTIC_ATTEMPTS):
            writes, result = body(await self.db.get_all(paths))
            if not writes:
                return result
            try:
                await self.db.commit(writes)
                return result
            except PreconditionFailed:
                continue  # written concurrently: read again
        raise StorageUnavailable(f"{what}: the documents kept changing", retry_after=1.0)

    async def event_payload(self, run_id: str, name: str, event: ReceivedEvent) -> ReceivedEvent:
        """``event`` as the run keeps it under ``name``, with its payload (read from its own
        document where the run keeps only its digest)."""
        if event.digest is None:
            return event
        (snap,) = await self.db.get_all([self.event_path(run_id, name)])
        if snap is None:  # expired with its run's retention: nothing left to resume with
            raise DecisionRefused(409, "event_gone", f"run {run_id}: event {name!r} is gone")
        return ReceivedEvent.model_validate(snap.data)

    async def start_clock_again(self, run_id: str, now: float, *,
                                if_progress_at: float | None) -> bool:
        """Start a run's ``max_seconds`` over at ``now`` (its first step was never sent: the
        time until then was not the run's), if its ``progress_at`` is still as read. True if
        written."""

        async def body(txn: Transaction) -> bool:
            snap = await txn.get(self.run_path(run_id))
            if (snap is None or snap.data.get("progress_at") != if_progress_at
                    or snap.data.get("status") != RunStatus.RUNNING.value):
                return False
            txn.write(Write("update", snap.path, {"started_at": now, "progress_at": now}))
            return True

        return await self.db.transact(body)

    async def sweep_run_at(self, run_id: str, at: float, *, if_progress_at: float | None
                           ) -> bool:
        """Set when the sweeper looks at the run next (a waiting run: its earliest deadline),
        only if the run's ``progress_at`` is still ``if_progress_at``, as the sweeper read it:
        a decision or an event that moved it meanwhile (R2) keeps its time, so the sweeper
        finds the run again soon and re-sends what that decision needs. True if written."""

        async def body(txn: Transaction) -> bool:
            snap = await txn.get(self.run_path(run_id))
            if snap is None or snap.data.get("progress_at") != if_progress_at:
                return False
            txn.write(Write("update", snap.path, {"progress_at": at}))
            return True

        return await self.db.transact(body)

    async def run_and_steps(
        self, run_id: str, keys: Sequence[str]
    ) -> tuple[RunRead | None, list[StepRecord | None]]:
        """The run and some of its steps, in one read."""
        run, *steps = await self.db.get_all(
            [self.run_path(run_id), *(self.step_path(run_id, k) for k in keys)])
        return RunRead.of(run), [StepRecord.model_validate(s.data) if s else None for s in steps]

    async def completed_step(self, run_id: str, key: StepKey) -> Claim | None:
        """The step at ``key`` if it has completed (to send its outbox again), without claiming
        anything: what a delivery for a run that takes no new step may still do."""
        (snap,) = await self.db.get_all([self.step_path(run_id, str(key))])
        if snap is None:
            return None
        step = StepRecord.model_validate(snap.data)
        if step.status is not StepStatus.COMPLETED:
            return None
        return Claim(run_id, step, snap.version, "completed")

    async def renew_lease(self, claim: Claim, *, now: float, lease_seconds: float) -> Claim:
        """Extend the lease (the heartbeat). Raises :class:`LeaseLost` if it was taken over.
        An unclaimed step has no lease: nothing is written."""
        if claim.version is None:
            return claim
        until = now + lease_seconds
        try:
            (version,) = await self.db.commit(
                [
                    Write(
                        "update",
                        self.step_path(claim.run_id, claim.key),
                        {"lease_expires_at": until},
                        if_version=claim.version,
                    )
                ]
            )
        except PreconditionFailed as exc:
            raise LeaseLost(f"lease on {claim.key} was taken over") from exc
        return replace(claim, version=version, step=claim.step.model_copy(
            update={"lease_expires_at": until}))

    async def next_attempt(self, claim: Claim, *, now: float, lease_seconds: float,
                           error: str) -> Claim:
        """Start the step's next attempt inside the delivery that holds it: ``attempts`` goes
        up by one (what a client watching its text reads as "drop the last attempt's") and
        ``started_at`` is now, the lease is renewed and ``error`` is recorded as why. Fenced on
        the holder's version like every write of a claim. Raises :class:`LeaseLost` if the step
        was taken over."""
        fields: JsonDict = {"attempts": claim.step.attempts + 1, "started_at": now,
                            "lease_expires_at": now + lease_seconds,
                            "last_error": mask_secrets(error)}
        if claim.version is None:  # only a streamed call retries in its request: it claims
            raise ValueError(f"step {claim.key} is unclaimed: it has no attempt to move on")
        try:
            (version,) = await self.db.commit([Write(
                "update", self.step_path(claim.run_id, claim.key), fields,
                if_version=claim.version)])
        except PreconditionFailed as exc:
            raise LeaseLost(f"lease on {claim.key} was taken over") from exc
        return replace(claim, version=version, step=claim.step.model_copy(update=fields))

    async def release_step(
        self, claim: Claim, *, error: str, not_before: float = 0.0
    ) -> None:
        """Give the lease back after a retryable failure so the redelivery need not wait.

        An unclaimed step's failure creates its document, released (attempt 1, the error):
        the redelivery then claims it as its next attempt, so attempts are counted."""
        if claim.version is None:
            released = claim.step.model_copy(update={
                "last_error": mask_secrets(error), "not_before": not_before})
            with contextlib.suppress(AlreadyExists):  # another delivery has it: that one's
                await self.db.create(self.step_path(claim.run_id, claim.key),
                                     released.to_doc() | self._live_expiry(claim.step.started_at))
            return
        # Already taken over (PreconditionFailed): the new holder owns the step now.
        with contextlib.suppress(PreconditionFailed):
            await self.db.commit(
                [
                    Write(
                        "update",
                        self.step_path(claim.run_id, claim.key),
                        {"lease_expires_at": 0.0, "last_error": mask_secrets(error),
                         "not_before": not_before},
                        if_version=claim.version,
                    )
                ]
            )

    async def commit_step(
        self, claim: Claim, basis: Basis, decision: Decision, *, now: float, price: Pricer,
        rolls_up: Sequence[Cost | None] = (), carried: Cost | None = None,
    ) -> Committed:
        """Record ``decision`` of the step ``claim`` holds, made from ``basis``, in one atomic
        commit with every precondition (:mod:`ackloop.store.commit`); returns what to send.

        ``price`` prices the delivery, knowing how many documents the commit writes. A model
        step carries the run's cost: ``carried`` (the previous model step's ``run_cost``, else
        the run's own) plus ``rolls_up`` (the previous turn's tool steps' costs) plus this
        delivery, recorded as its ``run_cost``; the run document is written only by the model
        step that ends the run, which records that total there.

        A run's end reads its conversation first (to hand it to the next queued run), except
        for a run that started its own conversation (``new_conversation``) whose conversation
        has no document (``conversation_document`` unset): that one writes nothing but itself.
        A follow-up that joined after ``basis`` was read marked the run (:meth:`create_run`),
        so the run's version fence refuses the commit: :class:`StaleRead`, and the caller reads
        the run again and commits the same decision (no model call is made again), now reading
        the conversation.

        Raises :class:`LeaseLost` (nothing written) if the lease was taken over, and
        :class:`StaleRead` (nothing written) if the step is still ours but another document the
        commit is fenced on changed since it was read.
        """
        run = basis.run.record
        conv: Snapshot | None = None
        next_trace: str | None = None
        if decision.end is not None and not (run.new_conversation
                                             and not run.conversation_document):
            conv = await self.get_conversation_snapshot(run.conversation_id)
            next_run_id, _ = self._end_plan(run, conv)
            if next_run_id is not None:  # the queued run it starts: its first step's trace
                queued = await self.get_run(next_run_id)
                next_trace = queued.trace_id if queued is not None else None
        writes, committed = self._step_commit(claim, basis, decision, conv, now=now,
                                              price=price, rolls_up=rolls_up, carried=carried,
                                              next_trace=next_trace)
        try:
            await self.db.commit(writes)
        except (PreconditionFailed, AlreadyExists) as exc:
            await self._raise_conflict(claim, exc)
        if basis.transcript is not None and any(
                w.data.get("history_refreshed_at") == now for w in writes):
            await self._refresh_history(basis.transcript, now)
        return committed

    def _step_commit(
        self, claim: Claim, basis: Basis, decision: Decision, conv: Snapshot | None, *,
        now: float, price: Pricer, rolls_up: Sequence[Cost | None], carried: Cost | None,
        next_trace: str | None = None,
    ) -> tuple[list[Write], Committed]:
        """The writes of :meth:`commit_step` (the step's first), made from ``basis`` and, for a
        run's end, the conversation as read (``conv``; None: it has no document, or, for a run
        that started it, it was not read), and what the commit records."""
        run = basis.run.record
        outbox = list(decision.outbox)
        result = decision.result
        writes: list[Write] = []
        if basis.transcript is not None and decision.contents:
            writes = self._append_writes(basis.transcript, decision.contents,
                                         f"{run.run_id}/{claim.key}", now)
            if decision.end is None and result is not None:
                result = result | {"transcript": _pointer(basis.transcript, writes)}
        if decision.deltas:  # a streamed call's last text, with its step
            from ackloop.deltas import delta_expiry, delta_write, deltas_collection

            writes += [delta_write(deltas_collection(self, run.run_id), d, delta_expiry(self, now))
                       for d in decision.deltas]
        end = decision.end
        run_writes = 0
        model = claim.step.kind == "model"
        if end is not None:
            next_run_id, run_writes = self._end_plan(run, conv)
            outbox += outgoing.ends(run, end)
            if next_run_id is not None:
                outbox.append(outgoing.first_step(next_run_id, other_run=True,
                                                  trace_id=next_trace))
        cost = price(1 + len(writes) + run_writes, outbox)
        if claim.step.wait_cost is not None:  # the delivery that recorded its wait
            cost = cost.plus(claim.step.wait_cost)
        if decision.compaction_cost is not None:  # the summary its model step made first
            cost = cost.plus(decision.compaction_cost)
        if decision.child_cost is not None:  # a sub-agent's call: its child run's cost
            cost = cost.plus(decision.child_cost.as_child())
        total = Cost.total([carried if carried is not None else run.cost, *rolls_up, cost])
        if end is not None:
            end = replace(end, cost=total)
            writes += self._end_writes(basis.run.snapshot, conv, end, now).writes
        # A model step that does not end the run leaves the run document alone: its append to
        # the transcript is fenced on the chunk it read, which a run's end outside a step also
        # writes (:meth:`end_run_now`), so it cannot append after its run ended.
        if "transcript" in (result or {}):
            # A model step of this run that follows at once (feedback on an unacceptable final
            # answer) reads the transcript this commit leaves: say where, so it reads it with
            # its other inputs in one round trip.
            hint = outgoing.reads(0, (result or {})["transcript"])
            outbox = [o.model_copy(update={"reads": hint})
                      if o.topic == "model_steps" and o.target_run is None and o.reads is None
                      else o for o in outbox]
        outbox = outgoing.stamped(outbox)
        update: JsonDict = {
            "status": StepStatus.COMPLETED.value,
            "completed_at": now,
            "result": result,
            "outbox": [o.to_doc() for o in outbox],
            "lease_expires_at": 0.0,
            "last_error": None if decision.error is None else mask_secrets(decision.error),
            "cost": cost.model_dump(mode="json"),
        }
        if model:
            update["run_cost"] = total.model_dump(mode="json")
        usage = decision.step_usage
        if decision.child_usage is not None:  # a sub-agent's call: its child run's usage
            usage = (usage or Usage()).with_child(decision.child_usage)
        if usage is not None:
            update["usage"] = usage.model_dump(mode="json")
        if decision.call_seconds is not None:
            update["call_seconds"] = decision.call_seconds
        path = self.step_path(claim.run_id, claim.key)
        step_write = (Write("update", path, update, if_version=claim.version)
                      if claim.version is not None else
                      Write("create", path, claim.step.to_doc() | update | {"unclaimed": True}
                            | self._live_expiry(now)))
        return [step_write, *writes], Committed(outbox, end, cost)

    async def read_basis_again(self, basis: Basis) -> Basis | None:
        """The run (and the transcript, if ``basis`` has one) read again after a commit found
        them changed; None if the run is gone."""
        run = await self.read_run(basis.run.run_id)
        if run is None:
            return None
        if basis.transcript is None:
            return Basis(run)
        return Basis(run, await self.load_transcript_view(basis.transcript.conversation_id))

    async def _raise_conflict(self, claim: Claim, exc: Exception) -> NoReturn:
        """Tell a lost lease from a stale read after a commit was refused."""
        (snap,) = await self.db.get_all([self.step_path(claim.run_id, claim.key)])
        if claim.version is None and snap is not None:
            raise StepTaken(StepRecord.model_validate(snap.data)) from exc
        if claim.version is not None and (snap is None or snap.version != claim.version):
            raise LeaseLost(f"step {claim.key} of {claim.run_id} lost its lease") from exc
        raise StaleRead(f"step {claim.key} of {claim.run_id}: {exc}") from exc

    async def get_steps(self, run_id: str, keys: Sequence[str]) -> list[StepRecord | None]:
        snaps = await self.db.get_all([self.step_path(run_id, k) for k in keys])
        return [StepRecord.model_validate(s.data) if s else None for s in snaps]

    async def steps_exist(self, steps: Sequence[tuple[str, str]]) -> list[bool]:
        """Whether each ``(run_id, step_key)`` has been claimed, in one round trip."""
        if not steps:
            return []
        snaps = await self.db.get_all([self.step_path(run, key) for run, key in steps])
        return [s is not None for s in snaps]

    async def steps_in_range(
        self, run_id: str, start: str, end: str, limit: int | None = None
    ) -> list[StepRecord]:
        snaps = await self.db.list_range(self.steps_collection(run_id), start, end, limit)
        return [StepRecord.model_validate(s.data) for s in snaps]

    async def steps_in_range_versioned(
        self, run_id: str, start: str, end: str
    ) -> list[tuple[StepRecord, Version]]:
        """:meth:`steps_in_range`, each step with its document's version: the time of its last
        commit on Firestore, a counter in memory, so versions order the commits (the join uses
        it to pick one sibling: :func:`ackloop.engine.tool_step.join`)."""
        snaps = await self.db.list_range(self.steps_collection(run_id), start, end)
        return [(StepRecord.model_validate(s.data), s.version) for s in snaps]

    async def list_steps(self, run_id: str) -> list[StepRecord]:
        snaps = await self.db.list_all(self.steps_collection(run_id))
        return [StepRecord.model_validate(s.data) for s in snaps]

    # -- transcript ------------------------------------------------------------------------

    def chunk_path(self, conversation_id: str, index: int) -> str:
        return f"{self.transcript_collection(conversation_id)}/{index:05d}"

    async def load_transcript(self, conversation_id: str) -> Transcript:
        snaps = await self.db.list_all(self.transcript_collection(conversation_id))
        chunks = [TranscriptChunk.model_validate(s.data) for s in snaps]
        return Transcript(conversation_id, chunks, snaps[-1].version if snaps else None,
                          tuple(s.data.get(EXPIRE_AT) for s in snaps))

    async def load_transcript_view(self, conversation_id: str) -> Transcript:
        """The transcript as a model step reads it without a pointer (a follow-up run's first
        step, a step read again): from the last compaction's chunk on, the newest chunks first,
        :data:`VIEW_PAGE` at a time until one is a compaction's (or there are no more). So what
        it reads stops growing once the conversation has been compacted; the whole history is
        :meth:`load_transcript`'s."""
        collection = self.transcript_collection(conversation_id)
        found: list[Snapshot] = []
        below: int | None = None
        while True:
            page = await self.db.list_newest(collection, {}, "index", limit=VIEW_PAGE,
                                             below=below)
            found += page
            if len(page) < VIEW_PAGE or any(p.data.get("summary") is not None for p in page):
                break
            below = int(page[-1].data["index"])
        snaps = sorted(found, key=lambda snap: int(snap.data["index"]))
        start = next((i for i in range(len(snaps) - 1, -1, -1)
                      if snaps[i].data.get("summary") is not None), 0)
        snaps = snaps[start:]
        chunks = [TranscriptChunk.model_validate(snap.data) for snap in snaps]
        return Transcript(conversation_id, chunks, snaps[-1].version if snaps else None,
                          tuple(snap.data.get(EXPIRE_AT) for snap in snaps))

    async def run_and_transcript(
        self, run_id: str, pointer: JsonDict
    ) -> tuple[RunRead | None, Transcript | None]:
        """The run and the transcript chunks a step's pointer names, in one read.

        The transcript is None when a chunk is missing (the caller then lists them).
        Something appended since the pointer was recorded shows in the last chunk's tail,
        which the caller checks before it calls the model; a chunk started after them makes the
        step's own append fail, and the step reads again.
        """
        conversation_id = str(pointer["conversation_id"])
        paths = [self.chunk_path(conversation_id, i) for i in pointer_range(pointer)]
        run, *chunks = await self.db.get_all([self.run_path(run_id), *paths])
        if any(c is None for c in chunks):
            return RunRead.of(run), None
        present = [c for c in chunks if c is not None]
        loaded = [TranscriptChunk.model_validate(c.data) for c in present]
        return RunRead.of(run), Transcript(conversation_id, loaded,
                                           present[-1].version if present else None,
                                           tuple(c.data.get(EXPIRE_AT) for c in present))

    async def model_step_inputs(
        self, run_id: str, turn: int, calls: int, pointer: JsonDict
    ) -> ModelStepInputs | None:
        """Everything a model step of ``turn`` > 0 reads, in one round trip, as its message's
        ``reads`` hint names it: the run, the previous turn's model step and its ``calls`` tool
        steps, the step's own document, and the transcript chunks ``pointer`` names. None when
        what was read does not bear the hint out (the previous model step is missing, or made
        another number of calls, or recorded another pointer): the caller then reads the way it
        would without one."""
        keys = [str(StepKey.model(turn - 1)), *(str(StepKey.tool(turn - 1, i))
                                                for i in range(calls)), str(StepKey.model(turn))]
        conversation_id = str(pointer["conversation_id"])
        chunk_paths = [self.chunk_path(conversation_id, i) for i in pointer_range(pointer)]
        run, *snaps = await self.db.get_all(
            [self.run_path(run_id), *(self.step_path(run_id, k) for k in keys), *chunk_paths])
        steps = [StepRecord.model_validate(s.data) if s else None for s in snaps[:len(keys)]]
        chunks = snaps[len(keys):]
        model_step, own = steps[0], steps[-1]
        result = (model_step.result or {}) if model_step is not None else {}
        if (model_step is None or result.get("transcript") != pointer
                or len(result.get("calls") or []) != calls):
            return None
        transcript: Transcript | None = None
        if all(c is not None for c in chunks):
            present = [c for c in chunks if c is not None]
            transcript = Transcript(
                conversation_id, [TranscriptChunk.model_validate(c.data) for c in present],
                present[-1].version if present else None,
                tuple(c.data.get(EXPIRE_AT) for c in present))
        previous = [s for s in steps[:-1] if s is not None]
        return ModelStepInputs(RunRead.of(run), previous, own, transcript)

    def _append_writes(
        self, transcript: Transcript, contents: Sequence[JsonDict], tail: str,
        now: float | None = None,
    ) -> list[Write]:
        """Writes that append ``contents`` to ``transcript`` (as loaded) and move its tail.

        The turn is added to the last chunk as one entry of its ``turns`` map while the chunk
        stays under :data:`CHUNK_BYTES`, else it starts the next chunk: either way the write
        carries only this turn, so what a step writes does not grow with the conversation,
        and the history stays in few documents, so what a step reads grows only with the
        history's bytes. The update of the last chunk is fenced on the version read and a new
        chunk is a ``create``: a writer that read an older transcript (a step of a run that has
        ended meanwhile) cannot erase what another run appended.

        With a retention, the chunk written expires :meth:`Retention.live` from ``now`` (the
        wall clock if not given), and the chunks it does not write are moved to the same
        horizon when theirs is a day or more behind: a conversation in use loses no history.
        """
        now = time.time() if now is None else now
        return self._history_due(transcript, now, self._append_only(transcript, contents,
                                                                    tail, now))

    def _append_only(self, transcript: Transcript, contents: Sequence[JsonDict], tail: str,
                     now: float) -> list[Write]:
        added = _size(list(contents))
        conversation_id = transcript.conversation_id
        last = transcript.chunks[-1] if transcript.chunks else None
        expiry = self._live_expiry(now)
        if last is not None and last.size + added <= CHUNK_BYTES:
            key = f"t{len(last.turns):06d}"
            return [*self._refresh_writes(transcript, expiry, below=last.index),
                    Write("update", self.chunk_path(conversation_id, last.index),
                          {"tail": tail, "size": last.size + added} | expiry,
                          if_version=transcript.last_version,
                          into={"turns": {key: list(contents)}})]
        index = last.index + 1 if last is not None else 0
        chunk = TranscriptChunk(index=index, turns={f"t{0:06d}": list(contents)}, tail=tail,
                                size=added)
        if last is None:
            return [Write("create", self.chunk_path(conversation_id, index),
                          chunk.to_doc() | expiry)]
        # Starting a chunk is fenced on the last one too (written unchanged, but for its expiry
        # when that is due), so a run's end that wrote the last chunk fails this append too.
        last_path = self.chunk_path(conversation_id, last.index)
        refresh = self._refresh_writes(transcript, expiry, below=index)
        due = next((w.data for w in refresh if w.path == last_path), {})
        return [*(w for w in refresh if w.path != last_path),
                Write("update", last_path, {"size": last.size} | due,
                      if_version=transcript.last_version),
                Write("create", self.chunk_path(conversation_id, index), chunk.to_doc() | expiry)]

    def _history_due(self, transcript: Transcript, now: float, writes: list[Write]
                     ) -> list[Write]:
        """``writes`` (an append), marking the compaction's chunk the transcript is read from
        when the chunks before it are due for the retention horizon again (a day or more since
        they last got it): :meth:`commit_step` gives it to them once the append commits."""
        if not self.retention or not transcript.chunks:
            return writes
        first = transcript.chunks[transcript.start]
        refreshed = first.history_refreshed_at
        if first.summary is None or first.index == 0 or (
                refreshed is not None and now - refreshed < DAY_SECONDS):
            return writes
        path = self.chunk_path(transcript.conversation_id, first.index)
        mark = {"history_refreshed_at": now}
        if any(w.path == path for w in writes):
            return [replace(w, data=w.data | mark) if w.path == path else w for w in writes]
        return [*writes, Write("update", path, mark)]

    async def _refresh_history(self, transcript: Transcript, now: float) -> None:
        """Give the chunks before the transcript's last compaction (no model step reads them
        again, so no append refreshes them) the retention horizon: after the commit, one batch,
        else one by one, a chunk already gone (expired) left out. Best effort: at most once a
        day per conversation, and a failure here only leaves that for the next day."""
        expiry = self._live_expiry(now)
        first = transcript.chunks[transcript.start].index if transcript.chunks else 0
        paths = [self.chunk_path(transcript.conversation_id, i) for i in range(first)]
        if not expiry or not paths:
            return
        try:
            for at in range(0, len(paths), 400):
                await self.db.commit([Write("update", p, dict(expiry))
                                      for p in paths[at:at + 400]])
            return
        except PreconditionFailed:
            pass  # one of them is gone: the others one by one
        except StorageUnavailable as exc:  # the step is recorded; this can wait a day
            log.warning("refreshing the retention of %s's older chunks: %s",
                        transcript.conversation_id, exc)
            return
        for path in paths:
            with contextlib.suppress(PreconditionFailed):
                await self.db.commit([Write("update", path, dict(expiry))])

    async def past_compactions(self, transcript: Transcript) -> Transcript:
        """``transcript``, or, where its last chunk says a compaction's chunk was created
        after it (``compacted_into``: a delivery of a step committed it and died), the
        transcript from that chunk on (one read a compaction followed)."""
        while transcript.chunks and transcript.chunks[-1].compacted_into is not None:
            index = transcript.chunks[-1].compacted_into
            found = await self.read_chunk(transcript.conversation_id, index)
            if found is None:
                raise StaleRead(f"chunk {index} of {transcript.conversation_id} is missing")
            chunk, version = found
            transcript = Transcript(transcript.conversation_id, [chunk], version)
        return transcript

    async def read_chunk(self, conversation_id: str, index: int
                         ) -> tuple[TranscriptChunk, Version | None] | None:
        """One transcript chunk and its version (None: it does not exist)."""
        (snap,) = await self.db.get_all([self.chunk_path(conversation_id, index)])
        if snap is None:
            return None
        return TranscriptChunk.model_validate(snap.data), snap.version

    async def commit_compaction(self, transcript: Transcript, summary: str,
                                kept: Sequence[JsonDict], record: JsonDict, now: float
                                ) -> Transcript | None:
        """Record a compaction of ``transcript`` (as a model step read it): the next chunk,
        holding ``summary``, a copy of the ``kept`` turns and ``record`` (who made it, what it
        used and cost), created in one commit with the last chunk written unchanged, fenced
        on the version read (a run's end outside a step, or another writer, makes it fail).
        Returns the transcript as a model step now reads it: that chunk alone.

        None when the chunk was created meanwhile (the caller reads it: the same step's other
        delivery made it, or the transcript moved on); :class:`StaleRead` when the last chunk
        changed.
        """
        if not transcript.chunks:
            raise ValueError("nothing to compact: the transcript is empty")
        conversation_id = transcript.conversation_id
        last = transcript.chunks[-1]
        index = last.index + 1
        chunk = TranscriptChunk(
            index=index, summary=summary, kept=list(kept), compaction=record,
            tail=last.tail, size=_size([summary_content(summary), *kept]),
            history_refreshed_at=now if self.retention else None)
        expiry = self._live_expiry(now)
        last_path = self.chunk_path(conversation_id, last.index)
        refresh = self._refresh_writes(transcript, expiry, below=index)
        due = next((w.data for w in refresh if w.path == last_path), {})
        try:
            versions = await self.db.commit([
                *(w for w in refresh if w.path != last_path),
                Write("update", last_path, {"size": last.size, "compacted_into": index} | due,
                      if_version=transcript.last_version),
                Write("create", self.chunk_path(conversation_id, index),
                      chunk.to_doc() | expiry)])
        except AlreadyExists:
            return None
        except PreconditionFailed as exc:
            raise StaleRead(f"chunk {last.index} of {conversation_id} changed") from exc
        if transcript.start or transcript.chunks[0].index:  # chunks it did not read
            await self._refresh_history(transcript, now)
        return Transcript(conversation_id, [chunk], versions[-1],
                          (expiry.get(EXPIRE_AT),))

    def _refresh_writes(self, transcript: Transcript, expiry: JsonDict, below: int) -> list[Write]:
        """Move the ``expire_at`` of the chunks before ``below`` to ``expiry`` where it is a day
        or more earlier (or missing): unfenced, and only that field."""
        if not expiry:
            return []
        due = expiry[EXPIRE_AT].timestamp() - DAY_SECONDS
        writes = []
        for i, chunk in enumerate(transcript.chunks):
            expires = transcript.expires[i] if i < len(transcript.expires) else None
            if chunk.index < below and not (isinstance(expires, datetime)
                                            and expires.timestamp() > due):
                path = self.chunk_path(transcript.conversation_id, chunk.index)
                writes.append(Write("update", path, dict(expiry)))
        return writes

    # -- unusable messages ---------------------------------------------------------------------

    async def record_poison(self, message_id: str, record: JsonDict) -> None:
        """Keep a rejected message under its (safe) id; the first record of an id stays."""
        # The same poison message delivered again (AlreadyExists): one record is enough.
        with contextlib.suppress(AlreadyExists):
            await self.db.create(f"{self._poison}/{message_doc_id(message_id)}",
                                 record | self._expiry(_recorded_at(record)))

    async def record_dead_letter(self, message_id: str, record: JsonDict) -> str:
        """Keep a dead letter, create-only; returns its document id.

        The dead letter's own redelivery (same id, same data) finds its record and keeps it. A
        different message under an id already recorded (ids come from the request) is kept
        beside it under an id derived from both, never over it.
        """
        doc_id = message_doc_id(message_id)
        expiry = self._expiry(_recorded_at(record))
        for _ in range(2):
            path = f"{self._dead_letters}/{doc_id}"
            try:
                await self.db.create(path, record | {"message_id": doc_id} | expiry)
                return doc_id
            except AlreadyExists:
                (snap,) = await self.db.get_all([path])
                if snap is not None and snap.data.get("data") == record.get("data"):
                    return doc_id
            digest = hashlib.sha256(str(record.get("data")).encode()).hexdigest()
            doc_id = message_doc_id(f"{doc_id}\n{digest}")
        return doc_id  # the derived id holds yet another message: that one stays

    async def get_poison(self, message_id: str) -> JsonDict | None:
        """The rejection recorded for a message (a query's reason, say), or None."""
        (snap,) = await self.db.get_all([f"{self._poison}/{message_doc_id(message_id)}"])
        return snap.data if snap else None

    async def list_poison(self) -> list[JsonDict]:
        return [s.data for s in await self.db.list_all(self._poison)]

    async def get_dead_letter(self, message_id: str) -> JsonDict | None:
        """The dead letter recorded for a message (re-driven or not), or None."""
        (snap,) = await self.db.get_all([f"{self._dead_letters}/{message_doc_id(message_id)}"])
        return {"message_id": snap.id, **snap.data} if snap else None

    async def list_dead_letters(self, page_size: int = DEAD_LETTER_PAGE) -> list[Snapshot]:
        """Every dead letter, by id, read ``page_size`` at a time from a cursor on the id (the
        last one read): however many there are, none is left out."""
        page = await self.db.list_all(self._dead_letters, limit=page_size)
        found = list(page)
        while len(page) == page_size:
            # The range starts at the cursor, inclusive: one more than a page, less the cursor.
            cursor = found[-1].id
            read = await self.db.list_range(self._dead_letters, cursor, LAST_DOCUMENT_ID,
                                            limit=page_size + 1)
            page = [snap for snap in read if snap.id != cursor][:page_size]
            found.extend(page)
        return found

    # -- redrive (``ackloop runs redrive``) -----------------------------------------------------

    async def reopen_dead_lettered_run(
        self, run_id: str, step_key: str | None, now: float
    ) -> Literal["reopened", "running", "finished", "missing"]:
        """Make a run that failed by dead-lettering runnable again, before its message is re-sent.

        In one transaction: a run ``failed`` with a ``dead_lettered:`` error goes back to
        ``running`` and becomes its conversation's active run again; the dead-lettered step (if it
        is not completed) gets a fresh attempt budget. A run still running is left as it is (its
        step is still reset); a run that ended any other way is not touched ("finished"). Raises
        :class:`ConversationBusy` when another run of the conversation started meanwhile.
        """

        async def body(txn: Transaction) -> Literal["reopened", "running", "finished", "missing"]:
            snap = await txn.get(self.run_path(run_id))
            if snap is None:
                return "missing"
            run = RunRecord.model_validate(snap.data)
            step = await txn.get(self.step_path(run_id, step_key)) if step_key else None
            dead_lettered = (run.status is RunStatus.FAILED
                             and (run.error or "").startswith("dead_lettered:"))
            if run.status is not RunStatus.RUNNING and not dead_lettered:
                return "finished"
            outcome: Literal["reopened", "running"] = "running"
            if dead_lettered:
                conv_path = self.conversation_path(run.conversation_id)
                conv = await txn.get(conv_path)
                active = conv.data.get("active_run_id") if conv else None
                if active not in (None, run_id):
                    raise ConversationBusy(
                        f"conversation {run.conversation_id!r} moved on to run {active}"
                    )
                # A redrive is an operator's decision to try again: the run's time budget
                # starts over, or a run failed late would stop again at its first claim; so
                # does the time it waited for people and events, which that budget excludes
                # (kept, it would add every second waited before the redrive to the budget).
                # Running again: it no longer expires until it ends again.
                txn.write(Write("update", snap.path, {
                    "status": RunStatus.RUNNING.value, "stop_reason": None, "error": None,
                    "finished_at": None, "started_at": now, "progress_at": now,
                    "waited_seconds": 0.0, "wait_ended_at": now,
                } | ({"conversation_document": True} if conv is not None else {})
                  | ({EXPIRE_AT: None} if self.retention else {})))
                # A conversation that has no document goes on without one (the run stands
                # for it); one that has a document names the run active again, and a run that
                # started it is told so (its end reads and updates it).
                if conv is not None or run.conversation_id != run_id:
                    stored = conv.data if conv else {"conversation_id": run.conversation_id,
                                                     "owner": run.owner}
                    if conv is not None:
                        # The dead letter's end added the run's figures to the conversation;
                        # its next end adds them again, whole: take them out meanwhile.
                        record = ConversationRecord.model_validate(conv.data)
                        stored = stored | {
                            "usage": record.usage.minus(run.usage).model_dump(mode="json"),
                            "cost": (record.cost.minus(run.cost).model_dump(mode="json")
                                     if record.cost is not None and run.cost is not None
                                     else stored.get("cost"))}
                    txn.write(Write("set", conv_path, {
                        **stored, "active_run_id": run_id, "updated_at": now,
                    } | self._conversation_expiry(now)))
                outcome = "reopened"
            if step is not None and step.data.get("status") != StepStatus.COMPLETED.value:
                txn.write(Write("update", step.path, {"attempts": 0, "not_before": 0.0}
                                | self._live_expiry(now)))
            return outcome

        return await self.db.transact(body)

    async def mark_redriven(self, message_id: str, now: float, outcome: str) -> None:
        """Record that a dead letter was re-driven (or why it was not)."""
        path = f"{self._dead_letters}/{message_doc_id(message_id)}"
        await self.db.commit([Write("update", path,
                                    {"redriven_at": now, "redrive_outcome": outcome})])
