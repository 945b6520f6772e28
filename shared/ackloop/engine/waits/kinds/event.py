"""A call that waits for a named event (``Tool.awaits_event``): sent by anyone allowed to
(``POST /runs/{id}/events/{name}``, the CLI, Pub/Sub), kept on the run when it comes before
the call waits, and read by the tool as ``context.event``."""

from __future__ import annotations

from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import RunRecord, StepDecision, Waiting
from ackloop.engine.deps import Deps
from ackloop.engine.waits.kind import Wait, WaitKind, call_of, utc
from ackloop.store import DecisionRefused
from ackloop.tools.definition import Tool


def _of(tool: Tool, args: JsonDict, now: float) -> Wait | None:
    event = tool.awaited_event(args)
    return Wait(tool, KIND, event) if event is not None else None


async def _arrived(deps: Deps, run: RunRecord, key: str, waiting: Waiting
                   ) -> StepDecision | None:
    """The event the run keeps under the awaited name (it may come before any call waits)."""
    kept = run.received.get(waiting.event or "")
    if kept is None:
        return None
    try:
        event = await deps.store.waits.event_payload(run.run_id, waiting.event or "", kept)
    except DecisionRefused:
        return None  # its payload is gone: the deadline rejects the call
    return StepDecision(decision="received", payload=event.payload, by=event.by,
                        at=deps.clock.now())


KIND = WaitKind(
    "event", clock_runs=False, announced=True, shown_as="event", of=_of,
    label=lambda waiting: ("waiting for", f"event {waiting.event}"),
    awaits=lambda run_id, waiting: (f"the event {waiting.event!r} (POST /runs/{run_id}/events/"
                                    f"{waiting.event})"),
    missed=lambda waiting: f"no {waiting.event!r} event before the deadline",
    told=lambda run_id, key, waiting: [
        f"run {run_id} waits for the event {waiting.event!r} in {call_of(waiting)} at step "
        f"{key}, until {utc(waiting.deadline)}",
        f"  send: ackloop runs send-event {run_id} {waiting.event} [--payload JSON]"],
    timeout=lambda tool: tool.event_timeout_seconds, arrived=_arrived)
