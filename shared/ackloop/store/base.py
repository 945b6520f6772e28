"""What every room of the store shares: its documents' paths, their retention, and the values
the rooms and their callers pass (a run's end, a claim, a transcript as read).

Nothing here imports a room: the rooms, and the modules outside the store that name its
documents (:mod:`ackloop.store.deltas`), take their constants and types from here, so every import
points one way. The store is a pure writer: a run's end arrives here with its error already
masked (:func:`ackloop.engine.ending.run_end`), its messages and its cost already decided.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from pydantic import ConfigDict

from ackloop.docdb.base import DocumentDB, Version
from ackloop.docdb.counting import DocumentCounters
from ackloop.domain.cost import Cost
from ackloop.domain.errors import LeaseLost, StaleRead, StepTaken
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import RunStatus, StepRecord, StopReason, TranscriptChunk
from ackloop.domain.wire import RunOutcome

if TYPE_CHECKING:
    from ackloop.config.settings import Settings


DAY_SECONDS = 86_400.0
EXPIRE_AT = "expire_at"
"""The field Firestore's TTL policies delete by (infra/firestore.tf): a timestamp."""
LAST_DOCUMENT_ID = "\U0010ffff"

ClaimState = Literal["new", "taken_over", "completed", "waiting", "unclaimed"]
"""``waiting``: the step waits for a decision; nothing is claimed and nothing runs.
``unclaimed``: run without a claim; its document is created by the commit that records it
(:meth:`Steps.unclaimed`)."""


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
    * poison and dead letters: ``seconds`` after they were recorded;
    * an eval's report (its head and its pages of cases): ``seconds`` after it was stored.
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


class RunEnd(RunOutcome):
    """How a run ends: what the run document and the answer message will say (its
    :class:`RunOutcome`, the status and the stop reason as their enums), with what the end
    writes besides."""

    model_config = ConfigDict(frozen=True)

    status: RunStatus
    stop_reason: StopReason
    cost: Cost | None = None
    """The run's total cost (its ingest and steps), written on the run and added to its
    conversation's."""
    agent: str | None = None
    """The agent whose turn ended the run, when a hand-off made it another than the run's:
    the conversation's later runs continue with it (``handed_to``)."""
    children_ending: tuple[str, ...] = ()
    """Children of its calls still working at an end outside a step: their ends add their
    figures later (``RunRecord.children_ending``)."""


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


class StoreBase:
    """The ground every room stands on: the :class:`DocumentDB`, the collections (their
    prefix), the paths of every kind of document and the ``expire_at`` each write carries."""

    def __init__(self, db: DocumentDB, collection_prefix: str = "",
                 retention: Retention | None = None) -> None:
        """``retention``: when documents expire (see :class:`Retention`); None keeps them."""
        self.db = db
        self.retention = retention
        self._runs = f"{collection_prefix}runs"
        self._conversations = f"{collection_prefix}conversations"
        self._poison = f"{collection_prefix}poison"
        self._dead_letters = f"{collection_prefix}dead_letters"
        self._evals = f"{collection_prefix}evals"
        self._schedules = f"{collection_prefix}schedules"
        self._quotas = f"{collection_prefix}quotas"
        self._slots = f"{collection_prefix}slots"
        self._spend = f"{collection_prefix}spend"
        self._limits = f"{collection_prefix}limits"

    @property
    def counters(self) -> DocumentCounters | None:
        """What this process's store has read and written, when its database counts it."""
        counters = getattr(self.db, "counters", None)
        return counters if isinstance(counters, DocumentCounters) else None

    def _expiry(self, now: float) -> JsonDict:
        """``expire_at`` of a record kept ``retention`` after ``now`` (a run's end, poison)."""
        return {EXPIRE_AT: self.retention.after(now)} if self.retention else {}

    def _live_expiry(self, now: float) -> JsonDict:
        """``expire_at`` of a step or a transcript chunk written at ``now``."""
        return {EXPIRE_AT: self.retention.live(now)} if self.retention else {}

    def _conversation_expiry(self, now: float) -> JsonDict:
        return {EXPIRE_AT: self.retention.conversation(now)} if self.retention else {}

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

    def chunk_path(self, conversation_id: str, index: int) -> str:
        return f"{self.transcript_collection(conversation_id)}/{index:05d}"

    def eval_path(self, eval_id: str, owner: str) -> str:
        """An eval report's head: its id is the owner's and the eval id's hash, so any eval id
        names a document, and the same eval id from two callers names two."""
        scoped = f"{owner}\n{eval_id}".encode("utf-8", "surrogatepass")
        return f"{self._evals}/ev-{hashlib.sha256(scoped).hexdigest()[:32]}"

    def eval_page_path(self, eval_id: str, owner: str, page: int) -> str:
        """A page of an eval report's cases (``cases/00000``, ``00001``, ...)."""
        return f"{self.eval_path(eval_id, owner)}/cases/{page:05d}"

    async def _raise_conflict(self, claim: Claim, exc: Exception) -> NoReturn:
        """Tell a lost lease from a stale read after a commit was refused."""
        (snap,) = await self.db.get_all([self.step_path(claim.run_id, claim.key)])
        if claim.version is None and snap is not None:
            raise StepTaken(StepRecord.model_validate(snap.data)) from exc
        if claim.version is not None and (snap is None or snap.version != claim.version):
            raise LeaseLost(f"step {claim.key} of {claim.run_id} lost its lease") from exc
        raise StaleRead(f"step {claim.key} of {claim.run_id}: {exc}") from exc
