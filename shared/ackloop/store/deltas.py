"""Live text of a model call in flight: written by the model step, read by any API instance.

A streamed model call hands its answer's text out piece by piece; :class:`DeltaWriter` gathers
the pieces and writes them as ``runs/{run_id}/deltas/{step}-{attempt}-{seq}`` documents, at most
one write per ``flush_seconds`` (the first piece at once, so the first words show without
waiting), which bounds the writes a run makes per second whatever the model's speed. What is
left when the call ends is the step's to write, in its commit (:meth:`DeltaWriter.finish`): no
round trip of its own, and every delta of a step is written by the time the step is. The writes
are best effort: they run beside the call, a failed one is logged and its text goes with the
next, and nothing about them can fail the step. The committed step stays the record of the
turn; deltas only show it being written, and expire with a short ``expire_at``.

A call that has not claimed its step yet (it claims at its first text:
:mod:`ackloop.engine.claims`) gives its writer a ``claim`` and a ``ready``: the first piece's
write is handed to ``claim``, which commits it with the step's claim (one round trip: the
claim and the first words, or neither), and the later writes await ``ready``, the claim's
attempt, or None when the step was claimed by another delivery, and then nothing more is
written.

Ids sort in the order a reader needs: by step, then attempt (a step retried or taken over
streams again under its new attempt), then sequence. Firestore rather than Pub/Sub carries them
because every API instance can read them with the queries it already makes, a client that
(re)connects mid-step reads them from the start, and nothing needs a subscription per stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from pydantic import BaseModel

from ackloop.docdb.base import DocumentDB, Write
from ackloop.store.base import DAY_SECONDS, EXPIRE_AT, LAST_DOCUMENT_ID, StoreBase

log = logging.getLogger(__name__)

WRITE_TIMEOUT_SECONDS = 5.0
"""Longest one delta write may take: a slow store delays the deltas, never the step."""
CLOSE_TIMEOUT_SECONDS = 2.0
"""Longest the step waits, after its call, for the last deltas to be written."""


class DeltaRecord(BaseModel):
    """One piece of a streamed model call's text, as stored and as sent to clients."""

    step: str
    attempt: int
    seq: int
    text: str


def deltas_collection(store: StoreBase, run_id: str) -> str:
    return f"{store.run_path(run_id)}/deltas"


def delta_id(step: str, attempt: int, seq: int) -> str:
    """``0003-model-002-00017``: ids sort by step, attempt, then sequence."""
    return f"{step}-{attempt:03d}-{seq:05d}"


def after_step(step: str) -> str:
    """The first delta id past every delta of ``step`` (``.`` sorts after ``-``)."""
    return f"{step}."


DeltasReady = Callable[[], Awaitable[int | None]]
"""Awaited before a writer's own first write: the attempt its deltas go out under, or None to
write nothing (the step it would show is another delivery's)."""
ClaimWith = Callable[[DeltaRecord], None]
"""Takes a call's first piece of text, to commit it with the step's claim."""


def delta_write(collection: str, record: DeltaRecord, expire_at: datetime | None) -> Write:
    """The write of ``record`` in ``collection`` (a run's deltas)."""
    data = record.model_dump() | {"written_at": time.time()}
    if expire_at is not None:
        data[EXPIRE_AT] = expire_at
    return Write("set", f"{collection}/{delta_id(record.step, record.attempt, record.seq)}", data)


