"""Calls that wait, for a person or for a named event: the waiting commit, the decision,
and carrying it out.

A tool step whose call needs approval (``Tool.requires_approval``) or waits for an event
(``Tool.waits_for``) and has no decision yet records itself as ``waiting`` (what it waits for,
its deadline), gives its lease back and is acknowledged: while it waits no process runs, no
lease is renewed and nothing is redelivered. The same commit moves the run's ``progress_at``
(the sweeper's clock) to the deadline. An event's arrival is a decision like a person's
(``received``, with its payload: :mod:`ackloop.engine.events`); what follows is the same.

A decision is recorded on the step in one commit conditional on the step and the run as read
(:meth:`AgentStore.decide_step`: the first one wins), then the step's message, the model
step's committed outbox entry for it, is published again, so the step resumes through the
ordinary path and the ledger check holds. If that publish is lost, the decision moved the run's
``progress_at``, and the sweeper re-sends the message of a decided step that still waits once
the run has been idle for
``sweep_stale_seconds``. At the deadline the sweeper records a rejection the same way.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Literal

from ackloop.domain.errors import RunKeptChanging, StaleRead
from ackloop.domain.keys import StepKey
from ackloop.domain.records import (
    DEADLINE,
    Outgoing,
    ReceivedEvent,
    RunRecord,
    StepDecision,
    StepRecord,
    StepStatus,
    Waiting,
)
from ackloop.domain.wire import FunctionCall, WaitingNotice
from ackloop.engine import spend
from ackloop.engine.deps import Deps
from ackloop.engine.lease import ClaimRef
from ackloop.engine.outbox import send
from ackloop.store import DAY_SECONDS, Claim, DecisionRefused, RunRead
from ackloop.tools.base import ToolOutcome
from ackloop.tools.definition import Tool

log = logging.getLogger(__name__)

class WaitCancelled(Exception):
    """The run's cancel was requested before the step could record its wait: it does not
    wait, and its call is not made."""


CANCEL = "cancel"
"""Who decided the waiting steps of a run whose cancel was requested."""
WAIT_COMMIT_ATTEMPTS = 16
"""Waiting commits a step tries, reading the run again after each one a change of the run
refused. Each refusal is another writer's commit on the run (another call of the turn starting
or ending its wait, an event kept, a decision): a turn of parallel calls whose children end
while the others record their waits changes it several times in a few milliseconds."""


CHILD_EVENT_PREFIX = "child."
"""Events named so are a child run's end (:mod:`ackloop.engine.children`): the engine's own,
refused from callers. Defined here, with the wait, so that neither the wait nor the events
import the child runs' module."""


def is_child_event(name: str) -> bool:
    """Whether the event ``name`` is a child run's end, which a call of its parent waits for."""
    return name.startswith(CHILD_EVENT_PREFIX)


def find_tool(toolbox: object, name: str) -> Tool | None:
    """The :class:`Tool` called ``name`` in a toolset or a combination of toolboxes."""
    get = getattr(toolbox, "get", None)
    if callable(get):
        found = get(name)
        return found if isinstance(found, Tool) else None
    for part in getattr(toolbox, "parts", ()):
        if (found := find_tool(part, name)) is not None:
            return found
    return None


def sweep_at(deps: Deps, deadline: float, now: float) -> float:
    """The ``progress_at`` that makes the sweeper find a waiting run idle at ``deadline`` (it
    resumes runs idle for ``sweep_stale_seconds``), never before now."""
    return max(now, deadline - deps.settings.sweep_stale_seconds)


def look_at(deps: Deps, waiting: Waiting, now: float) -> float:
    """When the sweeper is to look at a run whose call waits so: at the wait's deadline; for a
    child run, at once (``sweep_stale_seconds`` from now, and again each time), since the
    child's end may be lost or refused (:func:`ackloop.engine.children.ended_children`)."""
    return now if waiting.clock_runs else sweep_at(deps, waiting.deadline, now)


@dataclass(frozen=True)
class Wait:
    """What a call waits for before it runs: a person's decision, or the event ``event``."""

    tool: Tool
    event: str | None = None
    """The awaited event's name; None: the call waits for a person's decision."""

    @property
    def kind(self) -> Literal["approval", "event"]:
        return "approval" if self.event is None else "event"

    @property
    def clock_runs(self) -> bool:
        """Whether the run's clock runs while the call waits: for its child run, whose work is
        the run's time; not for a person or a named event."""
        return self.event is not None and is_child_event(self.event)


