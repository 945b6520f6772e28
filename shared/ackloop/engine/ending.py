"""Ending runs outside a step's commit, and what every end says: its status, its log line,
its answer on the answers topic."""

from __future__ import annotations

import logging
from typing import Any

from ackloop.domain.cost import Cost
from ackloop.domain.records import RunRecord, RunStatus, StepRecord, StepStatus, StopReason
from ackloop.domain.wire import Usage
from ackloop.engine import children, concurrency, outbox_entries
from ackloop.engine.deps import Deps
from ackloop.engine.handoff import ended_with
from ackloop.engine.outbox_sending import send
from ackloop.engine.spend import rolled_up, steps_usage
from ackloop.engine.waits import core as waits
from ackloop.store import RunEnd
from ackloop.telemetry import metrics
from ackloop.telemetry.masking import mask_secrets

log = logging.getLogger(__name__)

STOP_STATUS = {
    StopReason.ANSWERED: RunStatus.COMPLETED,
    StopReason.FINAL_TOOL: RunStatus.COMPLETED,
    StopReason.MAX_STEPS: RunStatus.COMPLETED,
    StopReason.MAX_SECONDS: RunStatus.COMPLETED,
    StopReason.MAX_TOOL_CALLS: RunStatus.COMPLETED,
    StopReason.MAX_TOKENS: RunStatus.COMPLETED,
    StopReason.CANCELLED: RunStatus.CANCELLED,
    StopReason.FAILED: RunStatus.FAILED,
}


def run_end(stop_reason: StopReason, usage: Usage, **fields: Any) -> RunEnd:
    """A run's end as the store writes it and its answer tells it: the error it ends with is
    stored and published, so never with a credential in it (the store masks nothing)."""
    if fields.get("error") is not None:
        fields["error"] = mask_secrets(fields["error"])
    return RunEnd(status=STOP_STATUS[stop_reason], stop_reason=stop_reason, usage=usage, **fields)


async def end_run_now(deps: Deps, run_id: str, end: RunEnd, *,
                      only_active: bool = False) -> RunRecord | None:
    """End a run outside any step (dead letter, conflict, sweeper, cancel of a queued run),
    then publish its end, start the conversation's next queued run, cancel its children still
    running and give back the slots it held as a run at work. None: nothing ended.

    The run's usage and cost are rolled up from its steps as recorded (no step message carries
    them here): a run whose model step completed before a dead letter ended it says so."""
    found = await deps.store.runs.get_run(run_id)
    if found is None or found.status.terminal:
        return None
    steps = await deps.store.steps.list_steps(run_id)
    usage, cost, ending = await _counted(deps, found, steps)
    end = end.model_copy(update={  # a hand-off survives any end
        "usage": usage, "cost": cost, "children_ending": ending,
        "agent": end.agent or ended_with(found, steps)})
    now = deps.clock.now()
    ended = await deps.store.runs.end_run_now(run_id, end, now, only_active=only_active)
    if ended is None:
        return None
    run, next_run_id = ended
    metrics.run_finished(run.agent, end.status.value, end.stop_reason.value)
    log_finished(run, end, now)
    outbox = outbox_entries.ends(run, end)
    if next_run_id is not None:
        queued = await deps.store.runs.get_run(next_run_id)  # its trace: the message carries it
        outbox.append(outbox_entries.first_step(next_run_id, other_run=True,
                                          trace_id=queued.trace_id if queued else None))
    await send(deps, run_id, outbox)
    await waits.abandon_all(deps, run, steps)  # a child of an ended run works for nobody
    await concurrency.give_back_run(deps, run)  # the next run in line need not wait its lease
    return run


async def _counted(deps: Deps, run: RunRecord, steps: list[StepRecord]
                   ) -> tuple[Usage, Cost, tuple[str, ...]]:
    """The run's usage and cost from its steps as recorded, and what each call that has not
    completed counts of what it waits for (:func:`waits.counted_at_end`: a child's end
    already on its step, or come meanwhile): the figures its completion would have added;
    and the children still working, whose ends add theirs to the ended run."""
    usage, cost = steps_usage(steps), rolled_up(run, steps)
    ending: list[str] = []
    for step in steps:
        if step.kind == "tool" and step.status is not StepStatus.COMPLETED:
            figures, still = await waits.counted_at_end(deps, run, step)
            ending += [still] if still is not None else []
            if (child_usage := children.child_usage(figures)) is not None:
                usage = usage.with_child(child_usage)
            if (child_cost := children.child_cost(figures)) is not None:
                cost = cost.plus(child_cost.as_child())
    return usage, cost, tuple(ending)


def log_finished(run: RunRecord, end: RunEnd, now: float) -> None:
    """The one line a run's end logs, after the commit that ended it (a redelivery finds the
    run ended and commits nothing, so it logs nothing).

    ``steps`` are the run's own; ``usage`` and ``cost`` count its child runs' too, and a run
    that has children has their part apart (``usage.children``, ``children_usage``;
    ``cost.children_usd``, ``children_usd``). Each child's own line names its parent
    (``parent_run_id``)."""
    own = end.usage.own()
    fields: dict[str, Any] = {
        "run_id": run.run_id, "agent": run.agent, "conversation_id": run.conversation_id,
        "status": end.status.value, "stop_reason": end.stop_reason.value,
        "elapsed_seconds": round(run.seconds(now), 3),
        "steps": own.model_calls + own.tool_calls,
        "usage": end.usage.model_dump(mode="json"),
        "cost": (end.cost or Cost()).model_dump(mode="json"),
    }
    if end.usage.children is not None:
        fields["children_usage"] = end.usage.children.model_dump(mode="json")
    if end.cost is not None and end.cost.children_usd:
        fields["children_usd"] = end.cost.children_usd
    if run.parent_run_id is not None:
        fields["parent_run_id"] = run.parent_run_id
    log.info("run finished", extra={"fields": fields})


async def publish_end(deps: Deps, run: RunRecord) -> None:
    """Publish an ended run's end again (the answers topic is at least once)."""
    if run.status.terminal and run.stop_reason is not None:
        end = RunEnd(**run.outcome())
        await send(deps, run.run_id, outbox_entries.ends(run, end))


async def cancel_run(deps: Deps, run_id: str) -> RunRecord | None:
    """Cancel a run: a queued one ends at once; a running one stops at its next step, and its
    waits are rejected (``by`` ``cancel``)."""
    run = await deps.store.runs.get_run(run_id)
    if run is not None and run.status is RunStatus.QUEUED:
        ended = await end_run_now(deps, run_id, run_end(StopReason.CANCELLED, run.usage,
                                                        error="cancelled before it started"))
        if ended is not None:
            return ended
    # A running one has its waits rejected and what they wait for abandoned: its sub-agents'
    # runs stop too, and theirs in turn (the same pass the sweeper makes, :mod:`waits`).
    return await waits.cancel_tree(deps, run_id)
