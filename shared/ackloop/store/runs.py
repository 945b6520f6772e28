"""The runs room: creating a run (once per request, queued behind its conversation's active
run), reading runs and conversations, and ending a run outside a step."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ackloop.docdb.base import (
    AlreadyExists,
    PreconditionFailed,
    Snapshot,
    StorageUnavailable,
    Transaction,
    Write,
)
from ackloop.domain.cost import Cost
from ackloop.domain.errors import ConversationNotStarted, IdempotencyMismatch, PermanentError
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import is_run_id
from ackloop.domain.records import ConversationRecord, RunRecord, RunStatus, StopReason
from ackloop.domain.wire import Usage
from ackloop.store.base import RunEnd, StoreBase
from ackloop.store.decision import RunRead
from ackloop.store.transcript import newest_chunk, transcript_fence

# Optimistic retries of :meth:`Runs.create_run` when its documents change meanwhile.
CREATE_RUN_ATTEMPTS = 5
# Runs that may wait behind a conversation's active run (the queue lives on one document).
MAX_QUEUED_RUNS = 100


@dataclass(frozen=True)
class EndWrites:
    """The writes that end a run, and the queued run of its conversation they start (if any)."""

    writes: list[Write]
    next_run_id: str | None


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


def end_plan(run: RunRecord, conv_snapshot: Snapshot | None) -> tuple[str | None, int]:
    """The queued run a run's end starts, and how many documents the end writes."""
    if conv_snapshot is None:
        return None, 1
    conv = ConversationRecord.model_validate(conv_snapshot.data)
    if conv.active_run_id == run.run_id:
        next_run_id = conv.queue[0] if conv.queue else None
        return next_run_id, 2 if next_run_id is None else 3
    return None, 2 if run.run_id in conv.queue else 1


