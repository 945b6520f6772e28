"""The waits room: a step that waits (for a person, a named event or its child run), the
decision that ends the wait, the events a run keeps, and the run clocks the sweeper reads."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TypeVar

from ackloop.docdb.base import (
    AlreadyExists,
    PreconditionFailed,
    Snapshot,
    StorageUnavailable,
    Transaction,
    Write,
)
from ackloop.domain.cost import Cost
from ackloop.domain.errors import DecisionRefused
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import (
    CLOCK,
    DEADLINE,
    ReceivedEvent,
    RunRecord,
    RunStatus,
    StepDecision,
    StepRecord,
    StepStatus,
    Waiting,
    WaitKindName,
)
from ackloop.store.base import Claim, StoreBase
from ackloop.store.decision import RunRead


def _same_decision(a: StepDecision, b: StepDecision) -> bool:
    return (a.decision, a.args, a.comment, a.payload) == (b.decision, b.args, b.comment,
                                                          b.payload)


OPTIMISTIC_ATTEMPTS = 20
"""Reads a conditional read-modify-write may take before it gives up (the documents kept
changing): each refused commit means another writer's commit went through."""
T = TypeVar("T")
MAX_RECEIVED_EVENTS = 64
"""Distinct event names a run may receive: they live on the run document (1 MiB at most)."""


