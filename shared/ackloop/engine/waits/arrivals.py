"""What a waiting call waits for, arriving: a named event, or a child run's end.

**A named event** (``POST /runs/{id}/events/{name}`` or an
:class:`~ackloop.domain.wire.EventMessage`
on the queries topic) is kept on the run first (:meth:`Waits.receive_event`: the first
event of a name wins, the same one again is recognised; the payload goes to
``runs/{run_id}/events/{name}``), since it may come before any call waits for it; then every
step waiting for it is resolved ``received`` and re-sent (:func:`core.resolve_if_waiting`).
Either half may be lost to a crash: a call that comes to wait later finds the event kept and
runs at once; a kept event whose waiting steps were not resolved is the sweeper's
(:func:`core.sweep_waits`: it moved the run's ``progress_at``). Delivering it again repeats
the second half.

**A child's end** (:class:`~ackloop.domain.wire.ChildEndedMessage`, on the queries topic) is read
from
the child's record and resolves the one call that waits for it: that call's step document
alone is written, never its parent's run, so a parent's children ending together do not
contend on one document. A call that has not recorded its wait yet (its tool step holds the
step, whose commits are conditional on its version) is not written: the message is delivered
again (:class:`NotWaitingYet`), the call may take the end at once when it finds its child
ended, and the sweeper's look at a run waiting for a child is the net.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ackloop.domain.errors import RetryableError
from ackloop.domain.records import (
    CHILD_EVENT_PREFIX,
    DEADLINE,
    ReceivedEvent,
    RunRecord,
    StepDecision,
    StepRecord,
    StepStatus,
)
from ackloop.engine import children, ending
from ackloop.engine.deps import Deps
from ackloop.engine.waits import core
from ackloop.engine.waits.kinds import child_end
from ackloop.store import DecisionRefused
from ackloop.telemetry import tracing

log = logging.getLogger(__name__)

PUBSUB = "pubsub"
"""Who sent an event published to the queries topic. Its publishers act as ``anonymous``, as
the queries they publish do, so such an event reaches only the runs of ``anonymous`` (those
started on the topic); a run that an API caller owns is missing for it."""


class NotWaitingYet(RetryableError):
    """A child's end came before its call recorded its wait: delivered again later."""


@dataclass(frozen=True)
class Delivered:
    event: ReceivedEvent
    """The event the run keeps under the name (the earlier one, for a repeat)."""
    recorded: bool
    """False when the run had received this very event already."""
    resumed: list[str]
    """The keys of the steps the event resumed (or re-sent, for a repeat)."""
    too_late: list[str] = field(default_factory=list)
    """Those of them that waited past their deadline before it came: they are rejected as at
    their deadline (:meth:`Waits.decide_step`), not run with it."""


async def deliver(deps: Deps, run_id: str, name: str, event: ReceivedEvent,
                  owner: str | None = None) -> Delivered:
    """Keep the event on the run, then resume the steps waiting for it. ``owner``: the caller
    the sender acts as; another owner's run is missing for them.

    Raises :class:`DecisionRefused` (``not_found``: a missing run, or another owner's;
    ``run_ended``, ``already_received``, ``too_many_events``; ``reserved_event``: a name
    reserved for the engine)."""
    if name.startswith(CHILD_EVENT_PREFIX):
        raise DecisionRefused("reserved_event", (
            f"event names starting with {CHILD_EVENT_PREFIX!r} are the engine's (a child "
            "run's end): choose another name"))
    kept, recorded, run = await deps.store.waits.receive_event(run_id, name, event, owner)
    log.info("run %s %s event %r from %s", run_id, "received" if recorded else
             "received again", name, kept.by)
    resumed: list[StepRecord] = []
    with tracing.run_context(run_id, run.trace_id):
        for step in await deps.store.steps.list_steps(run_id):
            waiting = step.waiting
            if (step.status is not StepStatus.WAITING or waiting is None
                    or waiting.kind != "event" or waiting.event != name):
                continue
            resumed.append(await core.resolve_if_waiting(deps, run_id, step, StepDecision(
                decision="received", payload=kept.payload, by=kept.by, at=deps.clock.now())))
    return Delivered(kept, recorded, [s.key for s in resumed],
                     [s.key for s in resumed if s.decision and s.decision.by == DEADLINE])


async def deliver_end(deps: Deps, child_id: str, here: core.CarryOn | None = None
                      ) -> dict[str, Any]:
    """The handler of a :class:`~ackloop.domain.wire.ChildEndedMessage`: the child's end, read from
    its record, resolves the call of its parent that waits for it (its step alone). ``here``:
    the call is carried on in this request (:func:`core.carry_on`) instead of by a message of
    its own; the call's step then holds this delivery's message id, so that a redelivery after
    this request died carries it on again.

    Raises :class:`NotWaitingYet` while that call has not recorded its wait."""
    child = await deps.store.runs.get_run(child_id)
    if child is None or child.parent_run_id is None or child.parent_step is None:
        return {"run_id": child_id, "ignored": "not a child run"}
    if not child.status.terminal:
        return {"run_id": child_id, "ignored": f"the child is {child.status.value}"}
    if not children.has_ended(child):  # its figures are not final: sent again once they are
        return {"run_id": child_id, "ignored": "its own children are ending"}
    parent_id, key = child.parent_run_id, child.parent_step
    found = {"run_id": child_id, "parent": parent_id, "step": key}
    (step,) = await deps.store.steps.get_steps(parent_id, [key])
    if here is not None and step is not None and step.message_id == here.message_id:
        # This message carried the call on before, and its request died: again (the step's
        # claim, or its completed record and what it sends, take it from there).
        await core.carry_on(deps, parent_id, step, here)
        return found | {"carried_on": key}
    if step is None or step.status is StepStatus.COMPLETED:
        return found | {"ignored": "its call has ended"}
    if step.status is not StepStatus.WAITING:
        if step.decision is not None:  # a repeat of an end its call has taken and runs with
            return found | {"ignored": "its call has taken its end"}
        parent = await deps.store.runs.get_run(parent_id)
        if parent is None or parent.status.terminal:  # nobody will come to wait for it
            await count_late(deps, parent_id, child)
            return found | {"refused": "run_ended"}
        raise NotWaitingYet(f"run {parent_id} step {key} has not recorded its wait for its "
                            f"child {child_id} yet", retry_after=1.0)
    try:
        resolved, decided = await core.resolve(deps, parent_id, key, child_end(deps, child),
                                               "child", here)
    except DecisionRefused as exc:  # the parent ended, or the call was decided otherwise
        log.info("child run %s ended; its parent %s did not take it: %s", child_id,
                 parent_id, exc)
        if exc.reason == "already_decided":
            await core.resend(deps, parent_id, step)
        elif exc.reason == "run_ended":
            await count_late(deps, parent_id, child)
        return found | {"refused": exc.reason}
    return found | {"recorded": decided, "resumed": [resolved.key]}


async def count_late(deps: Deps, parent_id: str, child: RunRecord) -> None:
    """A child's end refused by its parent, ended outside a step while the child still
    worked: its figures are added to the parent's usage and cost, once
    (:meth:`Runs.count_late_child`); the last of them makes the parent's end final,
    which is sent again, for its own caller to take (or count late in turn)."""
    counted = await deps.store.runs.count_late_child(parent_id, child.run_id, child.usage,
                                                     child.cost)
    if counted is not None and not counted.children_ending:
        log.info("run %s counted the end of child %s, which came after its own end",
                 parent_id, child.run_id)
        await ending.publish_end(deps, counted)