def end_writes(
    ground: StoreBase, run_snapshot: Snapshot, conv_snapshot: Snapshot | None, end: RunEnd,
    now: float, also: JsonDict | None = None,
) -> EndWrites:
    """Writes that end a run, each fenced on the version its caller read.

    The run is fenced on its version, the conversation too: the same commit hands the
    conversation to the first queued run (which becomes ``running``), so a follow-up that
    arrived during the run starts exactly when it ends, and never twice. A run that is its
    conversation's only run (``conv_snapshot`` None: the conversation has no document, or,
    for a run that started it and was not marked ``conversation_document``, the caller did
    not read it) writes only itself: the conversation goes on having no document. A
    follow-up that joined after the caller read the run marked the run, so the run's
    version fence refuses the commit. ``also``: other fields of the run written with its end
    (:attr:`~ackloop.store.decision.Decision.run_fields`).
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
    } | ground._expiry(now) | (also or {})
    if end.cost is not None:
        update["cost"] = end.cost.model_dump(mode="json")
    if end.agent is not None:
        update["handed_to"] = end.agent
    if end.children_ending:
        update["children_ending"] = list(end.children_ending)
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
    conv_update |= ground._conversation_expiry(now) | {
        "usage": conv.usage.plus(end.usage).model_dump(mode="json"),
        "cost": Cost.total([conv.cost, end.cost]).model_dump(mode="json")}
    writes.append(Write("update", conv_snapshot.path, conv_update,
                        if_version=conv_snapshot.version))
    if next_run_id is not None:
        writes.append(Write("update", ground.run_path(next_run_id), {
            "status": RunStatus.RUNNING.value, "started_at": now, "progress_at": now}))
    return EndWrites(writes, next_run_id)


class Runs(StoreBase):
    """``runs/{run_id}`` and ``conversations/{id}``: a run's creation, its reads, its end (the
    writes a step's commit also uses), its cancel request and a queued run's start."""

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
        leaves it so (:func:`end_writes`). Its precondition (the run does not exist) sends a
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
                # It starts now: not before the end of the run it follows, which this read may
                # be the first to see (its query came while that run was active, and the
                # commit that would have queued it was refused by that run's end).
                start = max(run.created_at, conv.updated_at)
                run = run.model_copy(update={"started_at": start, "progress_at": start})
                conv = conv.model_copy(
                    update={
                        "active_run_id": run.run_id,
                        "run_count": conv.run_count + 1,
                        "updated_at": start,
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
        first = (await newest_chunk(self, str(found.data.get("conversation_id") or ""))
                 if status is RunStatus.RUNNING else 0)

        async def body(txn: Transaction) -> tuple[RunRecord, str | None] | None:
            snap = await txn.get(self.run_path(run_id))
            if snap is None:
                return None
            run = RunRecord.model_validate(snap.data)
            if run.status.terminal or (only_active and run.status is RunStatus.QUEUED):
                return None
            conv = await txn.get(self.conversation_path(run.conversation_id))
            fence = (await transcript_fence(self, txn, run, first, now)
                     if run.status is RunStatus.RUNNING else None)
            ending = end_writes(self, snap, conv, end, now)
            for write in ending.writes:
                txn.write(replace(write, if_version=None))  # the transaction guards them
            if fence is not None:
                txn.write(fence)
            ended = run.model_copy(update={"status": end.status, "stop_reason": end.stop_reason,
                                           "error": end.error, "finished_at": now,
                                           "usage": end.usage, "cost": end.cost or run.cost,
                                           "children_ending": list(end.children_ending)})
            return ended, ending.next_run_id

        return await self.db.transact(body)

    async def fail_run(self, run_id: str, error: str, now: float) -> bool:
        """Mark a running run failed (used where no step can commit). True if it changed.
        ``error`` is written as given: the caller masks it (the store masks nothing)."""
        end = RunEnd(status=RunStatus.FAILED, stop_reason=StopReason.FAILED, error=error)
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

    async def count_late_child(self, run_id: str, child_id: str, usage: Usage,
                               cost: Cost | None) -> RunRecord | None:
        """Add the figures of child ``child_id``, which ended after ``run_id`` had ended
        outside a step, to the run's usage and cost (its children's part), once: only while
        the run names it in ``children_ending``, which this removes; its conversation's
        figures, which the run's end added to, too. The run as updated, or
        None when it did not wait for that child's figures (counted already, or reopened)."""

        async def body(txn: Transaction) -> RunRecord | None:
            snap = await txn.get(self.run_path(run_id))
            if snap is None:
                return None
            run = RunRecord.model_validate(snap.data)
            if child_id not in run.children_ending:
                return None
            counted = run.model_copy(update={
                "usage": run.usage.with_child(usage),
                "cost": (run.cost or Cost()).plus(cost.as_child()) if cost else run.cost,
                "children_ending": [c for c in run.children_ending if c != child_id]})
            txn.write(Write("update", snap.path, {
                "usage": counted.usage.model_dump(mode="json"),
                "cost": counted.cost.model_dump(mode="json") if counted.cost else None,
                "children_ending": counted.children_ending}))
            conv = await txn.get(self.conversation_path(run.conversation_id))
            if conv is not None:  # its end added the run's figures there: these too
                record = ConversationRecord.model_validate(conv.data)
                txn.write(Write("update", conv.path, {
                    "usage": record.usage.plus(Usage.child_part(usage)).model_dump(mode="json"),
                    "cost": Cost.total([record.cost, cost.as_child() if cost else None]
                                       ).model_dump(mode="json")}))
            return counted

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
        first = await newest_chunk(self, run.conversation_id)

        async def body(txn: Transaction) -> RunRecord | None:
            snap = await txn.get(self.run_path(run_id))
            if snap is None:
                return None
            current = RunRecord.model_validate(snap.data)
            if current.status.terminal or current.cancel_requested:
                return current
            fence = (await transcript_fence(self, txn, current, first, time.time())
                     if current.status is RunStatus.RUNNING else None)
            txn.write(Write("update", snap.path, {"cancel_requested": True}))
            if fence is not None:
                txn.write(fence)
            return current.model_copy(update={"cancel_requested": True})

        return await self.db.transact(body)