def payload_digest(payload: JsonDict) -> str:
    """SHA-256 of ``payload``'s canonical JSON (sorted keys, compact)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Waits(StoreBase):
    """A waiting step's record, its decision, the events a run receives (and their payloads),
    and the writes that move a run's ``progress_at`` for the sweeper."""

    async def wait_step(self, claim: Claim, waiting: Waiting, read: RunRead | None,
                        sweep_at: float, cost: Cost | None = None) -> None:
        """Record the step as waiting (lease given back), conditional on the claim.

        ``read``: the run as read, for a wait that keeps its clock on the run document (a
        person's decision, a named event): in one batch, the run's ``progress_at`` moves to
        ``sweep_at`` (when the sweeper should find the run idle: at the deadline) unless
        another call of the turn set an earlier one, conditional on the run as read (an
        event kept or a cancel requested meanwhile refuses it). None: the step alone is
        written (a child's wait: the run's sweeper looks at it every ``sweep_stale_seconds``
        anyway, and a parent's run document is never written per child).

        Raises :class:`LeaseLost` or :class:`StaleRead` (nothing written)."""
        step_write = Write("update", self.step_path(claim.run_id, claim.key), {
            "status": StepStatus.WAITING.value, "waiting": waiting.to_doc(),
            "lease_expires_at": 0.0,
            "wait_cost": cost.model_dump(mode="json") if cost is not None else None,
            } | self._live_expiry(waiting.deadline),
            if_version=claim.version)
        writes = [step_write]
        if read is not None:
            record, run = read.record, read.snapshot
            turn = claim.step.turn
            if record.wait_turn == turn and record.progress_at is not None:
                # Another call of the turn waits (or was decided): the sweeper looks at the
                # earliest time any of them asked for, which may already have come (a deadline
                # nearer than sweep_stale_seconds); it then reschedules to the earliest one.
                sweep_at = min(sweep_at, record.progress_at)
            writes.append(Write("update", run.path, {"progress_at": sweep_at, "wait_turn": turn},
                                if_version=run.version))
        try:
            await self.db.commit(writes)
        except (PreconditionFailed, AlreadyExists) as exc:
            await self._raise_conflict(claim, exc)

    async def decide_step(self, run_id: str, key: str, decision: StepDecision,
                          kind: WaitKindName | None = None) -> tuple[StepRecord, bool]:
        """Record ``decision`` on a waiting step (one waiting for ``kind``, when given), with
        the run's clock (its ``progress_at`` and the time it waited), in one commit
        conditional on both as read (read again if either changed: see
        :meth:`receive_event`). A wait whose clock runs (a child's) has no clock on the run
        to stop: its decision writes the step alone, conditional on the step, and reads the
        run only to refuse an ended one, so that the ends of many children never contend on
        their parent's run document.
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
                raise DecisionRefused("not_found", f"run {run_id} has no step {key}")
            step = StepRecord.model_validate(snap.data)
            run = RunRecord.model_validate(run_snap.data)
            if step.decision is not None:
                if _same_decision(step.decision, decision):
                    return [], (step, False)
                raise DecisionRefused("already_decided", (
                    f"step {key} was already decided: {step.decision.decision} by "
                    f"{step.decision.by}"))
            if step.status is not StepStatus.WAITING or step.waiting is None:
                raise DecisionRefused("not_waiting",
                                      f"step {key} is {step.status}: it waits for no decision")
            if kind is not None and step.waiting.kind != kind:
                raise DecisionRefused(
                    "not_waiting", f"step {key} waits for something else ({step.waiting.kind})",
                    waiting=step.waiting)
            if run.status.terminal:
                raise DecisionRefused("run_ended", f"run {run_id} is {run.status}")
            made = decision
            if made.by not in (DEADLINE, CLOCK) and made.at > step.waiting.deadline:
                # Too late: the step is rejected as at its deadline, as the sweeper would have
                # (the caller sees that decision instead of theirs).
                # What it carried is kept (a child's end, cancelled at the deadline: what it
                # spent counts in its caller's usage and cost).
                made = StepDecision(decision="reject", by=DEADLINE, at=step.waiting.deadline,
                                    payload=made.payload)
            step_write = Write("update", snap.path, {"decision": made.to_doc()},
                               if_version=snap.version)
            decided = step.model_copy(update={"decision": made})
            if step.waiting.clock_runs:
                # The run's own time (a child's work): nothing of the run's clock to write.
                return [step_write], (decided, True)
            waited = made.at - max(step.waiting.since, run.wait_ended_at)
            # A late decision is made as at its deadline, which may be before an overlapping
            # wait's decision already counted: the time counted so far never moves back.
            return [step_write,
                    Write("update", run_snap.path, {
                        "progress_at": made.at,
                        "wait_ended_at": max(run.wait_ended_at, made.at),
                        "waited_seconds": run.waited_seconds + max(0.0, waited)},
                        if_version=run_snap.version)], (decided, True)

        return await self._read_then_commit(
            [self.run_path(run_id), self.step_path(run_id, key)], body,
            f"run {run_id} step {key}: decision")

    async def receive_event(self, run_id: str, name: str, event: ReceivedEvent,
                            owner: str | None = None) -> tuple[ReceivedEvent, bool, RunRecord]:
        """Keep ``event`` on the run under ``name``, in one commit that rewrites the run
        document (which makes a concurrent waiting commit fail and read it again: see
        :func:`ackloop.engine.waits.core.begin`). Returns the event kept, whether
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
                raise DecisionRefused("not_found", f"run {run_id} not found")
            run = RunRecord.model_validate(snap.data)
            if owner is not None and run.owner != owner:
                raise DecisionRefused("not_found", f"run {run_id} not found")
            kept = run.received.get(name)
            if kept is not None:
                same = (kept.digest == digest if kept.digest is not None
                        else kept.payload == event.payload)
                if same and kept.id == event.id:
                    return [], (kept.model_copy(update={"payload": event.payload,
                                                        "digest": None}), False, run)
                raise DecisionRefused("already_received", (
                    f"run {run_id} already received an event {name!r} (from {kept.by}) with "
                    "another payload or id: each name is received once per run"))
            if run.status.terminal:
                raise DecisionRefused("run_ended", f"run {run_id} is {run.status}")
            if len(run.received) >= MAX_RECEIVED_EVENTS:
                raise DecisionRefused("too_many_events", (
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
            raise DecisionRefused("event_gone", f"run {run_id}: event {name!r} is gone")
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
