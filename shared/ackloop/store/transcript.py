"""The transcript room: a conversation's chunks, how a model step reads them (with its pointer,
or back to the last compaction) and the writes that append a turn or record a compaction."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ackloop.docdb.base import (
    AlreadyExists,
    PreconditionFailed,
    Snapshot,
    StorageUnavailable,
    Transaction,
    Version,
    Write,
)
from ackloop.domain.document_sizes import value_size
from ackloop.domain.errors import StaleRead
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import StepKey
from ackloop.domain.records import RunRecord, StepRecord, TranscriptChunk
from ackloop.store.base import DAY_SECONDS, EXPIRE_AT, StoreBase, Transcript
from ackloop.store.decision import RunRead

# A chunk grows by one entry a turn, each append sending only its turn; past this size the next
# turn starts a new chunk, well below Firestore's 1 MiB document cap.
CHUNK_BYTES = 256 * 1024

log = logging.getLogger(__name__)

VIEW_PAGE = 2
"""Transcript chunks a model step lists at a time, newest first, to find the last compaction
(:meth:`Transcripts.load_transcript_view`)."""


@dataclass(frozen=True)
class ModelStepInputs:
    """What a model step reads before its call (:meth:`Transcripts.model_step_inputs`)."""

    run: RunRead | None
    previous: list[StepRecord]
    """The previous turn's model step and those of its tool steps that exist."""
    own: StepRecord | None
    """The step's own document, if it exists."""
    transcript: Transcript | None
    """The transcript as the previous step left it (None: someone appended since, or a chunk
    is missing: list it)."""


def pointer_after(transcript: Transcript, writes: Sequence[Write]) -> JsonDict:
    """Where ``transcript`` stands once ``writes`` (its append) commit: the next step reads
    exactly these chunks, with the run, in one round trip (:meth:`Transcripts.run_and_transcript`)
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


def _size(value: Any) -> int:
    """What ``value`` adds to a transcript chunk: its compact JSON or its size in Firestore,
    whichever is more (:mod:`ackloop.domain.document_sizes`)."""
    return max(len(json.dumps(value, separators=(",", ":"))), value_size(value))


class Transcripts(StoreBase):
    """Reads and writes of ``conversations/{id}/transcript/{n}``, and the fence a run's end
    outside a step sets on the last chunk."""

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
                                kept: Sequence[JsonDict], record: JsonDict, now: float, *,
                                opening: JsonDict) -> Transcript | None:
        """Record a compaction of ``transcript`` (as a model step read it): the next chunk,
        holding ``summary``, a copy of the ``kept`` turns and ``record`` (who made it, what it
        used and cost), created in one commit with the last chunk written unchanged, fenced
        on the version read (a run's end outside a step, or another writer, makes it fail).
        ``opening``: the content the summary stands as in a model's view, as the engine builds
        it (:func:`ackloop.domain.context_window.summary_content`): the chunk's size counts it.
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
            tail=last.tail, size=_size([opening, *kept]),
            history_refreshed_at=now if self.retention else None)
        expiry = self._live_expiry(now)
        last_path = self.chunk_path(conversation_id, last.index)
        refresh = _refresh_writes(self, transcript, expiry, below=index)
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
            await refresh_history(self, transcript, now)
        return Transcript(conversation_id, [chunk], versions[-1],
                          (expiry.get(EXPIRE_AT),))


# --- The writes other rooms' commits make on a transcript (over the store's ground) ---


