"""The steps room: a step's claim and lease, its release, its reads, and its commit.

The invariants it keeps:

- a step document is created by the first delivery that claims it; its ``fence`` and the
  document version make the lease exclusive, and a holder whose lease was taken over cannot
  commit (:class:`~ackloop.domain.errors.LeaseLost`);
- a step's completion, its transcript entries, its outbox and, for the last step, the run's
  final state are one atomic batch whose precondition is the holder's version of the step
  (:meth:`Steps.commit_step`, :mod:`ackloop.store.decision`).

The store is a pure writer: the engine builds the messages, prices the delivery and masks what
it records (its composer, :data:`~ackloop.store.decision.Composer`, which the commit asks once it
knows how many documents it writes); the commit writes them with their preconditions. The writes
of another room that a step's commit carries (a transcript append, a run's end) come from that
room's module (:func:`~ackloop.store.transcript.append_writes`,
:func:`~ackloop.store.runs.end_writes`), over the same ground: no room is built on another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace

from ackloop.docdb.base import AlreadyExists, PreconditionFailed, Snapshot, Version, Write
from ackloop.domain.errors import LeaseLost, StepBusy, StepConflict
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import StepKey
from ackloop.domain.records import RunRecord, StepRecord, StepStatus
from ackloop.domain.wire import Usage
from ackloop.store.base import Claim, StoreBase
from ackloop.store.decision import Basis, Committed, Composer, Decision, RunRead, StepPlan
from ackloop.store.runs import end_plan, end_writes
from ackloop.store.transcript import append_writes, pointer_after, refresh_history


def _fresh_step(key: StepKey, name: str, *, owner: str, now: float, message_id: str,
                lease_expires_at: float) -> StepRecord:
    return StepRecord(key=str(key), kind=key.kind, name=name, turn=key.turn, index=key.index,
                      owner=owner, lease_expires_at=lease_expires_at, message_id=message_id,
                      created_at=now, started_at=now)


class Steps(StoreBase):
    """``runs/{run_id}/steps/{key}``: claims, leases, attempts, releases, the step commit, and
    the reads of a run's steps."""

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
                              with_writes: Sequence[Write] = ()) -> Claim:
        """Claim a step that has run unclaimed so far (a streamed model call, at its first
        text): create its document as ``claim`` describes it (its attempt, its message id;
        ``unclaimed``, since its call started without a claim), holding a lease of
        ``lease_seconds``, in one commit with ``with_writes`` (the call's first words, as
        :func:`ackloop.store.deltas.delta_write` makes them). Only a
        create: a document already there means another delivery claimed or recorded the step
        meanwhile, and this one has lost it (:class:`LeaseLost`, nothing written)."""
        if claim.version is not None:
            raise ValueError(f"step {claim.key} is already claimed")
        step = claim.step.model_copy(update={"lease_expires_at": now + lease_seconds,
                                             "unclaimed": True})
        writes = [Write("create", self.step_path(claim.run_id, claim.key),
                        step.to_doc() | self._live_expiry(now))]
        writes += with_writes
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
        was taken over. ``error`` is written as given (the engine masks it)."""
        fields: JsonDict = {"attempts": claim.step.attempts + 1, "started_at": now,
                            "lease_expires_at": now + lease_seconds,
                            "last_error": error}
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
        the redelivery then claims it as its next attempt, so attempts are counted. ``error``
        is written as given (the engine masks it)."""
        if claim.version is None:
            released = claim.step.model_copy(update={
                "last_error": error, "not_before": not_before})
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
                        {"lease_expires_at": 0.0, "last_error": error,
                         "not_before": not_before},
                        if_version=claim.version,
                    )
                ]
            )

    async def give_back(self, claim: Claim) -> None:
        """Give the claim back as not tried: the step waits for something before its call (its
        place under its model's quota), so the claim that takes it next is this same attempt.
        Already taken over: the new holder owns it."""
        if claim.version is None:
            return
        with contextlib.suppress(PreconditionFailed):
            await self.db.commit([Write(
                "update", self.step_path(claim.run_id, claim.key),
                {"lease_expires_at": 0.0, "attempts": max(0, claim.step.attempts - 1)},
                if_version=claim.version)])

    async def commit_step(self, claim: Claim, basis: Basis, decision: Decision, *,
                          now: float, compose: Composer) -> Committed:
        """Write ``decision`` of the step ``claim`` holds, made from ``basis``, in one atomic
        commit with every precondition (:mod:`ackloop.store.decision`); returns what to send.

        What the decision sends, what the delivery cost and the run's cost so far, and the
        run's end with its total, are the engine's: ``compose`` is asked for them once the
        commit knows what it writes (:class:`~ackloop.store.decision.StepPlan`: how many
        documents, the queued run a run's end starts), and the store writes what it answers.

        A run's end reads its conversation first (to hand it to the next queued run), except
        for a run that started its own conversation (``new_conversation``) whose conversation
        has no document (``conversation_document`` unset): that one writes nothing but itself.
        A follow-up that joined after ``basis`` was read marked the run
        (:meth:`~ackloop.store.runs.Runs.create_run`), so the run's version fence refuses the
        commit: :class:`StaleRead`, and the caller reads the run again and commits the same
        decision (no model call is made again), now reading the conversation.

        Raises :class:`LeaseLost` (nothing written) if the lease was taken over, and
        :class:`StaleRead` (nothing written) if the step is still ours but another document the
        commit is fenced on changed since it was read.
        """
        run = basis.run.record
        conv: Snapshot | None = None
        next_trace: str | None = None
        if decision.end is not None and not (run.new_conversation
                                             and not run.conversation_document):
            (conv,) = await self.db.get_all([self.conversation_path(run.conversation_id)])
            next_run_id, _ = end_plan(run, conv)
            if next_run_id is not None:  # the queued run it starts: its first step's trace
                (queued,) = await self.db.get_all([self.run_path(next_run_id)])
                next_trace = (RunRecord.model_validate(queued.data).trace_id
                              if queued is not None else None)
        writes, committed = self._step_commit(claim, basis, decision, conv, now=now,
                                              compose=compose, next_trace=next_trace)
        try:
            await self.db.commit(writes)
        except (PreconditionFailed, AlreadyExists) as exc:
            await self._raise_conflict(claim, exc)
        if basis.transcript is not None and any(
                w.data.get("history_refreshed_at") == now for w in writes):
            await refresh_history(self, basis.transcript, now)
        return committed

    def _step_commit(
        self, claim: Claim, basis: Basis, decision: Decision, conv: Snapshot | None, *,
        now: float, compose: Composer, next_trace: str | None = None,
    ) -> tuple[list[Write], Committed]:
        """The writes of :meth:`commit_step` (the step's first), made from ``basis`` and, for a
        run's end, the conversation as read (``conv``; None: it has no document, or, for a run
        that started it, it was not read), and what the commit records."""
        run = basis.run.record
        result = decision.result
        writes: list[Write] = []
        if basis.transcript is not None and decision.contents:
            writes = append_writes(self, basis.transcript, decision.contents,
                                   f"{run.run_id}/{claim.key}", now)
            if decision.end is None and result is not None:
                result = result | {"transcript": pointer_after(basis.transcript, writes)}
        writes += decision.writes  # a streamed call's last text, with its step
        next_run_id, run_writes = (end_plan(run, conv) if decision.end is not None
                                   else (None, 0))
        composed = compose(StepPlan(run=run, step=claim.step, result=result,
                                    documents=1 + len(writes) + run_writes,
                                    next_run_id=next_run_id, next_trace=next_trace))
        # A model step that does not end the run leaves the run document alone: its append to
        # the transcript is fenced on the chunk it read, which a run's end outside a step also
        # writes (:meth:`~ackloop.store.runs.Runs.end_run_now`), so it cannot append after its
        # run ended.
        if composed.end is not None:
            writes += end_writes(self, basis.run.snapshot, conv, composed.end, now,
                                 also=decision.run_fields).writes
        elif decision.run_fields:
            # Fields no other writer changes while a model step runs (the time its run's
            # clock did not count: no call of the run waits then), written once with the
            # step's commit, which its claim fences; not fenced on the run, which a cancel
            # or an event may write meanwhile.
            writes.append(Write("update", self.run_path(run.run_id), decision.run_fields))
        update: JsonDict = {
            "status": StepStatus.COMPLETED.value,
            "completed_at": now,
            "result": result,
            "outbox": [o.to_doc() for o in composed.outbox],
            "lease_expires_at": 0.0,
            "last_error": composed.error,
            "cost": composed.cost.model_dump(mode="json"),
        }
        if composed.run_cost is not None:
            update["run_cost"] = composed.run_cost.model_dump(mode="json")
        usage = decision.step_usage
        if decision.child_usage is not None:  # a sub-agent's call: its child run's usage
            usage = (usage or Usage()).with_child(decision.child_usage)
        if usage is not None:
            update["usage"] = usage.model_dump(mode="json")
        if decision.call_seconds is not None:
            update["call_seconds"] = decision.call_seconds
        update |= _waited(decision)
        path = self.step_path(claim.run_id, claim.key)
        step_write = (Write("update", path, update, if_version=claim.version)
                      if claim.version is not None else
                      Write("create", path, claim.step.to_doc() | update | {"unclaimed": True}
                            | self._live_expiry(now)))
        return [step_write, *writes], Committed(composed.outbox, composed.end, composed.cost)

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


def _waited(decision: Decision) -> JsonDict:
    """The step fields of a wait met at once (:attr:`Decision.waited`), if the call met one."""
    if decision.waited is None:
        return {}
    waiting, resolved = decision.waited
    return {"waiting": waiting.to_doc(), "decision": resolved.to_doc()}