def wait_timeout(deps: Deps, run: RunRecord, wait: Wait) -> float:
    """The wait's length: the shorter of the tool's and the run's, else the deployment's; never
    longer than the deployment's retention (``retention_days``), which every document the run
    resumes with outlives by at least a day and the longest run (a wait outlasting it would
    resume a turn whose model step and transcript Firestore had deleted meanwhile)."""
    own = (wait.tool.approval_timeout_seconds if wait.kind == "approval"
           else wait.tool.event_timeout_seconds)
    given = [t for t in (own, run.limits.approval_timeout_seconds) if t is not None]
    length = min(given) if given else deps.settings.approval_timeout_seconds
    if deps.settings.retention_days > 0:
        length = min(length, deps.settings.retention_days * DAY_SECONDS)
    return length


def wait_of(toolbox: object, call: FunctionCall) -> Wait | None:
    """What this call waits for before it runs, if anything.

    Raises :class:`ValueError` when the tool's function naming its event fails: the call
    then fails for the model rather than wait for an event nobody can name."""
    tool = find_tool(toolbox, call.name)
    if tool is None:
        return None
    if tool.needs_approval(call.args):
        return Wait(tool)
    event = tool.awaited_event(call.args)
    return Wait(tool, event) if event is not None else None


async def wait_for_decision(deps: Deps, ref: ClaimRef, read: RunRead, wait: Wait,
                            call: FunctionCall) -> ReceivedEvent | None:
    """Record the step as waiting and announce it; or, when the awaited event has already
    arrived, return it (the call runs at once; the wait it met is kept on ``ref`` for the
    step's commit to record: :func:`met_at_once`).

    The waiting commit is conditional on the run document as read, which an event's arrival
    rewrites (:meth:`AgentStore.receive_event`): an event that arrives between this read and
    the commit makes the commit fail, and the run read again has the event. A commit refused
    because the run changed for another reason (another call of the turn started waiting) is
    tried again on the run as it is now."""
    arrived = await _wait_or_arrived(deps, ref.claim, read, wait, call)
    if arrived is not None:
        ref.waited = met_at_once(deps, read.record, wait, call, arrived)
    return arrived


async def _wait_or_arrived(deps: Deps, claim: Claim, read: RunRead, wait: Wait,
                           call: FunctionCall) -> ReceivedEvent | None:
    now = deps.clock.now()
    for _ in range(WAIT_COMMIT_ATTEMPTS):
        run = read.record
        if run.cancel_requested:
            # A cancel landed after this step read the run (its commit refused the wait): the
            # cancel's own pass found the step running, not waiting, so it is the step that
            # must not wait (R1), or the run would wait for its deadline.
            raise WaitCancelled(f"run {claim.run_id} was cancelled")
        if wait.event is not None and (arrived := run.received.get(wait.event)) is not None:
            return await deps.store.event_payload(claim.run_id, wait.event, arrived)
        waiting = Waiting(kind=wait.kind, event=wait.event, tool=wait.tool.name,
                          args=call.args, since=now, deadline=now + wait_timeout(deps, run, wait),
                          clock_runs=wait.clock_runs)
        # A person or a sender is told of the wait; a call waiting for its child run is not
        # (nobody outside acts on it: the child's end resumes it).
        notices = [] if _for_child(waiting) else [_notice(run, claim.key, waiting)]
        cost = spend.spent(deps, model=None, usage=None, commit_writes=2, outbox=notices)
        try:
            await deps.store.wait_step(claim, waiting, read, look_at(deps, waiting, now), cost)
            break
        except StaleRead:
            fresh = await deps.store.read_run(claim.run_id)
            if fresh is None:
                return None
            read = fresh
    else:
        # Still the run's news first: the change that refused the last commit may be the event.
        if wait.event is not None and (arrived := read.record.received.get(wait.event)):
            return await deps.store.event_payload(claim.run_id, wait.event, arrived)
        raise RunKeptChanging(f"step {claim.key} of {claim.run_id}: the run kept changing "
                              "while the step recorded its wait", retry_after=1.0)
    log.info("run %s step %s waits for %s of %s until %.0f", claim.run_id, claim.key,
             f"event {wait.event!r}" if wait.event else "approval", wait.tool.name,
             waiting.deadline)
    if notices:
        await send(deps, claim.run_id, notices)
    return None


