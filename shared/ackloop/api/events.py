"""A run's events, derived from its documents: each completed step once, then the end.

The step documents are the log: one per step, whatever the number of deliveries or attempts,
so a retried step is one event. Events go out in key order (execution order), and a step is
sent only when every step before it that the run has announced (a model step's outbox names
the tool steps it started) has completed too, so a cursor (the last key sent) never skips a
step that completes later. The stream polls: one run read and one range read of the current
turn's steps per poll.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

from ackloop.api.models import Event, FinishedEvent, StepEvent, StepView
from ackloop.keys import StepKey
from ackloop.records import RunRecord, StepRecord, StepStatus
from ackloop.store import AgentStore

END = "end"
LAST_KEY = "9999-tool-999"
HEARTBEAT_SECONDS = 15.0


def _range_start(cursor: str | None) -> str:
    if cursor is None:
        return str(StepKey.model(0))
    return str(StepKey.model(StepKey.parse(cursor).turn))


def deliverable(steps: list[StepRecord], cursor: str | None, terminal: bool) -> list[StepRecord]:
    """The steps after ``cursor`` that can be sent now, in key order.

    While the run goes on, sending stops at the first step (recorded or only announced) that
    has not completed; once the run has ended, the completed ones are all sent.
    """
    by_key = {s.key: s for s in steps}
    announced = {
        o.target_step for s in steps if s.status is StepStatus.COMPLETED for o in s.outbox
        if o.target_step is not None
    }
    ready = []
    for key in sorted(set(by_key) | announced, key=StepKey.parse):
        if cursor is not None and StepKey.parse(key) <= StepKey.parse(cursor):
            continue
        step = by_key.get(key)
        if step is not None and step.status is StepStatus.COMPLETED:
            ready.append(step)
        elif not terminal:
            break
    return ready


async def run_events(
    store: AgentStore,
    run_id: str,
    after: str | None,
    *,
    poll_seconds: float,
    max_seconds: float,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[Event | None]:
    """Events of ``run_id`` after cursor ``after``, until the run ends or ``max_seconds`` pass.

    Yields ``None`` when nothing happened for :data:`HEARTBEAT_SECONDS` (a keep-alive tick).
    """
    if after == END:
        return
    cursor = after
    began = clock()
    quiet_since = began
    while True:
        run: RunRecord | None = await store.get_run(run_id)
        if run is None:
            return
        terminal = run.status.terminal  # read before the steps: all of them are in by then
        steps = await store.steps_in_range(run_id, _range_start(cursor), LAST_KEY)
        for step in deliverable(steps, cursor, terminal):
            cursor = step.key
            quiet_since = clock()
            yield StepEvent(cursor=step.key, run_id=run_id, step=StepView.of(step))
        if terminal:
            yield FinishedEvent.of(run)
            return
        now = clock()
        if now - began >= max_seconds:
            return
        if now - quiet_since >= HEARTBEAT_SECONDS:
            quiet_since = now
            yield None
        await asyncio.sleep(poll_seconds)


def ndjson(event: Event) -> str:
    """One line of an ``application/x-ndjson`` stream."""
    return event.model_dump_json() + "\n"


def sse(event: Event | None) -> str:
    """One Server-Sent Event (``id`` is the cursor, for ``Last-Event-ID``), or a comment."""
    if event is None:
        return ": keep-alive\n\n"
    data = json.dumps(event.model_dump(mode="json"), separators=(",", ":"))
    return f"id: {event.cursor}\nevent: {event.type}\ndata: {data}\n\n"