class DeltaWriter:
    """The deltas of one model call: :meth:`add` each piece, then :meth:`finish` (the step's
    commit writes what is left) or :meth:`close` (the writer writes it).

    ``expire_at``: when the documents may be deleted (None writes none). ``claim``: given the
    first piece's write instead of the writer writing it (:data:`ClaimWith`). ``ready``:
    awaited once, before the writer's own first write (:data:`DeltasReady`); the pieces added
    meanwhile go with that write.
    """

    def __init__(self, db: DocumentDB, collection: str, step: str, attempt: int, *,
                 flush_seconds: float, expire_at: datetime | None,
                 clock: Callable[[], float] = time.monotonic,
                 ready: DeltasReady | None = None, claim: ClaimWith | None = None) -> None:
        self._db, self._collection = db, collection
        self.step, self.attempt = step, attempt
        self._flush_seconds, self._expire_at, self._clock = flush_seconds, expire_at, clock
        self._ready = ready
        self._claim = claim
        self._claimed_at: float | None = None  # when the first piece went to the claim
        self._pending: list[str] = []
        self._seq = 0
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()  # the call ended: write the rest without waiting
        self._closing = False
        self._handing_over = False  # finish(): what is left goes with the step's commit
        self._task: asyncio.Task[None] | None = None
        self.writes = 0
        self.shown = False
        """Whether any text was handed to the writer (a client may have seen it)."""

    def add(self, text: str) -> None:
        """Queue ``text``; the writer task sends it with the next write."""
        if not text or self._closing:
            return
        self.shown = True
        if self._claim is not None:  # the first piece goes with the step's claim
            claim, self._claim = self._claim, None
            self._claimed_at = self._clock()
            claim(self._next_record(text))
            return
        self._pending.append(text)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"deltas {self.step}")
        self._wake.set()

    async def close(self) -> None:
        """Write what is left, waiting at most :data:`CLOSE_TIMEOUT_SECONDS`."""
        await self._end()

    async def _end(self) -> None:
        """Tell the writer task the call ended and wait for it (at most
        :data:`CLOSE_TIMEOUT_SECONDS`)."""
        self._closing = True
        self._closed.set()
        self._wake.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), CLOSE_TIMEOUT_SECONDS)
        except TimeoutError:
            log.warning("deltas of %s: the last write did not finish in %.0f s", self.step,
                        CLOSE_TIMEOUT_SECONDS)
            self._task.cancel()

    async def finish(self) -> DeltaRecord | None:
        """End the call's text: wait (at most :data:`CLOSE_TIMEOUT_SECONDS`) for a write in
        flight, then return what is left as the last delta, for the step's commit to write
        (:meth:`ackloop.store.steps.Steps.commit_step`); None when nothing is left, or nothing
        may be written (the step is another delivery's)."""
        self._handing_over = True
        await self._end()
        if not self._pending:
            return None
        text, self._pending = "".join(self._pending), []
        return self._next_record(text)

    async def abandon(self) -> None:
        """Stop writing (the call failed): what was written stays, superseded by the next
        attempt's."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        if self._ready is not None:
            attempt = await self._ready()
            if attempt is None:
                self._closing = True
                self._pending.clear()
                return
            self.attempt = attempt
        if self._claimed_at is not None:  # the claim wrote the first piece: one interval on
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), max(
                    0.0, self._claimed_at + self._flush_seconds - self._clock()))
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._pending and not self._handing_over:
                began = self._clock()
                await self._write()
                if self._closing and not self._pending:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closed.wait(),
                                           max(0.0, began + self._flush_seconds - self._clock()))
            elif self._closing:
                return

    def _next_record(self, text: str) -> DeltaRecord:
        """``text`` as the next delta, counted as written (its committer answers for it)."""
        record = DeltaRecord(step=self.step, attempt=self.attempt, seq=self._seq, text=text)
        self._seq += 1
        self.writes += 1
        return record

    async def _write(self) -> None:
        text, self._pending = "".join(self._pending), []
        write = delta_write(self._collection, DeltaRecord(
            step=self.step, attempt=self.attempt, seq=self._seq, text=text), self._expire_at)
        try:
            await asyncio.wait_for(self._db.commit([write]), WRITE_TIMEOUT_SECONDS)
        except Exception as exc:  # best effort: the text goes with the next write
            log.warning("delta %s not written: %s: %s", write.path, type(exc).__name__, exc)
            self._pending.insert(0, text)
            self._wake.set()  # try again after the interval
            return
        self._seq += 1
        self.writes += 1


def delta_expiry(store: StoreBase, now: float) -> datetime | None:
    """A delta matters while its step runs: it expires a day after it was written (within the
    deployment's retention), or never when the deployment keeps everything."""
    if store.retention is None:
        return None
    return datetime.fromtimestamp(now + min(DAY_SECONDS, store.retention.seconds), UTC)


def run_delta_write(store: StoreBase, run_id: str, record: DeltaRecord, now: float) -> Write:
    """The write of ``record`` among ``run_id``'s deltas, expiring as :func:`delta_expiry`
    says: what a step's claim or commit writes with it (the store writes, it builds none)."""
    return delta_write(deltas_collection(store, run_id), record, delta_expiry(store, now))


def run_delta_writer(store: StoreBase, run_id: str, step: str, attempt: int, *,
                     flush_seconds: float, now: float, ready: DeltasReady | None = None,
                     claim: ClaimWith | None = None) -> DeltaWriter:
    """Where the text of a streamed model call of ``step`` goes while the call runs
    (``ready``, ``claim``: for a step not claimed yet, see :class:`DeltaWriter`)."""
    return DeltaWriter(store.db, deltas_collection(store, run_id), step, attempt,
                       flush_seconds=flush_seconds, expire_at=delta_expiry(store, now),
                       ready=ready, claim=claim)


async def read_deltas(store: StoreBase, run_id: str, start_id: str, limit: int | None, *,
                      end_id: str = LAST_DOCUMENT_ID) -> list[tuple[str, DeltaRecord]]:
    """The run's deltas with ids from ``start_id`` to ``end_id``, by id, with their ids."""
    snaps = await store.db.list_range(deltas_collection(store, run_id), start_id, end_id, limit)
    return [(s.id, DeltaRecord.model_validate(s.data)) for s in snaps]


def next_id(delta: str) -> str:
    """The id right after ``delta`` in its attempt (the next sequence number)."""
    head, _, seq = delta.rpartition("-")
    return f"{head}-{int(seq) + 1:05d}"
