"""The mechanism of a call that waits, whatever it waits for (:mod:`.kinds`).

**Begin.** A tool step whose call waits and has no resolution yet records itself ``waiting``
(its :class:`~ackloop.domain.records.Waiting`: kind, name, deadline), gives its lease back and is
acknowledged: while it waits no process runs, no lease is renewed and nothing is
redelivered. When what it waits for has already arrived at its source (an event kept on the
run, a child that has ended), the call takes it at once and the wait it met is recorded with
its result (:func:`met_at_once`). A wait that keeps its clock on the run (a person's, an
event's) moves the run's ``progress_at`` (the sweeper's clock) to its deadline in the same
commit, conditional on the run as read; a child's writes its step alone (a parent's run
document is never written per child).

**Resolve.** A resolution (approve, reject, received) is recorded on the step, the first one
wins (:meth:`Waits.decide_step`), then the step's message, the model step's committed
outbox entry for it, is sent again: the step resumes through the ordinary path and the
ledger check holds.

**The sweeper's pass** (:func:`sweep_waits`), for every kind alike: the waits of a run whose
cancel was requested are rejected (``by`` ``cancel``) and what they wait for abandoned;
a wait whose awaited thing has arrived but is unresolved is resolved; a wait past its deadline
is rejected (``by`` ``deadline``). A decided step that still waits (its re-send was lost)
is re-sent by the sweeper's ledger pass.

**Cancel and ends.** Cancelling a run ends its waits and abandons what each waits for (a
child is cancelled in turn: cancel goes down the tree, and a child's end goes up as its call's
resolution, which the call waits for: :func:`end_wait`); a run that ends any other way abandons
them too (:func:`abandon_all`), and counts what its calls' children spend until their ends
(:func:`counted_at_end`). A call that ends counts what its wait spent (:func:`counted`: a
child's usage and cost, however the call ended).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ackloop.domain.errors import RunKeptChanging, StaleRead
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import (
    DEADLINE,
    Outgoing,
    RunRecord,
    RunStatus,
    StepDecision,
    StepRecord,
    StepStatus,
    Waiting,
    WaitKindName,
)
from ackloop.domain.wire import FunctionCall, WaitingNotice
from ackloop.engine import spend
from ackloop.engine.deps import Deps
from ackloop.engine.lease import ClaimRef
from ackloop.engine.outbox_sending import committed_message, send
from ackloop.engine.waits.kinds import Wait, kind_of, unrecorded
from ackloop.store import DAY_SECONDS, Claim, DecisionRefused, RunRead

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class CarryOn:
    """Runs a step's committed message in the request at hand (:func:`carry_on`), as the
    delivery of ``message_id``: the message a step it carries on then holds."""

    message_id: str
    run: Callable[[Outgoing], Awaitable[None]]

CANCEL = "cancel"
"""Who decided the waiting steps of a run whose cancel was requested."""
WAIT_COMMIT_ATTEMPTS = 16
"""Waiting commits a step tries, reading the run again after each one a change of the run
refused (a wait that writes the run: another call of the turn starting or ending its wait, an
event kept, a decision)."""


class WaitCancelled(Exception):
    """The run's cancel was requested before the step could record its wait: it does not
    wait, and its call is not made."""


def sweep_at(deps: Deps, deadline: float, now: float) -> float:
    """The ``progress_at`` that makes the sweeper find a waiting run idle at ``deadline`` (it
    resumes runs idle for ``sweep_stale_seconds``), never before now."""
    return max(now, deadline - deps.settings.sweep_stale_seconds)


def look_at(deps: Deps, waiting: Waiting, now: float) -> float:
    """When the sweeper is to look at a run whose call waits so: at the wait's deadline; for a
    wait whose clock runs (a child), at once (``sweep_stale_seconds`` from now, and again each
    time), since its resolution may be lost or refused and nothing else moves the run."""
    return now if waiting.clock_runs else sweep_at(deps, waiting.deadline, now)


def wait_timeout(deps: Deps, run: RunRecord, wait: Wait) -> float:
    """The wait's length: the shorter of the tool's and the run's, else the deployment's; never
    longer than the deployment's retention (``retention_days``), which every document the run
    resumes with outlives by at least a day and the longest run (a wait outlasting it would
    resume a turn whose model step and transcript Firestore had deleted meanwhile)."""
    if wait.seconds is not None:  # a call that sleeps: its own length
        return wait.seconds
    given = [t for t in (wait.kind.timeout(wait.tool), run.limits.approval_timeout_seconds)
             if t is not None]
    length = min(given) if given else deps.settings.approval_timeout_seconds
    if deps.settings.retention_days > 0:
        length = min(length, deps.settings.retention_days * DAY_SECONDS)
    return length


def sleeps_too_long(deps: Deps, wait: Wait) -> str | None:
    """Why a call may not sleep that long, if it may not: past the deployment's retention
    (``retention_days``), the documents it would resume with are gone."""
    keeps = deps.settings.retention_days * DAY_SECONDS
    if wait.seconds is None or deps.settings.retention_days <= 0 or wait.seconds <= keeps:
        return None
    return (f"it would sleep {wait.seconds:.0f} s, longer than this deployment keeps a run "
            f"({deps.settings.retention_days} days: retention_days)")


def _waiting(deps: Deps, run: RunRecord, key: str, wait: Wait, call: FunctionCall,
             now: float) -> Waiting:
    deadline = now + wait_timeout(deps, run, wait)
    return Waiting(kind=wait.kind.name, event=wait.named(key), tool=wait.tool.name,
                   args=call.args, since=now, deadline=deadline,
                   wake_at=deadline if wait.seconds is not None else None,
                   clock_runs=wait.kind.clock_runs)


async def begin(deps: Deps, ref: ClaimRef, read: RunRead, wait: Wait,
                call: FunctionCall, *, found: StepDecision | None = None,
                looked: bool = False) -> StepDecision | None:
    """Record the step as waiting and announce it; or, when what it waits for has already
    arrived, return its resolution (the call goes on at once; the wait it met is kept on
    ``ref`` for the step's commit to record: :func:`met_at_once`).

    A wait that writes the run commits conditional on the run document as read, which an
    event's arrival or a cancel rewrites: the run read again has the event, or the cancel. A
    child's wait writes its step alone: a child that ends meanwhile finds the step not yet
    waiting and is delivered again (or swept), and a cancel that lands meanwhile is the
    sweeper's to find. Raises :class:`WaitCancelled` when the run's cancel came first.

    ``looked``: the caller has just read what the call waits for (a sub-agent's call, the
    child it started or found), and ``found`` is what it found there: the first look is not
    made again."""
    met = await _wait_or_met(deps, ref.claim, read, wait, call,
                             first_look=(found,) if looked else None)
    if met is not None:
        ref.waited = met_at_once(deps, read.record, ref.claim.key, wait, call, met)
    return met


async def _wait_or_met(deps: Deps, claim: Claim, read: RunRead, wait: Wait,
                       call: FunctionCall, despite_cancel: bool = False,
                       first_look: tuple[StepDecision | None] | None = None
                       ) -> StepDecision | None:
    now = deps.clock.now()
    kind = wait.kind
    for _ in range(WAIT_COMMIT_ATTEMPTS):
        run = read.record
        if run.cancel_requested and not despite_cancel:
            # A cancel landed after this step read the run (its commit refused the wait): the
            # cancel's own pass found the step running, not waiting, so it is the step that
            # must not wait, or the run would wait for its deadline.
            raise WaitCancelled(f"run {claim.run_id} was cancelled")
        waiting = _waiting(deps, run, claim.key, wait, call, now)
        if first_look is not None:  # the caller's look, this once
            (met,), first_look = first_look, None
        else:
            met = await kind.arrived(deps, run, claim.key, waiting)
        if met is not None:
            return met
        notices = [notice(run, claim.key, waiting)] if kind.announced else []
        cost = spend.spent(deps, model=None, usage=None,
                           commit_writes=1 if kind.clock_runs else 2, outbox=notices)
        try:
            await deps.store.waits.wait_step(claim, waiting, None if kind.clock_runs else read,
                                             look_at(deps, waiting, now), cost)
            break
        except StaleRead:
            fresh = await deps.store.runs.read_run(claim.run_id)
            if fresh is None:
                return None
            read = fresh
    else:
        # Still the run's news first: the change that refused the last commit may be the event.
        if (met := await kind.arrived(deps, read.record, claim.key, waiting)) is not None:
            return met
        raise RunKeptChanging(f"step {claim.key} of {claim.run_id}: the run kept changing "
                              "while the step recorded its wait", retry_after=1.0)
    log.info("run %s step %s waits for %s %s of %s until %.0f", claim.run_id, claim.key,
             kind.name, waiting.event or "", wait.tool.name, waiting.deadline)
    if notices:
        await send(deps, claim.run_id, notices)
    await kind.arm(deps, read.record, claim.key, waiting)
    if kind.clock_runs:
        await _arrived_meanwhile(deps, claim, read.record, waiting)
    return None


async def _arrived_meanwhile(deps: Deps, claim: Claim, run: RunRecord, waiting: Waiting
                             ) -> None:
    """A wait not fenced on the run (a child's) looks once more, now that it is recorded: what
    arrived between its first look and its commit found the step not yet waiting and was
    sent back for redelivery, which would come only after Pub/Sub's backoff. Either that
    delivery finds the step waiting, or this look finds the arrival (the first resolution
    wins; the other re-sends, which the claim absorbs)."""
    if (met := await kind_of(waiting).arrived(deps, run, claim.key, waiting)) is not None:
        with contextlib.suppress(DecisionRefused):
            await resolve(deps, claim.run_id, claim.key, met)


def met_at_once(deps: Deps, run: RunRecord, key: str, wait: Wait, call: FunctionCall,
                met: StepDecision) -> tuple[Waiting, StepDecision]:
    """The record of a wait whose resolution had arrived before the call came to wait for it
    (a child that ended before its call's redelivery recorded the wait, an event sent early):
    what the step waited for and what resolved it, written with the step's result, so every
    call that waited has the same record on its step, however its wait was resolved."""
    return _waiting(deps, run, key, wait, call, deps.clock.now()), met


async def announce(deps: Deps, run: RunRecord, step_key: str, waiting: Waiting) -> None:
    """Publish the wait on the answers topic (again on every delivery that finds it), when
    its kind is announced."""
    if kind_of(waiting).announced:
        await send(deps, run.run_id, [notice(run, step_key, waiting)])


async def delivered_again(deps: Deps, run: RunRecord, step: StepRecord) -> None:
    """A delivery of a step that waits, undecided (a re-send, a redelivery, a wake): when what
    it waits for has arrived (its time has come, an event or a child's end whose own delivery
    was lost), it is resolved and its message sent again, for that delivery to run it; else
    the wait is announced and armed again (a wake that came before its time: a wait longer
    than the waker holds at once)."""
    waiting = step.waiting
    assert waiting is not None
    kind = kind_of(waiting)
    if (met := await kind.arrived(deps, run, step.key, waiting)) is not None:
        await resolve_if_waiting(deps, run.run_id, step, met)
        return
    await announce(deps, run, step.key, waiting)
    await kind.arm(deps, run, step.key, waiting)


def notice(run: RunRecord, step_key: str, waiting: Waiting) -> Outgoing:
    told = WaitingNotice(run_id=run.run_id, request_id=run.request_id,
                         conversation_id=run.conversation_id, step=step_key,
                         waiting_for=kind_of(waiting).shown_as,
                         event_name=waiting.event, tool=waiting.tool, args=waiting.args,
                         deadline=waiting.deadline)
    return Outgoing(topic="answers", data=told.model_dump(mode="json"))


def deadline_rejection(now: float) -> StepDecision:
    """The decision the sweeper records for a wait past its deadline."""
    return StepDecision(decision="reject", by=DEADLINE, at=now)


def cancel_rejection(now: float) -> StepDecision:
    """The decision recorded for the waits of a run whose cancel was requested."""
    return StepDecision(decision="reject", by=CANCEL, comment="the run was cancelled", at=now)


async def resolve(deps: Deps, run_id: str, key: str, decision: StepDecision,
                  kind: WaitKindName | None = None, here: CarryOn | None = None
                  ) -> tuple[StepRecord, bool]:
    """Record ``decision`` (:meth:`Waits.decide_step`; only on a wait of ``kind`` when
    given) and re-send the step's message, or carry the step on ``here`` (:func:`carry_on`);
    a duplicate of an already recorded decision does it again too (the claim absorbs it)."""
    try:
        step, decided = await deps.store.waits.decide_step(run_id, key, decision, kind)
    except DecisionRefused as exc:
        if isinstance(exc.waiting, Waiting):  # it waits for another kind: say so in its words
            raise DecisionRefused(exc.reason, f"step {key} waits for "
                                  f"{kind_of(exc.waiting).awaits(run_id, exc.waiting)}") from exc
        raise
    await (resend(deps, run_id, step) if here is None else carry_on(deps, run_id, step, here))
    return step, decided


async def resolve_if_waiting(deps: Deps, run_id: str, step: StepRecord,
                             decision: StepDecision) -> StepRecord:
    """Resolve ``step`` unless it was decided meanwhile (that one stands; it is re-sent);
    the step as it is then."""
    if step.decision is None:
        with contextlib.suppress(DecisionRefused):
            step, _ = await deps.store.waits.decide_step(run_id, step.key, decision)
    await resend(deps, run_id, step)
    return step


async def resend(deps: Deps, run_id: str, step: StepRecord) -> None:
    """Send the committed message of a decided step."""
    if (entry := await committed_message(deps, run_id, step.key)) is not None:
        await send(deps, run_id, [entry])


async def carry_on(deps: Deps, run_id: str, step: StepRecord, here: CarryOn) -> None:
    """Run the committed message of a decided step in this request (``here``) instead of
    sending it: what a child's end resolves has nothing left to call (the call takes the
    end), so a Pub/Sub hop and a delivery are saved on every child. The request that does it
    is the net: it is not acknowledged before the step's commit and its send, and its
    redelivery carries the step on again (the step then holds this message's id)."""
    if (entry := await committed_message(deps, run_id, step.key)) is not None:
        await here.run(entry)


def undecided(step: StepRecord) -> bool:
    """Whether ``step`` waits and nothing has resolved it yet."""
    return step.status is StepStatus.WAITING and step.decision is None and (
        step.waiting is not None)


async def sweep_waits(deps: Deps, run: RunRecord, steps: list[StepRecord], now: float
                      ) -> str | None:
    """The sweeper's pass over ``run``'s waits, the same for every kind: what it did, or None.

    A run whose cancel was requested has its waits rejected (the cancel landed while a call
    recorded a wait that does not read the run, or the cancel's own pass was lost); a wait
    whose awaited thing has arrived (its delivery was lost, dead-lettered, or refused while
    the run had ended, before a redrive reopened it) is resolved with it; a wait past its
    deadline is rejected."""
    waiting = [s for s in steps if undecided(s)]
    if not waiting:
        return None
    if run.cancel_requested:
        await cancel_waits(deps, run, waiting)
        return f"its cancel rejected {', '.join(s.key for s in waiting)}"
    arrived = []
    for step in waiting:
        assert step.waiting is not None
        met = await kind_of(step.waiting).arrived(deps, run, step.key, step.waiting)
        if met is not None:
            await resolve_if_waiting(deps, run.run_id, step, met)
            arrived.append(step.key)
    if arrived:
        return f"what they waited for had arrived: {', '.join(arrived)}"
    overdue = [s for s in waiting if s.waiting is not None and s.waiting.deadline <= now]
    for step in overdue:
        await end_wait(deps, run, step, deadline_rejection(now))
    return f"no decision before the deadline: {', '.join(s.key for s in overdue)}" if (
        overdue) else None


async def cancel_waits(deps: Deps, run: RunRecord, steps: list[StepRecord]) -> None:
    """Reject the undecided waits among ``steps`` of a run whose cancel was requested (a
    cancel takes effect at the next step boundary, which a turn that waits would otherwise
    reach only at a resolution or its deadline), and abandon what each waited for."""
    ending = [s for s in steps if undecided(s)]
    for step in ending:
        await end_wait(deps, run, step, cancel_rejection(deps.clock.now()))
    await abandon_all(deps, run, [s for s in steps if all(s.key != e.key for e in ending)])


async def end_wait(deps: Deps, run: RunRecord, step: StepRecord, rejection: StepDecision
                   ) -> None:
    """End ``step``'s undecided wait (its run's cancel, or its deadline): with what it waits
    for when that has arrived; else what it waits for is abandoned and, when that is still
    ending (a child being cancelled), the call goes on waiting for it, and its end resolves
    the call with its final figures (a late end is recorded as a rejection at the deadline,
    keeping them: :meth:`Waits.decide_step`), so nothing the child records afterwards,
    nor its own children's spend, is lost to its root's ledger; else ``rejection``."""
    assert step.waiting is not None
    met = await kind_of(step.waiting).arrived(deps, run, step.key, step.waiting)
    if met is None and await abandon(deps, run, step):
        return
    await resolve_if_waiting(deps, run.run_id, step, met or rejection)


async def abandon_all(deps: Deps, run: RunRecord, steps: list[StepRecord]) -> list[str]:
    """End what the calls of ``run`` wait for, whose caller no longer waits (the run was
    cancelled or ended any other way: a child whose caller has ended would run, and spend,
    for nobody); the keys of the calls whose wait abandoned something."""
    done = []
    for step in steps:
        if await abandon(deps, run, step):
            done.append(step.key)
    return done


async def abandon(deps: Deps, run: RunRecord, step: StepRecord) -> bool:
    """What ending ``step``'s wait without its resolution does, per its kind (a child is
    cancelled); True if it ended something. A call that has not recorded its wait may have
    started what it waits for (a sub-agent's call killed between starting its child and
    recording its wait): that is found by the kind the call's tool waits with."""
    kind = kind_of(step.waiting) if step.waiting is not None else unrecorded(deps, step)
    return kind is not None and await kind.abandon(deps, run, step.key, cancel_tree)


async def cancel_tree(deps: Deps, run_id: str) -> RunRecord | None:
    """Ask ``run_id`` to stop and, if it runs, reject its waits and abandon what they wait
    for (its own children in turn). A child is never queued (its conversation is its own)."""
    requested = await deps.store.runs.request_cancel(run_id)
    if requested is not None and requested.status is RunStatus.RUNNING:
        await cancel_waits(deps, requested, await deps.store.steps.list_steps(run_id))
    return requested


async def counted(deps: Deps, run: RunRecord, step: StepRecord,
                  wait: Wait | None = None) -> JsonDict | None:
    """What a call that ends counts of what it waited for, however it ends (a child's end,
    or what the child spent so far); None when its wait spends nothing of its own. ``wait``:
    what the call waits for, when it ends before recording its wait."""
    kind = kind_of(step.waiting) if step.waiting is not None else (
        wait.kind if wait is not None else unrecorded(deps, step))
    if kind is None:
        return None
    return await kind.spent(deps, run, step.key, step.decision)


async def counted_at_end(deps: Deps, run: RunRecord, step: StepRecord
                         ) -> tuple[JsonDict | None, str | None]:
    """What a call of a run ended outside a step counts: what it waited for, when that has
    arrived or ended (:func:`counted`); else, while what it waits for is still to end on its
    own (a child, then cancelled), nothing now and that run's id: its end adds its figures to
    the ended run (``RunRecord.children_ending``)."""
    kind = kind_of(step.waiting) if step.waiting is not None else unrecorded(deps, step)
    if kind is None:
        return None, None
    if step.decision is None or step.decision.payload is None:
        ending = await kind.ending(deps, run, step.key)
        if ending is not None:
            return None, ending
    return await kind.spent(deps, run, step.key, step.decision), None


async def wind_down(deps: Deps, ref: ClaimRef, read: RunRead, wait: Wait,
                    call: FunctionCall) -> tuple[bool, JsonDict | None]:
    """A call whose run's cancel was requested before it recorded its wait (the fan-out came
    after the cancel, or a redelivery after a kill between starting its child and recording
    the wait): what it waits for is abandoned and, when that is still ending (a child being
    cancelled), the call records its wait all the same, for that end to resolve it with its
    final figures (True). Else what it counts (its resolution's, or what it waited for)."""
    claim = ref.claim
    run = read.record
    if claim.step.decision is None and await wait.kind.abandon(deps, run, claim.key,
                                                               cancel_tree):
        met = await _wait_or_met(deps, claim, read, wait, call, despite_cancel=True)
        if met is None:
            return True, None
        ref.waited = met_at_once(deps, run, claim.key, wait, call, met)
        return False, await wait.kind.spent(deps, run, claim.key, met)
    return False, await counted(deps, run, claim.step, wait)


async def forsake(deps: Deps, run: RunRecord, step: StepRecord, wait: Wait
                  ) -> JsonDict | None:
    """A call that ends without its resolution (rejected, or its run cancelled before it
    recorded its wait): what it waits for is abandoned (a child cancelled), and what that
    spent is counted."""
    await wait.kind.abandon(deps, run, step.key, cancel_tree)
    return await counted(deps, run, step, wait)