def met_at_once(deps: Deps, run: RunRecord, wait: Wait, call: FunctionCall,
                arrived: ReceivedEvent) -> tuple[Waiting, StepDecision]:
    """The record of a wait whose event had arrived before the call came to wait for it (a
    child that ended before its call's redelivery recorded the wait, an event sent early):
    what the step waited for and what resolved it, written with the step's result, so every
    call that waited has the same record on its step, however its wait was resolved."""
    now = deps.clock.now()
    waiting = Waiting(kind=wait.kind, event=wait.event, tool=wait.tool.name, args=call.args,
                      since=now, deadline=now + wait_timeout(deps, run, wait))
    return waiting, StepDecision(decision="received", payload=arrived.payload, by=arrived.by,
                                 at=now)


async def announce(deps: Deps, run: RunRecord, step_key: str, waiting: Waiting) -> None:
    """Publish the wait on the answers topic (again on every delivery that finds it), unless
    it waits for a child run."""
    if not _for_child(waiting):
        await send(deps, run.run_id, [_notice(run, step_key, waiting)])


def _for_child(waiting: Waiting) -> bool:
    return waiting.event is not None and is_child_event(waiting.event)


def _notice(run: RunRecord, step_key: str, waiting: Waiting) -> Outgoing:
    notice = WaitingNotice(run_id=run.run_id, request_id=run.request_id,
                           conversation_id=run.conversation_id, step=step_key,
                           waiting_for=waiting.kind, event_name=waiting.event, tool=waiting.tool,
                           args=waiting.args, deadline=waiting.deadline)
    return Outgoing(topic="answers", data=notice.model_dump(mode="json"))


def decided_call(call: FunctionCall, decision: StepDecision) -> FunctionCall:
    """The call to run once approved: with the edited arguments when the person gave some."""
    return call if decision.args is None else call.model_copy(update={"args": decision.args})


def deadline_rejection(now: float) -> StepDecision:
    """The decision the sweeper records for a wait past its deadline."""
    return StepDecision(decision="reject", by=DEADLINE, at=now)


async def reject_on_cancel(deps: Deps, run_id: str) -> None:
    """Reject the undecided waiting steps of a run whose cancel was requested: a cancel takes
    effect at the next step boundary, which a turn that waits would otherwise reach only at a
    decision or its deadline."""
    for step in await deps.store.list_steps(run_id):
        if step.status is StepStatus.WAITING and step.decision is None:
            with contextlib.suppress(DecisionRefused):  # decided meanwhile: that one stands
                await decide(deps, run_id, step.key, StepDecision(
                    decision="reject", by=CANCEL, comment="the run was cancelled",
                    at=deps.clock.now()))


def rejection(decision: StepDecision, waiting: Waiting | None = None) -> ToolOutcome:
    """What the model reads of a rejected call."""
    if decision.by == DEADLINE and waiting is not None and waiting.event is not None:
        text = f"not run: no {waiting.event!r} event before the deadline"
    elif decision.by == DEADLINE:
        text = "not run: no decision before the deadline"
    else:
        text = f"not run: rejected by {decision.by}"
    if decision.comment:
        text += f" ({decision.comment})"
    return ToolOutcome(response={"error": text}, is_error=True)


async def decide(deps: Deps, run_id: str, key: str, decision: StepDecision,
                 kind: Literal["approval", "event"] | None = None) -> tuple[StepRecord, bool]:
    """Record ``decision`` (:meth:`AgentStore.decide_step`; only on a wait of ``kind`` when
    given) and re-send the step's message.

    The message sent is the model step's committed outbox entry for the step; a duplicate of
    an already recorded decision sends it again too (the claim absorbs it)."""
    step, decided = await deps.store.decide_step(run_id, key, decision, kind)
    await resume(deps, run_id, step)
    return step, decided


async def resume(deps: Deps, run_id: str, step: StepRecord) -> None:
    """Send the committed message of a decided step."""
    (model_step,) = await deps.store.get_steps(run_id, [str(StepKey.model(step.turn))])
    entry = _entry(model_step, step.key)
    if entry is not None:
        await send(deps, run_id, [entry])


def _entry(model_step: StepRecord | None, key: str) -> Outgoing | None:
    if model_step is None:
        return None
    return next((o for o in model_step.outbox if o.target_step == key), None)

