"""The sweeper: a safety net for runs that stopped moving.

Pub/Sub redelivers whatever was not acknowledged, so a run stops moving only when a message that
should exist does not: a publish lost after its commit with no redelivery to repeat it (the
HTTP API committed a run and then could not publish), a dead letter re-driven into a step that
has nothing left to send, a queued run whose start message was lost. The sweeper finds runs
with no progress for ``sweep_stale_seconds`` (a run's ``progress_at`` moves when it starts, waits
or is decided, and when the sweeper finds a step of it live: steps do not write the run) and
resumes each one *from its ledger*: it works out
which step message the run needs next and publishes it again. The step's claim turns any
duplicate into a no-op, so sweeping a healthy run costs a message, never a second execution.
A run the ledger cannot resume is failed with the cause (and its end is published).

A run whose steps wait is not stalled. Its waits get one pass, the same for every kind of
wait (:func:`ackloop.engine.waits.core.sweep_waits`): a run whose cancel was requested has
its waits rejected; a wait whose awaited thing has arrived (an event the run keeps, a child run
that has ended: its delivery was lost, dead-lettered or refused) is resolved with it; a wait
past its deadline is rejected ("no decision before the deadline"). A person's or an event's
wait moved the run's ``progress_at`` to its deadline, so the sweeper first sees the run then;
a child's wait writes no run document, and a run waiting for a child is looked at every
``sweep_stale_seconds``. The sweeper also re-sends a decided step that still waits (its
re-send after the decision was lost) once the run is ``sweep_stale_seconds`` idle, and
otherwise moves ``progress_at`` to the earliest time a wait asks for.

It also makes the schedules' pass (:func:`ackloop.engine.schedule_control.sweep_schedules`): the
catalog's schedules synced, and a schedule due with no wake delivered fired.

It runs from ``ackloop runs sweep``, from ``POST /sweep`` on the API (Cloud Scheduler calls it;
see ``infra/scheduler.tf``), and from the local stack.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from ackloop.domain.keys import StepKey
from ackloop.domain.records import (
    Outgoing,
    RunRecord,
    RunStatus,
    StepRecord,
    StepStatus,
    StopReason,
)
from ackloop.domain.wire import ToolStepMessage, Usage
from ackloop.engine.deps import Deps
from ackloop.engine.ending import end_run_now, run_end
from ackloop.engine.ledger import scheduled_model_message
from ackloop.engine.outbox_entries import after_tools, first_step
from ackloop.engine.outbox_sending import send
from ackloop.engine.schedule_control import sweep_schedules
from ackloop.engine.waits import core as waits
from ackloop.telemetry import tracing

log = logging.getLogger(__name__)

Action = Literal["resumed", "failed", "progressing", "started", "waiting"]


@dataclass(frozen=True)
class Swept:
    """What the sweeper did to one run."""

    run_id: str
    action: Action
    detail: str


async def sweep(deps: Deps, *, stale_after: float | None = None, limit: int = 200) -> list[Swept]:
    """Resume (or fail) every running run idle for ``stale_after`` seconds, and start queued
    runs whose conversation has no active run. Idempotent; safe to run concurrently."""
    stale_after = deps.settings.sweep_stale_seconds if stale_after is None else stale_after
    threshold = deps.clock.now() - stale_after
    swept: list[Swept] = []
    for run in await deps.store.runs.runs_in_status(RunStatus.RUNNING, "progress_at", limit):
        if (run.progress_at or run.created_at) > threshold:
            break  # oldest first: the rest moved recently
        swept.append(await resume_run(deps, run, threshold))
    # Queued runs the sweeper has not looked at yet (progress_at null) first, then the ones it
    # looked at longest ago: a run still waiting its turn goes to the back (progress_at = now),
    # so a page of them never hides a queued run whose start was lost behind them.
    for run in await deps.store.runs.runs_in_status(RunStatus.QUEUED, "progress_at", limit):
        if (run.progress_at or run.created_at) > threshold:
            break
        if (started := await _start_if_free(deps, run)) is not None:
            swept.append(started)
        else:
            await deps.store.waits.sweep_run_at(run.run_id, deps.clock.now(),
                                                if_progress_at=run.progress_at)
    for item in swept:
        log.warning("sweeper: run %s %s (%s)", item.run_id, item.action, item.detail)
    try:  # schedules: the catalog's synced, and what a lost wake left due fired
        await sweep_schedules(deps)
    except Exception:
        log.exception("sweeper: the schedules' pass failed; the next sweep tries again")
    return swept


async def resume_run(deps: Deps, run: RunRecord, threshold: float) -> Swept:
    steps = await deps.store.steps.list_steps(run.run_id)
    now = deps.clock.now()
    with tracing.run_context(run.run_id, run.trace_id):
        resolved = await waits.sweep_waits(deps, run, steps, now)
    if resolved is not None:
        return Swept(run.run_id, "resumed", resolved)
    busy = [s.key for s in steps if s.lease_expires_at > now or s.not_before > now
            or max(s.started_at, s.completed_at or 0.0) > threshold]
    if busy:
        # Steps do not move the run's progress_at (a model step does not write the run): look
        # again stale_after from the newest step's activity, not at every sweep; from now when
        # a call is still in flight (a live lease, a retry to come), whose start may be long
        # past. Either way the run leaves the front of the sweeper's queue, so runs with long
        # calls never hide a stalled run behind them (R6).
        newest = max(max(s.started_at, s.completed_at or 0.0) for s in steps)
        in_flight = any(s.lease_expires_at > now or s.not_before > now for s in steps)
        at = now if in_flight else min(newest, now)
        if at > (run.progress_at or run.created_at):
            await deps.store.waits.sweep_run_at(run.run_id, at, if_progress_at=run.progress_at)
        return Swept(run.run_id, "progressing", f"step {busy[-1]} is live")
    needed = next_messages(run, steps)
    waiting = [s for s in steps if _undecided(s)]
    if not needed and waiting:
        # Nothing to do before a decision or the earliest deadline (or, for a call waiting
        # for a child run, before the next look at the child): look again then.
        at = min(waits.look_at(deps, s.waiting, now) for s in waiting if s.waiting)
        await deps.store.waits.sweep_run_at(run.run_id, at, if_progress_at=run.progress_at)
        return Swept(run.run_id, "waiting", f"{', '.join(s.key for s in waiting)} wait(s) "
                     "for a decision")
    if not needed:
        cause = (f"stalled at {steps[-1].key if steps else 'its start'} with nothing left to "
                 "send")
        ended = await end_run_now(deps, run.run_id, run_end(
            StopReason.FAILED, Usage(), error=f"swept: {cause}"), only_active=True)
        return Swept(run.run_id, "failed" if ended else "progressing", cause)
    if not steps:
        # Its first step was never sent (the API's publish failed after its commit): the run
        # starts now, and the time it sat unsent is not taken from its max_seconds.
        await deps.store.waits.start_clock_again(run.run_id, now, if_progress_at=run.progress_at)
    with tracing.run_context(run.run_id, run.trace_id):  # the re-sent steps join the run's trace
        await send(deps, run.run_id, needed)
    targets = ", ".join(str(o.target_step) for o in needed)
    return Swept(run.run_id, "resumed", f"re-sent {targets}")


def next_messages(run: RunRecord, steps: list[StepRecord]) -> list[Outgoing]:
    """The step messages ``run`` needs to move on, read from its ledger. Pure.

    Every step message is deterministic: the first model step's is fixed, a tool step's is in
    its model step's outbox, and a model step's is in its predecessor's outbox or follows from
    the turn's tool messages (the join). Steps that completed, or that were never claimed but
    are not due yet, need nothing.
    """
    if not steps:
        return [first_step(run.run_id)]
    by_key = {s.key: s for s in steps}
    turn = max(s.turn for s in steps)
    model = by_key.get(str(StepKey.model(turn)))
    if model is None or model.status is not StepStatus.COMPLETED:
        message = scheduled_model_message(run.run_id, turn, by_key)
        return [message] if message is not None else []
    pending = [o for o in model.outbox if o.target_step and o.topic != "answers"
               and _unfinished(by_key.get(o.target_step))]
    # A step waiting for a decision needs none of its messages until it is decided; one that
    # is decided but still waits lost its re-send, which this sends again.
    tools = [o for o in model.outbox if o.topic == "tool_steps"]
    if not pending and tools and all(_done(by_key.get(str(o.target_step))) for o in tools):
        return [_joined(tools[0], model)]  # every tool is done; the join never fired
    return pending


def _joined(tool: Outgoing, model: StepRecord) -> Outgoing:
    return after_tools(ToolStepMessage.model_validate(tool.data), model.result)


def _done(step: StepRecord | None) -> bool:
    return step is not None and step.status is StepStatus.COMPLETED


def _unfinished(step: StepRecord | None) -> bool:
    return step is None or (step.status is not StepStatus.COMPLETED and not _undecided(step))


def _undecided(step: StepRecord) -> bool:
    return step.status is StepStatus.WAITING and step.decision is None


async def _start_if_free(deps: Deps, run: RunRecord) -> Swept | None:
    """A queued run whose conversation has no active run: its start message was lost."""
    conv = await deps.store.runs.get_conversation(run.conversation_id)
    active = conv.active_run_id if conv else None
    if active == run.run_id:
        return None  # promoted already; the running pass looks after it
    if active is not None:
        other = await deps.store.runs.get_run(str(active))
        if other is not None and not other.status.terminal:
            return None  # still waiting its turn
    started = await deps.store.runs.promote_queued(run.run_id, deps.clock.now())
    if not started:
        return None
    # In the run's own trace, not the sweeper's.
    await send(deps, run.run_id, [first_step(run.run_id, other_run=True, trace_id=run.trace_id)])
    return Swept(run.run_id, "started", "its conversation was free")
