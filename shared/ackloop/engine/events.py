"""Named events delivered to a run: ``POST /runs/{id}/events/{name}`` or the queries topic.

An event is kept on the run first (:meth:`AgentStore.receive_event`, one commit conditional on the
run as read: the
first event of a name wins, the same one again is recognised; the run document records who
sent it and its payload's digest, the payload goes to ``runs/{run_id}/events/{name}``, so no
number or size of events can grow the run document past Firestore's limit and leave the run
impossible to end), then every step waiting for
it is decided ``received`` with its payload and its message re-sent, exactly as a person's
approval resumes a step (:mod:`ackloop.engine.approval`). Either half may be lost to a crash:

- an event kept before any call waits for it is found by the call, which runs at once (the
  waiting commit is conditional on the run document the event rewrote, so the two cannot
  pass each other);
- an event kept whose waiting steps were not decided yet moved the run's ``progress_at``: the
  sweeper finds the run idle and decides them (:func:`decide_arrived`);
- a decided step whose message was lost is re-sent by the sweeper, as for an approval.

Delivering the same event again repeats the second half, so a client or a Pub/Sub redelivery
that is unsure whether it got through simply sends it again.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

from ackloop.domain.records import (
    DEADLINE,
    ReceivedEvent,
    RunRecord,
    StepDecision,
    StepRecord,
    StepStatus,
)
from ackloop.engine import approval
from ackloop.engine.deps import Deps
from ackloop.store import DecisionRefused
from ackloop.telemetry import tracing

log = logging.getLogger(__name__)

PUBSUB = "pubsub"
"""Who sent an event published to the queries topic. Its publishers act as ``anonymous``, as
the queries they publish do, so such an event reaches only the runs of ``anonymous`` (those
started on the topic); a run that an API caller owns is missing for it."""


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
    their deadline (:meth:`AgentStore.decide_step`), not run with it."""


async def deliver(deps: Deps, run_id: str, name: str, event: ReceivedEvent,
                  owner: str | None = None, *, internal: bool = False,
                  step: str | None = None) -> Delivered:
    """Keep the event on the run, then resume the steps waiting for it. ``owner``: the caller
    the sender acts as; another owner's run is missing for them. ``internal``: the engine's
    own event (a child run's end), whose names no caller may use. ``step``: the one step that
    can wait for it (a child's call), read alone instead of every step of the run.

    Raises :class:`DecisionRefused` (404 missing run, or another owner's; 409 ended run,
    another event of the name, or too many names; 422 a name reserved for the engine)."""
    if not internal and approval.is_child_event(name):
        raise DecisionRefused(422, "reserved_event", (
            f"event names starting with {approval.CHILD_EVENT_PREFIX!r} are the engine's (a child "
            "run's end): choose another name"))
    kept, recorded, run = await deps.store.receive_event(run_id, name, event, owner)
    log.info("run %s %s event %r from %s", run_id, "received" if recorded else
             "received again", name, kept.by)
    with tracing.run_context(run_id, run.trace_id):
        steps = ([s for s in await deps.store.get_steps(run_id, [step]) if s is not None]
                 if step is not None else await deps.store.list_steps(run_id))
        decided = await resume_waiting(deps, run_id, name, kept, steps)
    return Delivered(kept, recorded, [s.key for s in decided],
                     [s.key for s in decided if s.decision and s.decision.by == DEADLINE])


async def resume_waiting(deps: Deps, run_id: str, name: str, event: ReceivedEvent,
                         steps: list[StepRecord]) -> list[StepRecord]:
    """Decide the steps waiting for ``name`` as received (a step decided already keeps its
    decision; one past its deadline is rejected as at it) and re-send their messages; those
    steps, with their decisions."""
    resumed: list[StepRecord] = []
    for step in steps:
        waiting = step.waiting
        if (step.status is not StepStatus.WAITING or waiting is None
                or waiting.kind != "event" or waiting.event != name):
            continue
        if step.decision is None:
            decision = StepDecision(decision="received", payload=event.payload, by=event.by,
                                    at=deps.clock.now())
            with contextlib.suppress(DecisionRefused):  # decided meanwhile: that one stands
                step, _ = await deps.store.decide_step(run_id, step.key, decision, "event")
        await approval.resume(deps, run_id, step)
        resumed.append(step)
    return resumed


async def decide_arrived(deps: Deps, run: RunRecord, steps: list[StepRecord]) -> list[str]:
    """For the sweeper: the undecided steps waiting for an event the run has received (the
    delivery that kept it stopped before deciding them), decided and re-sent; their keys."""
    names = {s.waiting.event for s in steps
             if s.status is StepStatus.WAITING and s.decision is None and s.waiting is not None
             and s.waiting.event is not None and s.waiting.event in run.received}
    resumed: list[str] = []
    for name in sorted(names):
        try:
            event = await deps.store.event_payload(run.run_id, name, run.received[name])
        except DecisionRefused:
            continue  # its payload is gone: the waiting call's deadline rejects it
        resumed += [s.key for s in await resume_waiting(
            deps, run.run_id, name, event, [s for s in steps if s.decision is None])]
    return resumed