def append_writes(
    ground: StoreBase, transcript: Transcript, contents: Sequence[JsonDict], tail: str,
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
    return _history_due(ground, transcript, now, _append_only(ground, transcript, contents,
                                                                tail, now))


def _append_only(
    ground: StoreBase, transcript: Transcript, contents: Sequence[JsonDict], tail: str,
                 now: float) -> list[Write]:
    added = _size(list(contents))
    conversation_id = transcript.conversation_id
    last = transcript.chunks[-1] if transcript.chunks else None
    expiry = ground._live_expiry(now)
    if last is not None and last.size + added <= CHUNK_BYTES:
        key = f"t{len(last.turns):06d}"
        return [*_refresh_writes(ground, transcript, expiry, below=last.index),
                Write("update", ground.chunk_path(conversation_id, last.index),
                      {"tail": tail, "size": last.size + added} | expiry,
                      if_version=transcript.last_version,
                      into={"turns": {key: list(contents)}})]
    index = last.index + 1 if last is not None else 0
    chunk = TranscriptChunk(index=index, turns={f"t{0:06d}": list(contents)}, tail=tail,
                            size=added)
    if last is None:
        return [Write("create", ground.chunk_path(conversation_id, index),
                      chunk.to_doc() | expiry)]
    # Starting a chunk is fenced on the last one too (written unchanged, but for its expiry
    # when that is due), so a run's end that wrote the last chunk fails this append too.
    last_path = ground.chunk_path(conversation_id, last.index)
    refresh = _refresh_writes(ground, transcript, expiry, below=index)
    due = next((w.data for w in refresh if w.path == last_path), {})
    return [*(w for w in refresh if w.path != last_path),
            Write("update", last_path, {"size": last.size} | due,
                  if_version=transcript.last_version),
            Write("create", ground.chunk_path(conversation_id, index), chunk.to_doc() | expiry)]


def _history_due(
    ground: StoreBase, transcript: Transcript, now: float, writes: list[Write]
                 ) -> list[Write]:
    """``writes`` (an append), marking the compaction's chunk the transcript is read from
    when the chunks before it are due for the retention horizon again (a day or more since
    they last got it): :meth:`commit_step` gives it to them once the append commits."""
    if not ground.retention or not transcript.chunks:
        return writes
    first = transcript.chunks[transcript.start]
    refreshed = first.history_refreshed_at
    if first.summary is None or first.index == 0 or (
            refreshed is not None and now - refreshed < DAY_SECONDS):
        return writes
    path = ground.chunk_path(transcript.conversation_id, first.index)
    mark = {"history_refreshed_at": now}
    if any(w.path == path for w in writes):
        return [replace(w, data=w.data | mark) if w.path == path else w for w in writes]
    return [*writes, Write("update", path, mark)]


async def refresh_history(
    ground: StoreBase, transcript: Transcript, now: float) -> None:
    """Give the chunks before the transcript's last compaction (no model step reads them
    again, so no append refreshes them) the retention horizon: after the commit, one batch,
    else one by one, a chunk already gone (expired) left out. Best effort: at most once a
    day per conversation, and a failure here only leaves that for the next day."""
    expiry = ground._live_expiry(now)
    first = transcript.chunks[transcript.start].index if transcript.chunks else 0
    paths = [ground.chunk_path(transcript.conversation_id, i) for i in range(first)]
    if not expiry or not paths:
        return
    try:
        for at in range(0, len(paths), 400):
            await ground.db.commit([Write("update", p, dict(expiry))
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
            await ground.db.commit([Write("update", path, dict(expiry))])


def _refresh_writes(
    ground: StoreBase, transcript: Transcript, expiry: JsonDict, below: int) -> list[Write]:
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
            path = ground.chunk_path(transcript.conversation_id, chunk.index)
            writes.append(Write("update", path, dict(expiry)))
    return writes


async def newest_chunk(
    ground: StoreBase, conversation_id: str) -> int:
    """The index of the conversation's last transcript chunk (0 if it has none)."""
    if not conversation_id:
        return 0
    newest = await ground.db.list_newest(ground.transcript_collection(conversation_id), {},
                                       "index", limit=1)
    return int(newest[0].data.get("index", 0)) if newest else 0


async def transcript_fence(
    ground: StoreBase, txn: Transaction, run: RunRecord, first: int, now: float
) -> Write:
    """The write of :meth:`end_run_now` that fails a late append of ``run``: its
    conversation's last chunk from index ``first`` on (read in ``txn``), or a new empty
    chunk where there is none."""
    conversation_id = run.conversation_id
    mark = {"fence": f"{run.run_id}@{now}"}
    index, last = first, None
    while await txn.get(ground.chunk_path(conversation_id, index)) is not None:
        last, index = index, index + 1
    if last is not None:
        return Write("update", ground.chunk_path(conversation_id, last), mark)
    empty = TranscriptChunk(index=first).to_doc() | mark | ground._live_expiry(now)
    return Write("create", ground.chunk_path(conversation_id, first), empty)
